#!/usr/bin/python3
"""One Dask shuffle on a 2-worker LocalCluster (processes), for bench/run's
"dask" benchmark: --method ushuffle (two ushuffled on loopback), tasks or
disk (partd). Rows are made on the workers (the client holds none) and the
result is consumed there (each output partition's length comes back).
Prints one JSON object: wall time of the shuffle, peak RSS (sampled every
50 ms) and CPU seconds of each Dask worker process and each ushuffled, and
ushuffle's phase times (wall, and the CPU of the thread in the phase)
summed over the workers.

Debian's interpreter (/usr/bin/python3): dask, distributed, pandas, psutil;
PYTHONPATH must reach the ushuffle package (<build>/python).
"""
import argparse
import json
import os
import subprocess
import threading
import time

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil
from distributed import Client, LocalCluster

import ushuffle.dask as ud

ROW_BYTES = 40  # k, a, b, c: int64 and three float64


def make(i, rows):
    rng = np.random.default_rng(i)
    return pd.DataFrame({"k": rng.integers(0, 1 << 40, rows),
                         "a": rng.random(rows), "b": rng.random(rows),
                         "c": rng.random(rows)})


class Peak(threading.Thread):
    """Samples the RSS of pids until stopped; keeps each one's peak."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self.cpu0 = [self.cpu(p) for p in self.procs]
        self.halt = threading.Event()

    @staticmethod
    def cpu(p):
        t = p.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def cpu_s(self):
        """CPU seconds (user + sys) of each process since the start."""
        return [self.cpu(p) - c for p, c in zip(self.procs, self.cpu0)]

    def run(self):
        while not self.halt.wait(0.05):
            for i, p in enumerate(self.procs):
                try:
                    self.peak[i] = max(self.peak[i], p.memory_info().rss)
                except psutil.Error:
                    pass


def workers_start(ushuffled, scratch):
    procs, addrs = [], []
    for i in range(2):
        d = os.path.join(scratch, f"ushuffled{i}")
        os.makedirs(d, exist_ok=True)
        p = subprocess.Popen([ushuffled, "--listen=127.0.0.1:0",
                              f"--dir={d}",
                              "--log-level=error"], stdout=subprocess.PIPE,
                             text=True)
        addrs.append(f"127.0.0.1:{int(p.stdout.readline().split()[-1])}")
        procs.append(p)
    return procs, ",".join(addrs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", required=True,
                    choices=["ushuffle", "tasks", "disk"])
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--ushuffled")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per Dask worker")
    a = ap.parse_args()
    rows = a.bytes // ROW_BYTES // a.partitions
    dask.config.set({"temporary-directory": a.scratch})
    procs, addr = [], None
    if a.method == "ushuffle":
        procs, addr = workers_start(a.ushuffled, a.scratch)
    try:
        res = shuffle(a, rows, procs, addr)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    print(json.dumps(res))


def shuffle(a, rows, procs, addr):
    with LocalCluster(n_workers=2, threads_per_worker=a.threads,
                      processes=True,
                      dashboard_address=None,
                      local_directory=a.scratch) as cluster, \
            Client(cluster) as client:
        pids = [w["pid"] if "pid" in w else None for w in
                client.run(lambda: {"pid": os.getpid()}).values()]
        peak = Peak(pids + [p.pid for p in procs])
        df = dd.from_map(make, range(a.partitions), rows=rows,
                         meta=make(0, 0))
        if a.method == "ushuffle":
            out = ud.shuffle(df, "k", workers=addr)
        else:
            out = df.shuffle("k", shuffle=a.method)
        peak.start()
        t = time.perf_counter()
        lens = out.map_partitions(len).compute()
        wall = time.perf_counter() - t
        peak.halt.set()
        peak.join()
        cpu = peak.cpu_s()
        phases, phases_cpu = {}, {}
        if a.method == "ushuffle":
            got = client.run(lambda: (dict(ud.stats), dict(ud.cpu)))
            for st, ct in got.values():
                for k, v in st.items():
                    phases[k] = phases.get(k, 0) + v
                for k, v in ct.items():
                    phases_cpu[k] = phases_cpu.get(k, 0) + v
        del out
    total = int(lens.sum())
    if total != rows * a.partitions:
        raise SystemExit(f"{a.method}: {total} rows out of "
                         f"{rows * a.partitions}")
    return {
        "method": a.method, "rows": total, "bytes": total * ROW_BYTES,
        "partitions": a.partitions, "threads": a.threads, "wall_s": wall,
        "worker_peak_rss": peak.peak[:2], "ushuffled_peak_rss":
        peak.peak[2:], "worker_cpu_s": cpu[:2], "ushuffled_cpu_s": cpu[2:],
        "phases_s": phases, "phases_cpu_s": phases_cpu}


if __name__ == "__main__":
    main()
