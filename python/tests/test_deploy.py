"""ushuffle.dask.install on a real cluster of two "hosts" (Dask workers on
127.0.0.1 and 127.0.0.2): one ushuffled each, a secret on no command
line, directories in the workers' local directories, commits unsynced
unless durable=True, a ushuffled killed during the shuffle with replicas
2 losing nothing, and nothing left when the cluster closes."""
import functools
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

import dask.dataframe as dd
from distributed import Client, Nanny, Scheduler, SpecCluster

import ushuffle
import ushuffle.dask as ud
from ushuffle import deploy
from test_dask import assert_same, frame


def cluster(tmp_path):
    def worker(host):
        return {"cls": Nanny, "options": {
            "host": host, "nthreads": 1,
            "local_directory": str(tmp_path / host)}}
    return SpecCluster(
        scheduler={"cls": Scheduler, "options": {
            "host": "127.0.0.1", "dashboard_address": ":0"}},
        workers={"a": worker("127.0.0.1"), "b": worker("127.0.0.2")})


def kill(pid, index):
    """on_commit: the first map's commit kills ushuffled pid."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def unsynced(argv):
    """Whether the ushuffled of argv commits without syncing: its marker
    (docs/operations.md, "Durability") is in its --dir."""
    d = [a for a in argv if a.startswith(b"--dir=")][0].split(b"=", 1)[1]
    return os.path.exists(os.path.join(d, b"unsynced"))


def test_install_durable(tmp_path):
    with cluster(tmp_path) as c, Client(c) as client:
        opts = ud.install(client, replicas=2, durable=True)
        for pid in deploy.pids(client).values():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert not unsynced(f.read().split(b"\0"))
        ddf = dd.from_pandas(frame(5000, 4, skew=True), npartitions=4)
        assert_same(client, ud.shuffle(ddf, "k", npartitions=3, **opts),
                    ddf.shuffle("k", npartitions=3, shuffle_method="tasks"))


def test_install_and_a_lost_ushuffled(tmp_path):
    with cluster(tmp_path) as c, Client(c) as client:
        opts = ud.install(client, replicas=2)
        pids = deploy.pids(client)
        assert sorted(w.split("@")[1] for w in pids) == \
            ["127.0.0.1", "127.0.0.2"]  # one per host, labelled
        for addr, pid in pids.items():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            assert not [a for a in argv if a.startswith(b"--secret-file")]
            apps = apps_dir(pid)
            path = os.path.join(apps, opts["app"])  # this client's secret
            assert os.listdir(apps) == [opts["app"]]
            assert os.stat(apps).st_mode & 0o077 == 0
            assert os.stat(path).st_mode & 0o077 == 0
            with open(path, "rb") as f:
                assert f.read() not in b" ".join(argv)
            host = addr.split(":")[0]
            assert path.startswith(str(tmp_path / host))
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert b"USHUFFLE_SECRET=" not in f.read()
            assert unsynced(argv)  # ushuffled --sync=none by default
        ddf = dd.from_pandas(frame(20000, 4, skew=True), npartitions=4)
        victim = sorted(pids.values())[0]
        ours = ud.shuffle(ddf, "k", npartitions=5,
                          on_commit=functools.partial(kill, victim), **opts)
        assert_same(client, ours, ddf.shuffle("k", npartitions=5,
                                              shuffle_method="tasks"))
        assert not alive(victim)
    for pid in pids.values():
        assert not alive(pid)
    for host in ("127.0.0.1", "127.0.0.2"):
        for base, dirs, _ in os.walk(tmp_path / host):
            assert "ushuffled" not in dirs, base


def apps_dir(pid):
    """The --secrets-dir of the ushuffled pid."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    return [a for a in argv if a.startswith(b"--secrets-dir=")][0] \
        .split(b"=", 1)[1].decode()


def hosting(client):
    """The Dask workers that run a ushuffled."""
    runs = client.run(lambda dask_worker: getattr(
        dask_worker, "_ushuffle_deploy", None) is not None)
    return sorted(a for a, yes in runs.items() if yes)


