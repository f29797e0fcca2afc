#!/usr/bin/env python3
"""One Dask operation on a 2-worker LocalCluster (processes), for bench/run's
"dask" benchmark: --op shuffle, merge (of two frames), set_index or
groupby (.agg(split_out=32)), through --method ushuffle (a ushuffled per
Dask worker, started by ushuffle.dask.install), p2p (current Dask's
default with a distributed client), tasks or disk (partd). Rows are made on the workers (the client
holds none), persisted there before the clock starts (unless
--no-persist: a frame larger than the workers' memory is made inside the
timed graph), and the result is consumed there (each output partition's
length, or with --verify its rows, sums and whether each row is where it
belongs, comes back). Prints one JSON object: wall time, peak RSS (sampled
every 50 ms) and CPU seconds of each Dask worker process and each
ushuffled, and ushuffle's phase times summed over the workers.

Frames: "numeric" (an int64 key drawn uniformly, three float64) or
"mixed" (a heavily skewed int64 key, a quarter of the rows on one value;
an id string and a five-valued string, both with nulls; an int64; a
float64 with NaNs).

The interpreter of python/venv.sh's environment (python/constraints.txt:
dask, distributed, pandas, pyarrow, psutil); PYTHONPATH must reach the
ushuffle package (<build>/python).
"""
import argparse
from concurrent.futures import TimeoutError
import json
import os
import threading
import time

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil
from dask.dataframe.shuffle import partitioning_index
from distributed import Client, LocalCluster, wait

import ushuffle.dask as ud
from ushuffle import deploy

WORDS = np.array(["alpha", "beta", "gamma", "delta", "épsilon"], object)


def numeric(i, rows, keys):
    rng = np.random.default_rng(i)
    return pd.DataFrame({"k": rng.integers(0, keys, rows),
                         "a": rng.random(rows), "b": rng.random(rows),
                         "c": rng.random(rows)})


def mixed(i, rows, keys):
    rng = np.random.default_rng(i)
    k = rng.integers(0, keys, rows)
    k[rng.random(rows) < 0.25] = 42
    ids = rng.integers(0, 10**9, rows)
    s = np.array([f"user-{v:09d}" for v in ids], object)
    s[rng.random(rows) < 0.1] = None
    w = WORDS[rng.integers(0, len(WORDS), rows)]
    w[rng.random(rows) < 0.2] = None
    f = rng.random(rows)
    f[rng.random(rows) < 0.1] = np.nan
    return pd.DataFrame({"k": k, "s": s, "i": ids, "w": w, "f": f})


def unique_keys(i, rows, keys):
    """The right side of a merge: every key once (partition i holds
    [i * rows, (i + 1) * rows)), so the merge yields one row per left
    row whose key is below keys."""
    df = (mixed if FRAME == "mixed" else numeric)(i + 10**6, rows, keys)
    df["k"] = np.arange(i * rows, (i + 1) * rows)
    return df


FRAME = "numeric"
MAKERS = {"numeric": numeric, "mixed": mixed}


def row_bytes(make):
    return make(0, 10000, 10**6).memory_usage(deep=True, index=False).sum() \
        / 10000


class Peak(threading.Thread):
    """Samples the RSS of pids until stopped; keeps each one's peak."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self.halt = threading.Event()

    def start(self):
        # CPU from the clock's start: not the making of the rows, which
        # comes between __init__ and start.
        self.cpu0 = [self.cpu(p) for p in self.procs]
        super().start()

    @staticmethod
    def cpu(p):
        t = p.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def cpu_s(self):
        """CPU seconds (user + sys) of each process since the start."""
        out = []
        for p, c in zip(self.procs, self.cpu0):
            try:
                out.append(self.cpu(p) - c)
            except psutil.Error:  # a worker Dask restarted
                out.append(None)
        return out

    def run(self):
        while not self.halt.wait(0.05):
            for i, p in enumerate(self.procs):
                try:
                    self.peak[i] = max(self.peak[i], p.memory_info().rss)
                except psutil.Error:
                    pass


def frame(a, make, rows, keys):
    df = dd.from_map(make, range(a.partitions), rows=rows, keys=keys,
                     meta=make(0, 0, 1))
    if a.persist:
        df = df.persist()
        wait(df)
    return df


def build(a, rows):
    """The operation's output collection, and how many rows it holds."""
    make = MAKERS[a.frame]
    keys = rows * a.partitions
    df = frame(a, make, rows, keys)
    if a.op == "shuffle":
        return df.shuffle("k", shuffle_method=a.method), rows * a.partitions
    if a.op == "merge":
        right = frame(a, unique_keys, rows, keys)
        return dd.merge(df, right, on="k", shuffle_method=a.method,
                        npartitions=a.partitions), rows * a.partitions
    if a.op == "set_index":
        return df.set_index("k", shuffle_method=a.method), rows * a.partitions
    agg = {"f": "sum", "i": "max"} if a.frame == "mixed" else \
        {"a": "sum", "b": "max"}
    return df.groupby("k").agg(agg, split_out=32, shuffle_method=a.method), None


