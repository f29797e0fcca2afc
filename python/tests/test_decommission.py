"""Decommission through the bindings and Dask (docs/operations.md,
"Decommission"): a writer given a list with a draining worker raises
nothing and places its map on the other; readers find it; the drained
worker serves its shuffle until it is dropped, then exits 0."""
import contextlib
import signal
import tempfile
import time
import urllib.request

import dask.dataframe as dd
import pytest
from distributed import wait

import ushuffle
import ushuffle.dask as ud

from conftest import Workers
from test_dask import assert_same, frame

APP = "decom-py"


def _metric(url, name):
    with urllib.request.urlopen(url, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(line.split()[1])
    raise AssertionError(f"{url} has no {name}")


def _write(addr, shuffle, parts=8, n=200):
    with ushuffle.Ring() as ring, \
            ushuffle.Writer(ring, shuffle, 0, 0, parts, target="net",
                            workers=addr, app=APP) as w:
        for i in range(n):
            w.write(i % parts, b"%d:%d" % (shuffle, i))
        return w.commit()


def _read(st, shuffle, parts=8, n=200):
    got = []
    for p in range(parts):
        with ushuffle.Reader(p, [st]) as r:
            got += [bytes(v) for v in r]
    assert sorted(got) == sorted(b"%d:%d" % (shuffle, i) for i in range(n))


def _until(cond):
    end = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


@contextlib.contextmanager
def _one_drained():
    """Two workers both holding shuffle 1 (its status is yielded with
    them), worker 0 drained (SIGUSR2, seen in its metrics)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as root:
        w = Workers(root)
        try:
            old = _write(w.addr, 1)
            w.procs[0].send_signal(signal.SIGUSR2)
            _until(lambda: _metric(w.metrics[0], "ushuffled_decommissioning"))
            yield w, old
        finally:
            w.procs[0].kill()  # exited already, unless the test failed
            w.procs[0].wait()
            w.procs[1].terminate()
            assert w.procs[1].wait(timeout=30) == 0


def test_drained_worker_is_skipped_then_exits():
    with _one_drained() as (w, old):
        new = _write(w.addr, 2)  # raises nothing
        assert w.held() == [1, 2]  # shuffle 2 went to worker 1 only
        _read(new, 2)
        _read(old, 1)  # the drained worker serves what it holds
        # A list of the draining worker alone: refused, saying why.
        with ushuffle.Ring() as ring, \
                pytest.raises(ushuffle.Draining) as e:
            ushuffle.Writer(ring, 3, 0, 0, 2, target="net",
                            workers=w.addr.split(",")[0], app=APP)
        assert e.value.name == "USH_EDRAINING"
        assert "every worker is decommissioning" in str(e.value)
        ushuffle.shuffle_drop(w.addr, APP, 2)
        assert w.procs[0].poll() is None
        ushuffle.shuffle_drop(w.addr, APP, 1)
        assert w.procs[0].wait(timeout=30) == 0


def test_dask_shuffle_beside_a_drained_worker(client):
    """A Dask shuffle given both workers while one drains: the same rows
    as Dask's own shuffle, all of them on the other worker; the drained
    one exits once its own shuffle is dropped."""
    with _one_drained() as (w, _):
        ddf = dd.from_pandas(frame(5000, 3), npartitions=3)
        p = ud.shuffle(ddf, "k", npartitions=4, workers=w.addr).persist()
        wait(p)
        held = w.held()
        assert held[0] == 1 and held[1] == 2, held
        assert_same(client, p,
                    ddf.shuffle("k", npartitions=4, shuffle_method="tasks"))
        del p  # the scheduler's plugin drops it on both workers
        _until(lambda: w.held()[1] == 1)
        ushuffle.shuffle_drop(w.addr, APP, 1)
        assert w.procs[0].wait(timeout=30) == 0