def test_install_twice_and_a_restarted_worker(tmp_path):
    """One host: replicas 1 by default. A second client's install() gets
    the same workers, leaves the running ushuffled alone and can shuffle
    as an application of its own (its secret from the scheduler, a file
    of its own in ushuffled's --secrets-dir). The Dask worker running ushuffled
    restarted (its ushuffled dies with it): the next shuffle, with the
    options install() returned before, works: the new ushuffled listens
    where the old one did."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None,
                      local_directory=str(tmp_path)) as c, \
            Client(c) as client:
        opts = ud.install(client)
        assert opts["replicas"] == 1
        assert ud.install(client) == opts
        before = deploy.pids(client)
        assert len(before) == 1
        ddf = dd.from_pandas(frame(5000, 8), npartitions=4)
        want = ddf.shuffle("k", npartitions=3, shuffle_method="tasks")
        with Client(c, set_as_default=False) as other:
            theirs = ud.install(other)
            # Another application: its own name and secret, the same
            # ushuffled.
            assert theirs["workers"] == opts["workers"]
            assert theirs["app"] != opts["app"]
            assert deploy.pids(other) == before
            assert sorted(os.listdir(apps_dir(min(before.values())))) == \
                sorted([opts["app"], theirs["app"]])
            assert_same(other, ud.shuffle(ddf, "k", npartitions=3,
                                          **theirs), want)
        assert_same(client, ud.shuffle(ddf, "k", npartitions=3, **opts),
                    want)
        (pid,) = before.values()
        (worker,) = hosting(client)
        client.restart_workers([worker])
        client.wait_for_workers(2, timeout=60)
        assert not alive(pid)
        after = deploy.pids(client)
        assert list(after) == list(before) and list(after.values()) != \
            [pid]
        assert_same(client, ud.shuffle(ddf, "k", npartitions=3, **opts),
                    want)


def test_ushuffled_cannot_start_says_why(tmp_path):
    """A port another socket holds: the error names ushuffled's own
    reason, not an empty line."""
    import socket
    from distributed import LocalCluster
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:
        with LocalCluster(n_workers=1, threads_per_worker=1,
                          processes=True, dashboard_address=None,
                          host="127.0.0.1",
                          local_directory=str(tmp_path)) as c, \
                Client(c) as client:
            import pytest
            with pytest.raises(Exception, match=r"did not start: .*"
                               r"(in use|EADDRINUSE)"):
                ud.install(client, port=port)
    finally:
        held.close()


KILLED_CLIENT = """
import sys, time
from distributed import Client
import ushuffle.dask as ud
client = Client(sys.argv[1])
app = sys.argv[2] if len(sys.argv) > 2 else None
print(ud.install(client, app=app)["app"], flush=True)
time.sleep(600)
"""


def client_process(address, app=None):
    """A client in a process of its own that installs (app) and waits to
    be killed; (process, its app)."""
    p = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, address]
                         + ([app] if app else []),
                         stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def kill_client(p):
    p.kill()
    p.wait()
    p.stdout.close()


def test_killed_client_retired_after_ttl(tmp_path):
    """A client killed (SIGKILL, a process of its own) leaves nothing
    once the workers' TTL has passed: its application's secret file goes
    from ushuffled's --secrets-dir (the data goes at ushuffled's
    --app-ttl, the same time); the other application keeps its own and
    shuffles on. No lock file is made anywhere (the host's lock is an
    abstract socket)."""
    from distributed import LocalCluster
    locks = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                       "ushuffle-dask-*")))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None,
                      local_directory=str(tmp_path)) as c, \
            Client(c) as client:
        opts = ud.install(client, app_ttl_s=1)
        apps = apps_dir(min(deploy.pids(client).values()))
        other, app = client_process(c.scheduler_address)
        try:
            assert app.startswith("dask-") and app != opts["app"]
            assert sorted(os.listdir(apps)) == sorted([opts["app"], app])
        finally:
            kill_client(other)
        end = time.monotonic() + 60
        while app in os.listdir(apps):
            assert time.monotonic() < end, os.listdir(apps)
            time.sleep(0.05)
        assert os.listdir(apps) == [opts["app"]]
        ddf = dd.from_pandas(frame(3000, 9), npartitions=3)
        assert_same(client, ud.shuffle(ddf, "k", npartitions=2, **opts),
                    ddf.shuffle("k", npartitions=2, shuffle_method="tasks"))
    assert set(glob.glob(os.path.join(tempfile.gettempdir(),
                                      "ushuffle-dask-*"))) == locks


def test_install_keeps_other_applications_secrets(workers):
    """install() sets its own application's secret in this process, not
    that of "dask" (the default app of register() and shuffle()), which
    the session's ushuffled hold from $USHUFFLE_SECRET: a test run after
    this one (test_decommission's Dask shuffle) still reaches them."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as c, Client(c) as client:
        assert ud.install(client)["app"] != "dask"
    ushuffle.app_heartbeat(workers.addr, "dask")


def test_shared_app_retired_after_its_last_client(tmp_path):
    """Two clients of one named application: killing the first leaves
    its secret (the second still uses it) past the TTL; killing the
    second retires it."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None,
                      local_directory=str(tmp_path)) as c, \
            Client(c) as client:
        ud.install(client, app_ttl_s=1)
        apps = apps_dir(min(deploy.pids(client).values()))
        a, app = client_process(c.scheduler_address, "shared")
        b, app_b = client_process(c.scheduler_address, "shared")
        try:
            assert app == app_b == "shared"
            kill_client(a)
            time.sleep(3)  # three TTLs: kept, as b uses it
            assert "shared" in os.listdir(apps)
        finally:
            kill_client(b)
        end = time.monotonic() + 60
        while "shared" in os.listdir(apps):
            assert time.monotonic() < end, os.listdir(apps)
            time.sleep(0.05)