def check(part, j, nparts, op):
    """An output partition's rows, key sum, and whether every row is in
    the partition its key hashes to (shuffle) or the partition is sorted
    (set_index)."""
    ok = True
    if op == "shuffle" and len(part):
        ok = bool((np.asarray(partitioning_index(part[["k"]], nparts))
                   == j).all())
    if op == "set_index":
        ok = part.index.is_monotonic_increasing
    k = np.asarray(part.index if op == "set_index" else part["k"])
    return pd.DataFrame({"rows": [len(part)], "ksum": [int(k.sum())],
                         "ok": [ok]})


def main():
    global FRAME
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", required=True,
                    choices=["ushuffle", "p2p", "tasks", "disk"])
    ap.add_argument("--op", default="shuffle",
                    choices=["shuffle", "merge", "set_index", "groupby"])
    ap.add_argument("--frame", default="numeric", choices=list(MAKERS))
    ap.add_argument("--bytes", type=int, required=True,
                    help="bytes of rows per side (in memory, as pandas "
                    "counts them)")
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--ushuffled")
    ap.add_argument("--durable", action="store_true",
                    help="ushuffled syncs every commit (install(durable="
                    "True): --sync=full --direct=1), as before the "
                    "unsynced default")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per Dask worker")
    ap.add_argument("--memory-limit", default="auto",
                    help="each Dask worker's memory_limit")
    ap.add_argument("--no-persist", dest="persist", action="store_false",
                    help="make the rows inside the timed graph")
    ap.add_argument("--timeout", type=float,
                    help="seconds after which the run gives up (an error)")
    ap.add_argument("--verify", action="store_true",
                    help="check the rows, key sums and placement of every "
                    "output partition (shuffle and set_index)")
    a = ap.parse_args()
    FRAME = a.frame
    rows = int(a.bytes / row_bytes(MAKERS[a.frame]) / a.partitions)
    dask.config.set({"temporary-directory": a.scratch})
    print(json.dumps(run(a, rows)))


def run(a, rows):
    with LocalCluster(n_workers=2, threads_per_worker=a.threads,
                      processes=True, memory_limit=a.memory_limit,
                      dashboard_address=None,
                      local_directory=a.scratch) as cluster, \
            Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        procs = []
        if a.method == "ushuffle":  # a ushuffled per Dask worker
            opts = ud.install(client, replicas=1, ushuffled=a.ushuffled,
                              per_worker=True, durable=a.durable)
            procs = list(deploy.pids(client).values())
            ud.register(**opts)  # shuffle="ushuffle" in Dask's operations
        peak = Peak(pids + procs)
        out, want = build(a, rows)
        base = [psutil.Process(p).memory_info().rss for p in pids]
        peak.start()
        t = time.perf_counter()
        error = None
        try:
            if a.verify:
                n = out.npartitions  # not out itself in the tasks
                res = out.map_partitions(
                    lambda p, partition_info=None: check(
                        p, partition_info["number"], n, a.op),
                    meta={"rows": int, "ksum": int, "ok": bool})
            else:
                res = out.map_partitions(len)
            got = client.compute(res).result(timeout=a.timeout)
        except TimeoutError:
            error, got = f"gave up after {a.timeout} s", None
        except Exception as e:  # a method that cannot do it: say so
            error, got = f"{type(e).__name__}: {e}"[:500], None
        wall = time.perf_counter() - t
        peak.halt.set()
        peak.join()
        cpu = peak.cpu_s()
        phases, phases_cpu = {}, {}
        if a.method == "ushuffle" and error is None:
            res = client.run(lambda: (dict(ud.stats), dict(ud.cpu)))
            for st, ct in res.values():
                for k, v in st.items():
                    phases[k] = phases.get(k, 0) + v
                for k, v in ct.items():
                    phases_cpu[k] = phases_cpu.get(k, 0) + v
        limit = [w["memory_limit"] for w in
                 client.scheduler_info()["workers"].values()]
        del out
    res = {"method": a.method, "op": a.op, "frame": a.frame,
           "bytes": a.bytes, "partitions": a.partitions,
           "threads": a.threads, "durable": a.durable, "wall_s": wall,
           "error": error,
           "worker_memory_limit": limit,
           "worker_rss_before": base, "worker_peak_rss": peak.peak[:2],
           "ushuffled_peak_rss": peak.peak[2:], "worker_cpu_s": cpu[:2],
           "ushuffled_cpu_s": cpu[2:], "phases_s": phases,
           "phases_cpu_s": phases_cpu}
    if error is None:
        total = int(got["rows"].sum()) if a.verify else int(got.sum())
        res["rows"] = total
        if want is not None and total != want:
            raise SystemExit(f"{a.method} {a.op}: {total} rows out of "
                             f"{want}")
        if a.verify:
            res["verified"] = verify(a, rows, got)
    return res


def verify(a, rows, got):
    """The output's key sum is the input's, and every row is where it
    belongs: raises SystemExit otherwise."""
    make = MAKERS[a.frame]
    keys = rows * a.partitions
    ksum = sum(int(make(i, rows, keys)["k"].sum())
               for i in range(a.partitions)) if a.op != "merge" else None
    if ksum is not None and int(got["ksum"].sum()) != ksum:
        raise SystemExit(f"{a.method} {a.op}: key sum "
                         f"{int(got['ksum'].sum())}, not {ksum}")
    if not got["ok"].all():
        raise SystemExit(f"{a.method} {a.op}: rows in the wrong partition")
    return {"partitions": len(got), "rows": got["rows"].tolist(),
            "ksum": ksum}


if __name__ == "__main__":
    main()
