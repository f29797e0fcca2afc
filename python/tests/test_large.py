"""Larger than memory: a shuffle of 4x the cluster's memory (2 workers x
memory_limit, rows made inside the graph) through ushuffle completes
with no worker paused (Dask's own log of each worker says so), none
restarted, every worker's peak RSS under its limit, and every output
partition holding the rows, key sums and value sums its keys call for.

The limit is sized for current Dask (2026.8, pandas 3, pyarrow): a
worker process holds about 150 MiB before any task and 175 MiB once it
ran a shuffle, and Dask pauses it at 80 % of its memory_limit, so the
old 256 MiB limit left no room for data at all. At 512 MiB it pauses at
410 MiB: about 230 MiB for the rows in flight, 16 MiB partitions in
and out. Minutes, not seconds: ctest runs it apart (label "large"), not
within test_python."""
import os
import threading

import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil
from dask.dataframe.shuffle import partitioning_index
from distributed import Client, LocalCluster

import ushuffle.dask as ud

LIMIT = 512 << 20
WORKERS = 2
PARTS = 256
ROWS = 4 * WORKERS * LIMIT // 32 // PARTS  # k, a, b, c: 32 bytes a row


def make(i):
    rng = np.random.default_rng(i)
    return pd.DataFrame({"k": rng.integers(0, 1 << 40, ROWS),
                         "a": rng.integers(0, 1000, ROWS),
                         "b": rng.random(ROWS), "c": rng.random(ROWS)})


def sums(p, partition_info=None):
    # Each row where Dask puts it: current Dask hashes a numeric key as
    # float64 (dask_expr's AssignPartitioningIndex).
    ok = not len(p) or bool((np.asarray(partitioning_index(
        p[["k"]], PARTS, cast_dtype={"k": np.float64})) ==
        partition_info["number"]).all())
    return pd.DataFrame({"rows": [len(p)], "k": [int(p["k"].sum())],
                         "a": [int(p["a"].sum())], "ok": [ok]})


class Peak(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self.halt = threading.Event()

    def run(self):
        while not self.halt.wait(0.02):
            for i, p in enumerate(self.procs):
                try:
                    rss = p.memory_info().rss
                except psutil.NoSuchProcess:  # restarted: asserted below
                    continue
                self.peak[i] = max(self.peak[i], rss)


def pauses(client):
    """The "Pausing worker" lines of each worker's log (Dask's memory
    monitor writes one each time it pauses the worker)."""
    return {w: [m for _, m in lines if "Pausing worker" in m]
            for w, lines in client.get_worker_logs().items()}


def test_four_times_the_memory_limit():
    with LocalCluster(n_workers=WORKERS, threads_per_worker=1,
                      processes=True, memory_limit=LIMIT,
                      dashboard_address=":0") as c, \
            Client(c) as client:
        opts = ud.install(client, replicas=1, per_worker=True)
        meta = make(0).iloc[:0]
        df = dd.from_map(make, range(PARTS), meta=meta)
        want = df.map_partitions(sums, meta=sums(meta, {"number": 0}))
        want = want.compute()
        assert not any(pauses(client).values()), pauses(client)
        pids = list(client.run(os.getpid).values())
        peak = Peak(pids)
        peak.start()
        out = ud.shuffle(df, "k", **opts)
        got = out.map_partitions(sums, meta=sums(meta, {"number": 0}))
        got = got.compute()
        peak.halt.set()
        peak.join()
        assert list(client.run(os.getpid).values()) == pids  # none died
        paused = pauses(client)
    print("peak RSS per worker (MiB):", [p >> 20 for p in peak.peak])
    assert not any(paused.values()), paused
    assert all(p < LIMIT for p in peak.peak), \
        [p >> 20 for p in peak.peak]
    assert len(got) == PARTS and got["ok"].all()
    assert got["rows"].sum() == ROWS * PARTS == want["rows"].sum()
    assert got["k"].sum() == want["k"].sum()
    assert got["a"].sum() == want["a"].sum()
