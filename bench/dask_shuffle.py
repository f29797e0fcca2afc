#!/usr/bin/env python3
"""One Dask operation on a 2-worker LocalCluster (processes), for bench/run's
"dask" benchmark: --op shuffle, merge (of two frames), set_index,
groupby (.agg(split_out=32)) or merge_groupby (a merge, then a groupby
of its output on another column), through --method ushuffle (a ushuffled per
Dask worker, started by ushuffle.dask.install), p2p (current Dask's
default with a distributed client), tasks or disk (partd). Rows are made on the workers (the client
holds none), persisted there before the clock starts (unless
--no-persist: a frame larger than the workers' memory is made inside the
timed graph), and the result is consumed there (each output partition's
length, or with --verify its rows, sums and whether each row is where it
belongs, comes back). Prints one JSON object: wall time, peak RSS (sampled
every 50 ms) and CPU seconds of each Dask worker process and each
ushuffled, the peak RSS of each "host" (a Dask worker and, with
ushuffle, the ushuffled it started, sampled together), the bytes each
ushuffled wrote, and ushuffle's phase times summed over the workers.

Frames: "numeric" (an int64 key drawn uniformly, three float64),
"mixed" (a heavily skewed int64 key, a quarter of the rows on one value;
an id string and a five-valued string, both with nulls; an int64; a
float64 with NaNs) or "strings" (string-heavy, as event logs are: a
Zipf-skewed int64 key (a = 1.3); a URL of 30-90 bytes, a user agent of
a few dozen values, a referrer with 30 % nulls, a country code; an
int64).

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


HOSTS = np.array([f"www.{w}.example" for w in
                  ("shop", "news", "mail", "video", "maps", "search")], object)
AGENTS = np.array([f"Mozilla/5.0 (X11; Linux x86_64; rv:{v}.0) Gecko/20100101 "
                   f"Firefox/{v}.0" for v in range(100, 140)], object)
COUNTRIES = np.array(["DE", "US", "FR", "JP", "BR", "IN", "NG", "GB"], object)


def strings(i, rows, keys):
    rng = np.random.default_rng(i)
    k = np.minimum(rng.zipf(1.3, rows), keys) - 1
    h = HOSTS[rng.integers(0, len(HOSTS), rows)]
    paths = rng.integers(0, 10**12, rows)
    url = np.array([f"https://{a}/p/{b:x}/{'x' * (b % 48)}"
                    for a, b in zip(h, paths)], object)
    ref = url[rng.permutation(rows)] if rows else url.copy()
    ref[rng.random(rows) < 0.3] = None
    return pd.DataFrame({
        "k": k.astype(np.int64), "url": url,
        "ua": AGENTS[rng.integers(0, len(AGENTS), rows)], "ref": ref,
        "cc": COUNTRIES[rng.integers(0, len(COUNTRIES), rows)],
        "i": rng.integers(0, 10**9, rows)})


def unique_keys(i, rows, keys):
    """The right side of a merge: every key once (partition i holds
    [i * rows, (i + 1) * rows)), so the merge yields one row per left
    row whose key is below keys."""
    df = MAKERS[FRAME](i + 10**6, rows, keys)
    df["k"] = np.arange(i * rows, (i + 1) * rows)
    # merge_groupby's second key: 1,000 groups per partition of input.
    df["g"] = np.random.default_rng(i).integers(0, 1000 * PARTS, rows)
    return df


FRAME = "numeric"
PARTS = 32
MAKERS = {"numeric": numeric, "mixed": mixed, "strings": strings}


def row_bytes(make):
    return make(0, 10000, 10**6).memory_usage(deep=True, index=False).sum() \
        / 10000


class Peak(threading.Thread):
    """Samples the RSS of pids until stopped; keeps each one's peak, and
    the peak of each host's sum (hosts: lists of indices into pids,
    sampled together)."""

    def __init__(self, pids, hosts=()):
        super().__init__(daemon=True)
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self.hosts = [list(h) for h in hosts]
        self.host_peak = [0] * len(self.hosts)
        self.halt = threading.Event()

    def start(self):
        # CPU from the clock's start: not the making of the rows, which
        # comes between __init__ and start.
        self.cpu0 = [self.cpu(p) for p in self.procs]
        self.io0 = [self.written(p) for p in self.procs]
        super().start()

    @staticmethod
    def cpu(p):
        t = p.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    @staticmethod
    def written(p):
        try:
            return p.io_counters().write_bytes
        except psutil.Error:
            return 0

    def cpu_s(self):
        """CPU seconds (user + sys) of each process since the start."""
        out = []
        for p, c in zip(self.procs, self.cpu0):
            try:
                out.append(self.cpu(p) - c)
            except psutil.Error:  # a worker Dask restarted
                out.append(None)
        return out

    def written_bytes(self):
        """Bytes each process wrote to storage since the start."""
        return [self.written(p) - w for p, w in zip(self.procs, self.io0)]

    def run(self):
        while not self.halt.wait(0.05):
            now = [0] * len(self.procs)
            for i, p in enumerate(self.procs):
                try:
                    now[i] = p.memory_info().rss
                except psutil.Error:
                    pass
                self.peak[i] = max(self.peak[i], now[i])
            for j, h in enumerate(self.hosts):
                self.host_peak[j] = max(self.host_peak[j],
                                        sum(now[i] for i in h))


def frame(a, make, rows, keys):
    df = dd.from_map(make, range(a.partitions), rows=rows, keys=keys,
                     meta=make(0, 0, 1))
    if a.persist:
        df = df.persist()
        wait(df)
    return df


AGGS = {"numeric": {"a": "sum", "b": "max"},
        "mixed": {"f": "sum", "i": "max"},
        "strings": {"i": "sum", "cc": "max"}}


def build(a, rows):
    """The operation's output collection, and how many rows it holds."""
    make = MAKERS[a.frame]
    keys = rows * a.partitions
    df = frame(a, make, rows, keys)
    if a.op == "shuffle":
        return df.shuffle("k", shuffle_method=a.method), rows * a.partitions
    if a.op in ("merge", "merge_groupby"):
        right = frame(a, unique_keys, rows, keys)
        out = dd.merge(df, right, on="k", shuffle_method=a.method,
                       npartitions=a.partitions)
        if a.op == "merge":
            return out, rows * a.partitions
        agg = {f"{c}_x": f for c, f in AGGS[a.frame].items()}
        return out.groupby("g").agg(agg, split_out=32,
                                    shuffle_method=a.method), None
    if a.op == "set_index":
        return df.set_index("k", shuffle_method=a.method), rows * a.partitions
    return df.groupby("k").agg(AGGS[a.frame], split_out=32,
                               shuffle_method=a.method), None


