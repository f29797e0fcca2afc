"""ushuffle.dask.install across two hosts: the Dask workers of each in a
network namespace of its own, joined to this one by a bridge, with
addresses from the benchmarking range 198.19.0.0/16. One ushuffled per
host, labelled by it; one killed during a replicated shuffle loses
nothing; closing the cluster stops both and removes their directories.
docs/python.md's first example runs there as written.
Skips where namespaces cannot be made (no CAP_NET_ADMIN, no ip(8))."""
import contextlib
import functools
import os
import subprocess
import sys

import dask.dataframe as dd
import pytest
from distributed import Client

import ushuffle.dask as ud
from ushuffle import deploy
from test_dask import assert_same, frame
from test_deploy import alive, kill
from test_docs_example import run_example, wait_file


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def hosts():
    """([namespace], [address], the bridge's address)."""
    pid = os.getpid()
    br, k = f"ushb{pid % 100000}", pid % 250
    ns = [f"ush-py{pid}-{i}" for i in range(2)]
    addrs = [f"198.19.{k}.{2 + i}" for i in range(2)]
    try:
        sh("ip", "link", "add", br, "type", "bridge")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("cannot create a bridge (no CAP_NET_ADMIN or ip(8))")
    try:
        sh("ip", "addr", "add", f"198.19.{k}.1/24", "dev", br)
        sh("ip", "link", "set", br, "up")
        for i, n in enumerate(ns):
            sh("ip", "netns", "add", n)
            sh("ip", "link", "add", f"{br}{i}", "type", "veth", "peer",
               "name", "p0", "netns", n)
            sh("ip", "link", "set", f"{br}{i}", "master", br)
            sh("ip", "link", "set", f"{br}{i}", "up")
            sh("ip", "-n", n, "addr", "add", f"{addrs[i]}/24", "dev", "p0")
            sh("ip", "-n", n, "link", "set", "p0", "up")
            sh("ip", "-n", n, "link", "set", "lo", "up")
        yield ns, addrs, f"198.19.{k}.1"
    finally:
        for n in ns:  # takes its end of the veth pair, and ours
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        subprocess.run(["ip", "link", "del", br], capture_output=True)


@contextlib.contextmanager
def two_hosts(hosts, tmp_path):
    """A dask-scheduler here and a dask-worker in each namespace; yields
    the scheduler file and the processes (which the caller shuts down);
    kills what is left at the end."""
    ns, addrs, mine = hosts
    sched_file = str(tmp_path / "scheduler.json")
    # The workers unpickle on_commit's kill from test_deploy, and so does
    # the scheduler, which lowers the expression that carries it (and
    # imports ushuffle.dask to lower it).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__)] + sys.path))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", mine,
         "--port", "0", "--dashboard-address", ":0",
         "--scheduler-file", sched_file], stderr=subprocess.DEVNULL,
        env=env)]
    try:
        wait_file(sched_file, procs[0])
        for n, a in zip(ns, addrs):
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", n, sys.executable, "-m",
                 "distributed.cli.dask_worker", "--scheduler-file",
                 sched_file, "--host", a, "--nthreads", "1",
                 "--local-directory", str(tmp_path / a),
                 "--dashboard-address", ":0"], stderr=subprocess.DEVNULL,
                env=env))
        yield sched_file, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_hosts(hosts, tmp_path):
    ns, addrs, mine = hosts
    with two_hosts(hosts, tmp_path) as (sched_file, procs):
        with Client(scheduler_file=sched_file) as client:
            client.wait_for_workers(2, timeout=120)
            opts = ud.install(client, replicas=2)
            pids = deploy.pids(client)
            assert sorted(w.split("@")[1] for w in pids) == sorted(addrs)
            assert all(w.split(":")[0] == w.split("@")[1] for w in pids)
            ddf = dd.from_pandas(frame(20000, 5, skew=True), npartitions=4)
            victim = sorted(pids.values())[0]
            ours = ud.shuffle(ddf, "k", npartitions=5, on_commit=functools
                              .partial(kill, victim), **opts)
            assert_same(client, ours, ddf.shuffle("k", npartitions=5,
                                                  shuffle_method="tasks"))
            assert not alive(victim)
            client.shutdown()  # the scheduler and its workers
        for p in procs:
            p.wait(timeout=60)
        for pid in pids.values():
            assert not alive(pid)
        for a in addrs:
            for base, dirs, _ in os.walk(tmp_path / a):
                assert "ushuffled" not in dirs, base


def test_first_example_two_hosts(hosts, tmp_path):
    """docs/python.md's first example, as written, on two hosts: one
    ushuffled each, replicas 2 (install()'s default there)."""
    ns, addrs, mine = hosts
    with two_hosts(hosts, tmp_path) as (sched_file, procs):
        with Client(scheduler_file=sched_file) as client:
            client.wait_for_workers(2, timeout=120)
            address = client.scheduler.address
        run_example(address, str(tmp_path / "events"))
        with Client(scheduler_file=sched_file) as client:
            pids = deploy.pids(client)
            assert sorted(w.split("@")[1] for w in pids) == sorted(addrs)
            client.shutdown()
        for p in procs:
            p.wait(timeout=60)
