"""Shuffle lifetimes the scheduler tracks (ushuffle.dask.Lifetimes): for
each way a Dask user holds a result, the ushuffled workers keep the
shuffle's data while its keys live and nothing once they are gone, however
the collection objects live on."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import dask
import dask.dataframe as dd
from distributed import Client, LocalCluster, wait

import ushuffle.dask
from conftest import Workers
from test_dask import frame

ROWS = 3000


def shuffled():
    ddf = dd.from_pandas(frame(ROWS, 31), npartitions=3)
    return ddf.shuffle("k", npartitions=4, shuffle_method="ushuffle")


def test_compute_and_recompute(client, registered):
    out = shuffled()
    for _ in range(3):  # each compute a shuffle of its own, then none
        assert len(out.compute()) == ROWS
        assert registered.emptied() == []


def test_persist(client, registered):
    p = shuffled().persist()
    wait(p)
    assert registered.stored()
    assert len(p.compute()) == ROWS
    assert registered.stored(), "dropped under a persisted collection"
    del p
    assert registered.emptied() == []


def test_persist_outlives_app_ttl(monkeypatch):
    """Workers drop the shuffles of an application silent for their
    --app-ttl: the scheduler's plugin heartbeats the application of every
    live shuffle, so a persisted result idle for three TTLs still reads."""
    monkeypatch.setattr(ushuffle.dask, "_HEARTBEAT_S", 0.3)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as root, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=None) as cluster, \
            Client(cluster):
        w = Workers(root, ["--app-ttl=1500"])
        try:
            ushuffle.dask.register(workers=w.addr)
            p = shuffled().persist()
            wait(p)
            time.sleep(4.5)
            assert w.stored(), "expired under a persisted collection"
            assert len(p.compute()) == ROWS
            del p
            assert w.emptied() == []
        finally:
            w.stop()


def test_client_compute(client, registered):
    f = client.compute(shuffled())
    assert len(f.result()) == ROWS
    assert registered.stored()
    del f
    assert registered.emptied() == []


def test_to_delayed(client, registered):
    parts = shuffled().to_delayed()
    fs = client.compute(parts)
    assert sum(map(len, client.gather(fs))) == ROWS
    assert registered.stored()
    del fs
    assert registered.emptied() == []
    assert sum(len(p) for p in dask.compute(*parts)) == ROWS
    assert registered.emptied() == []


def test_closed_client(client, registered):
    with Client(client.scheduler.address) as other:
        p = other.persist(shuffled())
        wait(p)
        assert registered.stored()
    assert registered.emptied() == []


LOST = """
    import os, signal, sys
    import dask.dataframe as dd
    from distributed import Client, wait
    import ushuffle.dask
    from test_dask import frame
    c = Client(sys.argv[1])
    ushuffle.dask.register(workers=sys.argv[2])
    ddf = dd.from_pandas(frame(%d, 32), npartitions=3)
    p = ddf.shuffle("k", npartitions=4, shuffle_method="ushuffle").persist()
    wait(p)
    print("held", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no goodbye to the scheduler
""" % ROWS


def test_lost_client(client, registered):
    here = os.path.dirname(__file__)
    path = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LOST),
                          client.scheduler.address, registered.addr],
                         stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline() == "held\n"
    assert registered.stored()
    assert p.wait(timeout=60) == -signal.SIGKILL
    assert registered.emptied() == []