def check(part, j, nparts, op):
    """An output partition's rows, key sum, and whether every row is in
    the partition its key hashes to (shuffle) or the partition is sorted
    (set_index)."""
    ok = True
    if op == "shuffle" and len(part):
        # Current Dask hashes a numeric key as float64 (dask_expr's
        # AssignPartitioningIndex).
        ok = bool((np.asarray(partitioning_index(
            part[["k"]], nparts, cast_dtype={"k": np.float64})) == j).all())
    if op == "set_index":
        ok = part.index.is_monotonic_increasing
    k = np.asarray(part.index if op == "set_index" else part["k"])
    return pd.DataFrame({"rows": [len(part)], "ksum": [int(k.sum())],
                         "ok": [ok]})


def main():
    global FRAME, PARTS
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", required=True,
                    choices=["ushuffle", "p2p", "tasks", "disk"])
    ap.add_argument("--op", default="shuffle",
                    choices=["shuffle", "merge", "set_index", "groupby",
                             "merge_groupby"])
    ap.add_argument("--frame", default="numeric", choices=list(MAKERS))
    ap.add_argument("--bytes", type=int, required=True,
                    help="bytes of rows per side (in memory, as pandas "
                    "counts them)")
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--ushuffled")
    ap.add_argument("--ushuffled-args", default="",
                    help="further ushuffled options, space-separated "
                    "(install(args=...))")
    ap.add_argument("--push-size", type=int, default=None,
                    help="ushuffle's push buffer bytes (default: "
                    "ushuffle.dask's)")
    ap.add_argument("--codec", default=None,
                    help="ushuffle's codec (none, lz4, zstd; default: "
                    "ushuffle.dask's)")
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
    FRAME, PARTS = a.frame, a.partitions
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
                              per_worker=True, durable=a.durable,
                              args=a.ushuffled_args.split())
            procs = list(deploy.pids(client).values())
            if a.codec:
                opts["codec"] = None if a.codec == "none" else a.codec
            if a.push_size:
                opts["push_size"] = a.push_size
            ud.register(**opts)  # shuffle="ushuffle" in Dask's operations
        # A host: a Dask worker and the ushuffled it started.
        hosts = [[i] + [len(pids) + j for j, u in enumerate(procs)
                        if psutil.Process(u).ppid() == p]
                 for i, p in enumerate(pids)]
        peak = Peak(pids + procs, hosts)
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
        written = peak.written_bytes()
        phases, phases_cpu = {}, {}
        if a.method == "ushuffle" and error is None:
            res = client.run(lambda: (dict(ud.stats), dict(ud.cpu)))
            for st, ct in res.values():
                for k, v in st.items():
                    phases[k] = phases.get(k, 0) + v
                for k, v in ct.items():
                    phases_cpu[k] = phases_cpu.get(k, 0) + v
        # Dask's memory monitor logs a line each time it pauses a worker.
        paused = sum(1 for lines in client.get_worker_logs().values()
                     for _, msg in lines if "Pausing worker" in msg)
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
           "ushuffled_cpu_s": cpu[2:], "host_peak_rss": peak.host_peak,
           "ushuffled_written": written[2:], "codec": a.codec,
           "paused": paused,
           "phases_s": phases,
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
