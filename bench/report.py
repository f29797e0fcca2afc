"""bench/report.py: tables, plots and docs/performance.md for bench/run.

Reads the JSON that bench/run saved in a results directory; writes the
plots (gnuplot, PNG) and replaces the generated blocks of the document,
between <!-- bench:NAME:begin --> and <!-- bench:NAME:end --> markers,
leaving the hand-written text around them alone.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHES = ["handoff", "alloc", "ctx_reuse", "disk", "net", "codec",
           "scaling", "partitions", "small_jobs", "restart", "wire", "dask",
           "replicas", "records", "commit", "disks", "seal", "spark", "read"]


def log(msg):
    print(f"[bench/run {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def median(v):
    return statistics.median(v) if v else float("nan")


def machine_line(m):
    return (f"{m['host']}: {m['nproc']} x {m['cpu']}, {m['mem_gib']} GiB, "
            f"Linux {m['kernel']} ({m['virt']}), scratch {m['scratch_fs']} "
            f"[{m['scratch_dev']}], {m['date']}, commit {m['commit']}"
            f"{' + local changes' if m['dirty'] else ''}")


def mib(x):
    return f"{x / 2**20:,.0f} MiB/s"


def ns_(x):
    return f"{x / 1000:.2f} µs" if x >= 1000 else f"{x:.0f} ns"


def met(ok):
    return "**met**" if ok else "**not met**"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def t_handoff(res, m):
    j = res["raw"]
    by = {x["buffer_bytes"] >> 10: x for x in j["results"]}
    rows = []
    for k, x in sorted(by.items()):
        rows.append([f"{k} KiB hand-off (median call)",
                     ns_(x["copy"]["median_ns"]), ns_(x["swap"]["median_ns"]),
                     f"{x['copy']['median_ns'] / x['swap']['median_ns']:.1f}×",
                     "≥ 10× at 256 KiB" if k == 256 else "—",
                     met(x["copy"]["median_ns"] / x["swap"]["median_ns"] >= 10)
                     if k == 256 else ""])
        rows.append([f"{k} KiB incl. framing + CRC32C (amortized)",
                     ns_(x["copy"]["amortized_ns"]),
                     ns_(x["swap"]["amortized_ns"]),
                     f"{x['copy']['amortized_ns'] / x['swap']['amortized_ns']:.2f}×",
                     "—", ""])
    if 64 in by and 256 in by:
        # The clock ticks in 10 ns steps on some VMs: the queue-only
        # calls' trimmed mean resolves a 40-50 ns call better than the
        # median does.
        key = "queue_only_trimmed_mean_ns"
        a, b = by[64]["swap"][key], by[256]["swap"][key]
        rows.append(["swap 256 KiB vs swap 64 KiB (queue-only calls, "
                     "trimmed mean)", ns_(a), ns_(b), f"{b / a:.2f}×",
                     "≤ 1.2×", met(b / a <= 1.2)])
        a, b = by[64]["swap"]["median_ns"], by[256]["swap"]["median_ns"]
        rows.append(["swap 256 KiB vs swap 64 KiB (median call)", ns_(a),
                     ns_(b), f"{b / a:.2f}×", "≤ 1.2×", met(b / a <= 1.2)])
    note = (f"Baseline: copy hand-off; ushuffle: swap. {j['rounds']} rounds × "
            f"{j['buffers_per_round']} hand-offs per mode and size, "
            f"alternating; null target, codec none.")
    return table(["measure", "baseline (copy)", "ushuffle (swap)", "ratio",
                  "target", ""], rows), note


def t_alloc(res, m):
    j = res["raw"]
    rows = []
    for x in j["results"]:
        p = x["payload_bytes"]
        b, cp, sw = x["baseline"], x["copy"], x["swap"]
        ub = max(cp["heap_bytes_per_batch_max"], sw["heap_bytes_per_batch_max"])
        rows.append([f"{p / 1024:.1f} KiB: heap bytes / batch",
                     f"{b['heap_bytes_per_batch_median']:,.0f}",
                     f"{ub:,.0f} (copy and swap, worst round)",
                     "1 MiB → 0" if ub == 0 else
                     f"{b['heap_bytes_per_batch_median'] / ub:.0f}×",
                     "0 B", met(ub == 0)])
        rows.append([f"{p / 1024:.1f} KiB: write time / batch",
                     ns_(b["median_ns_per_batch"]),
                     f"copy {ns_(cp['median_ns_per_batch'])}, swap "
                     f"{ns_(sw['median_ns_per_batch'])}",
                     f"{x['time_ratio_baseline_copy']:.1f}× / "
                     f"{x['time_ratio_baseline_swap']:.1f}×", "—", ""])
    note = (f"Baseline: calloc of a zeroed 1 MiB chunk per batch + memcpy + "
            f"ush_writer_copy + free (Comet before #6985). {j['rounds']} rounds"
            f" × {j['batches_per_round']} batches per mode, alternating; every "
            f"malloc/calloc/realloc/memalign in the process counted.")
    return table(["payload", "baseline (1 MiB chunk)", "ushuffle", "ratio",
                  "target", ""], rows), note


def t_ctx(res, m):
    j = res["raw"]
    rows = []
    for x in j["results"]:
        label = f"{x['codec']} {x['op']} {x['batch_bytes'] // 1024} KiB"
        if "fresh" not in x:
            rows.append([label, "—", ns_(x["reused"]["median_ns_per_batch"]),
                         "—", x.get("note", ""), ""])
            continue
        f, r = x["fresh"], x["reused"]
        rows.append([label,
                     f"{ns_(f['median_ns_per_batch'])} "
                     f"({f['heap_bytes_per_batch']:,.0f} B heap)",
                     f"{ns_(r['median_ns_per_batch'])} "
                     f"({r['heap_bytes_per_batch']:,.0f} B heap)",
                     f"{x['ratio_fresh_reused']:.2f}×",
                     "reuse never slower", met(x["ratio_fresh_reused"] >= 0.97)])
    note = (f"Baseline: a context created and freed per batch; ushuffle: one "
            f"context reused (reset per batch), as src/core/codec.c does. lz4 "
            f"{j['lz4_version']}, zstd {j['zstd_version']} level "
            f"{j['zstd_level']}; {j['rounds']} alternating rounds. "
            f"Ratios within 3% count as equal (noise).")
    return table(["batch", "baseline (fresh)", "ushuffle (reused)",
                  "ratio", "target", ""], rows), note


def t_disk(res, m):
    rows = []
    for bs, x in res["bs"].items():
        mb = x["median_bw"]
        rows.append([f"{bs}: vs fio io_uring --fixedbufs", mib(mb["fio"]),
                     mib(mb["io_uring"]), f"{mb['io_uring'] / mb['fio']:.2f}×",
                     "≥ 0.95×", met(mb["io_uring"] / mb["fio"] >= 0.95)])
        rows.append([f"{bs}: vs ushuffle --ioengine=psync", mib(mb["psync"]),
                     mib(mb["io_uring"]),
                     f"{mb['io_uring'] / mb['psync']:.2f}×", "≥ 1.5×",
                     met(mb["io_uring"] / mb["psync"] >= 1.5)])
    note = (f"Medians of {res['rounds']} rounds of fio, ushuffle io_uring, "
            f"ushuffle psync (alternating), {res['size']} each, iodepth "
            f"{res['iodepth']}, O_DIRECT, same directory; bandwidth = bytes "
            f"written to the file / runtime (ushuffle: frames incl. headers; "
            f"fio with --end_fsync=1 as ushuffle's commit syncs).")
    return table(["block size", "baseline", "ushuffle", "ratio", "target",
                  ""], rows), note


def t_net(res, m):
    mb = res["median_bw"]
    ref = min(mb["iperf3"], mb["fio"])
    cpu = res["median_cpu_s_per_gib"]
    rows = [["throughput vs min(iperf3 loopback, fio disk)",
             f"{mib(ref)} (iperf3 {mib(mb['iperf3'])}, fio {mib(mb['fio'])})",
             mib(mb["io_uring"]), f"{mb['io_uring'] / ref:.2f}×", "≥ 0.8×",
             met(mb["io_uring"] / ref >= 0.8)],
            ["CPU seconds per GiB vs psync", f"{cpu['psync']:.2f} s",
             f"{cpu['io_uring']:.2f} s", f"{cpu['io_uring'] / cpu['psync']:.2f}×",
             "≤ 0.7×", met(cpu["io_uring"] / cpu["psync"] <= 0.7)],
            ["throughput vs psync", mib(mb["psync"]), mib(mb["io_uring"]),
             f"{mb['io_uring'] / mb['psync']:.2f}×", "—", ""]]
    note = (f"writer → ushuffled (loopback, O_DIRECT) → disk, {res['size']}, "
            f"{res['rounds']} alternating rounds; CPU = writer + worker.")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


def t_codec(res, m):
    rows = []
    for codec, x in res["codecs"].items():
        r = x["ushuffle_bw"] / x["codec_bw"]
        rows.append([f"--codec={codec}: CLI job (incl. record generation)",
                     mib(x["codec_bw"]), mib(x["ushuffle_bw"]),
                     f"{r:.2f}× ({(1 / r - 1) * 100:+.0f}% time)",
                     "≥ 0.91× (≤ 10% added)", met(r >= 1 / 1.1)])
        r = x["lib_bw"] / x["codec_bw"]
        rows.append([f"--codec={codec}: library, batches copied in + swap",
                     mib(x["codec_bw"]), mib(x["lib_bw"]),
                     f"{r:.2f}× ({(1 / r - 1) * 100:+.0f}% time)", "—", ""])
    rows.append(["--codec=none: CLI job (generation + transport, no codec)",
                 "—", mib(res["none_bw"]), "—", "—", ""])
    note = (f"Baseline: the codec's own single-thread speed "
            f"(ush_bench_codec_speed: LZ4_compress_fast_extState / "
            f"ZSTD_compressCCtx in a loop) on the very batches the CLI job "
            f"writes (read from its --codec=none spill file). CLI job: "
            f"`ushuffle --target=null --numjobs=1 --verify=none` of "
            f"{res['size']}, raw batch bytes / runtime, which includes "
            f"generating the records. Library: the same batches memcpy'ed "
            f"into push buffers and swapped into a null-target writer with "
            f"that codec (--via=lib). {res['rounds']} alternating rounds.")
    return table(["codec", "codec alone", "ushuffle", "ratio", "target",
                  ""], rows), note


def t_scaling(res, m):
    rows = []
    for target, x in res["targets"].items():
        b1 = x["median_bw"]["1"]
        rounds = x["rounds"]
        # Work per CPU second: flat when each job scales, whatever share
        # of the cores other processes left to the jobs.
        per_cpu = {n: median([q["raw_bytes"] / q["cpu_s"]
                              for q in rounds[str(n)] if q["cpu_s"]])
                   for n in res["numjobs"]}
        for n in res["numjobs"]:
            bn = x["median_bw"][str(n)]
            eff = bn / (n * b1)
            share = median([q["cpu_s"] / (q["runtime_s"] * n)
                            for q in rounds[str(n)]])
            lin = target == "null" and n > 1
            rows.append([f"{target} ({x['codec']}), {n} jobs",
                         mib(n * b1) + " (n × 1 job)",
                         f"{mib(bn)} (CPU {share * 100:.0f}% of {n} "
                         f"core{'s' if n > 1 else ''})",
                         f"{eff:.2f}", "≥ 0.9 (near-linear)" if lin else "—",
                         met(eff >= 0.9) if lin else ""])
            if n > 1:
                r = per_cpu[n] / per_cpu[1]
                rows.append([f"{target} ({x['codec']}), {n} jobs: bytes per "
                             f"CPU second", mib(per_cpu[1]).replace("/s", "")
                             + " per CPU s (1 job)",
                             mib(per_cpu[n]).replace("/s", "") + " per CPU s",
                             f"{r:.2f}", "—", ""])
    net = res.get("net")
    if net:
        b11 = net["median_bw"]["1x1"]
        for t in net["levels"]:
            for w in net["levels"]:
                k = f"{w}x{t}"
                rows.append([f"net push, {w} writer{'s' if w > 1 else ''} "
                             f"× {t} worker thread{'s' if t > 1 else ''}",
                             mib(b11) + " (1 × 1)",
                             f"{mib(net['median_bw'][k])} (CPU "
                             f"{net['median_cpu_s_per_gib'][k]:.2f} s/GiB)",
                             f"{net['median_bw'][k] / b11:.2f}", "—", ""])
    note = (f"numjobs 1..{max(res['numjobs'])} (the cores here), "
            f"--group_reporting, {res['rounds']} rounds alternating the "
            f"order; raw batch bytes / runtime. CPU: the process's user + "
            f"system time / (runtime × jobs), from /usr/bin/time: below "
            f"100% the jobs were not running, other processes were.")
    if net:
        note += (f" Net push: writer threads (`--numjobs`, one map each) × "
                 f"`ushuffled --threads`, both over "
                 f"{', '.join(map(str, net['levels']))} (1 to the cores, "
                 f"powers of two between), a fresh worker with otherwise "
                 f"default flags per point, {net['total_bytes'] >> 20} MiB "
                 f"in all split over the writers, 64 partitions, codec none, "
                 f"records of {net['record_size']:,} B; frame bytes / "
                 f"runtime, medians of {net['rounds']} rounds alternating "
                 f"the order; CPU = client + worker.")
    return table(["target, jobs", "baseline (linear)", "ushuffle", "ratio",
                  "target", ""], rows), note


def t_parts(res, m):
    rows = []
    p0 = str(res["partitions"][0])
    bw0, rss0 = res["median_bw"][p0], res["median_rss_kib"][p0]
    for p in res["partitions"]:
        bw, rss = res["median_bw"][str(p)], res["median_rss_kib"][str(p)]
        rows.append([f"{p:,} partitions: throughput", mib(bw0), mib(bw),
                     f"{bw / bw0:.2f}×", "—", ""])
        rows.append([f"{p:,} partitions: peak RSS",
                     f"{rss0 / 1024:.0f} MiB (a 64 KiB buffer per "
                     f"partition: {p * 64 / 1024:,.0f} MiB)",
                     f"{rss / 1024:.0f} MiB", f"{rss / rss0:.2f}×",
                     "≤ RSS(10) + pool (64 MiB)",
                     met(rss - rss0 <= 64 * 1024)])
        amp = median([x["stored_bytes"] / x["logical_bytes"]
                      for x in res["data"][str(p)]])
        amp0 = median([x["stored_bytes"] / x["logical_bytes"]
                       for x in res["data"][p0]])
        rows.append([f"{p:,} partitions: bytes written / logical byte",
                     f"{amp0:.2f}", f"{amp:.2f}", f"{amp / amp0:.2f}×", "—",
                     ""])
    ver = ", ".join(f"{k}: {v:,} records" for k, v in
                    res.get("verified_records", {}).items())
    note = (f"Baseline: {p0} partitions. --rw=write, disk target, default "
            f"codec lz4 and O_DIRECT, {res['size']}, {res['rounds']} rounds "
            f"alternating the order; logical bytes / runtime; peak RSS of the "
            f"whole process from /usr/bin/time. Read back and verified "
            f"(--rw=read, crc32c) after the last round: {ver or 'none'}.")
    return table(["partitions", "baseline", "ushuffle", "ratio", "target",
                  ""], rows), note


def t_small_jobs(res, m):
    ps, p99, cpu = (res["median_per_s"], res["median_p99_us"],
                    res["median_cpu_us"])
    rows = [["shuffles per second: a heartbeat per job vs none",
             f"{ps['none']:.1f}",
             f"{ps['heartbeat']:.1f}",
             f"{ps['heartbeat'] / ps['none']:.2f}×", "—", ""],
            ["job latency p99: a heartbeat per job vs none",
             f"{p99['none'] / 1000:.1f} ms",
             f"{p99['heartbeat'] / 1000:.1f} ms",
             f"{p99['heartbeat'] / p99['none']:.2f}×", "—", ""],
            ["CPU per shuffle (client + worker): heartbeat vs none",
             f"{cpu['none'] / 1000:.2f} ms",
             f"{cpu['heartbeat'] / 1000:.2f} ms",
             f"{cpu['heartbeat'] / cpu['none']:.2f}×", "—", ""]]
    if "insecure" in ps:  # runs from before authentication have no such mode
        hs = res["median_connection_us"]
        rows += [["authentication: connection (HELLO + AUTH + HEARTBEAT)"
                  " vs --insecure", f"{hs['insecure']:.0f} µs",
                  f"{hs['none']:.0f} µs",
                  f"{hs['none'] / hs['insecure']:.2f}×", "—", ""],
                 ["authentication: shuffles per second vs --insecure",
                  f"{ps['insecure']:.1f}", f"{ps['none']:.1f}",
                  f"{ps['none'] / ps['insecure']:.2f}×", "—", ""]]
    cmd = res["data"]["none"][0]["cmd"].split(" --workers")[0]
    note = (f"Baseline: jobs without heartbeats; then a heartbeat "
            f"(ush_app_heartbeat) before every job. Each job: 1 map × "
            f"{res['partitions']} partitions ({res['records']} records of "
            f"{res['record_size']} B) written, committed, every partition "
            f"read back and checked, dropped; {res['jobs']} jobs per run "
            f"against one `ushuffled --direct=1` on the scratch disk, "
            f"{res['rounds']} alternating rounds (`{os.path.basename(cmd)}"
            f" --workers=… --jobs={res['jobs']} [--heartbeat-every=1]`). "
            f"Authentication rows: the same jobs (no heartbeat) with "
            f"`--auth=off` against `ushuffled --insecure` as the baseline; "
            f"a connection = connect, the handshake and one HEARTBEAT, "
            f"median of 300 (`--handshakes=300`).")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


def t_restart(res, m):
    rows = []
    ns = res["history"]
    t0 = res["median_total_ms"][str(ns[0])]
    for n in ns:
        b = res["built"][str(n)]
        t = res["median_total_ms"][str(n)]
        last = n == ns[-1]
        rows.append([f"{n:,} shuffles of history (logs "
                     f"{(b['log_bytes'] + b['snap_bytes']) / 1024:,.0f} KiB)",
                     f"{t0:.1f} ms",
                     f"{t:.1f} ms (replay "
                     f"{res['median_create_ms'][str(n)]:.1f} ms, start "
                     f"{res['median_start_ms'][str(n)]:.1f} ms)",
                     f"{t / t0:.2f}×",
                     "≤ 1.5× (flat)" if last else "—",
                     met(t / t0 <= 1.5) if last else ""])
    note = (f"Baseline: a directory with no history. Restart = "
            f"ush_worker_create (lock, bind, replay of the commit logs, "
            f"sweep) + ush_worker_start (threads: rings, pools, buffers), "
            f"timed in `ush_bench_restart` on a directory whose worker ran "
            f"N shuffles (1 map × 4 partitions, committed, then dropped: "
            f"three log records each) and stopped; medians of "
            f"{res['rounds']} alternating rounds of 5 restarts. Logs: the "
            f"commit logs and their snapshot after the history.")
    return table(["history", "baseline (N = 0)", "restart", "ratio",
                  "target", ""], rows), note


def _r(x):
    return f"{x:.2f}×"


def frame_points(res):
    """[(partitions, the disk-spill job of the median round)] at 64, the
    sweep's largest count and the big count: the frames they made."""
    rd = res["rounds_data"]
    out = []
    for p, k in [(64, "disk"), (res["sweep"][-1], f"disk{res['sweep'][-1]}")]:
        v = sorted(rd.get(k, []), key=lambda x: x["bw"])
        if v and "batches" in v[0] and "dir" in v[0]:
            out.append((p, v[len(v) // 2]))
    if "disk" in res["big_data"]:
        out.append((res["big"], res["big_data"]["disk"]))
    return out


def ratio_row(out, measure, base, ush, ratio, target=None, ok=None,
              label=""):
    """Appends one row as wire_rows() and read_rows() make them."""
    out.append([measure, base, ush, ratio,
                "—" if ratio is None else _r(ratio), target or "—",
                None if target is None else ok, label])


def fetch_rows(row, res, what, top):
    """The read path's two goals, as wire_rows and read_rows give them:
    the fetch of what (64 partitions ...) against min(iperf3, fio read),
    and, where measured, partition after partition at top vs 64."""
    mb = res["median_bw"]
    rref = min(mb["iperf3"], mb["fio_read"])
    row(f"fetch (network read), {what} vs min(iperf3, fio read)",
        f"{mib(rref)} (iperf3 {mib(mb['iperf3'])}, fio read "
        f"{mib(mb['fio_read'])})", mib(mb["fetch"]), mb["fetch"] / rref,
        "≥ 0.9×", mb["fetch"] / rref >= 0.9, "fetch/wire")
    if f"fetch_by_part{top}" not in mb:
        return
    a, b = mb["fetch_by_part64"], mb[f"fetch_by_part{top}"]
    hs = max(x["handshakes"] for x in
             res["rounds_data"][f"fetch_by_part{top}"])
    row(f"fetch every partition, partition after partition (one thread, "
        f"range readers), {top:,} vs 64 partitions of the same "
        f"{res['fetch_size']} (reader handshakes: {hs} at most)",
        mib(a), mib(b), b / a, "≥ 0.6×", b / a >= 0.6,
        f"fetch {top // 1000}k/64")


def wire_rows(res):
    """[measure, baseline, ushuffle, ratio value or None, ratio text,
    target text, met or None, short label] for every row of §11."""
    mb = res["median_bw"]
    cpu = res["median_cpu_s_per_gib"]
    out = []

    def row(*a, **kw):
        ratio_row(out, *a, **kw)
    wref = min(mb["iperf3"], mb["fio_write"])
    row("push, 64 partitions, default ushuffled, vs min(iperf3, fio write)",
        f"{mib(wref)} (iperf3 {mib(mb['iperf3'])}, fio write "
        f"{mib(mb['fio_write'])})", mib(mb["push"]), mb["push"] / wref,
        "≥ 0.8×", mb["push"] / wref >= 0.8, "push/wire")
    # Where psync is within 10 % of the limit, io_uring cannot be 1.2x
    # ahead: then it must be at the limit too.
    at_ceiling = mb["psync"] >= 0.9 * wref and mb["push"] >= 0.9 * wref
    row("push: io_uring vs --ioengine=psync, throughput", mib(mb["psync"]),
        mib(mb["push"]), mb["push"] / mb["psync"],
        "≥ 1.2× (or both ≥ 0.9× of the limit)",
        mb["push"] / mb["psync"] >= 1.2 or at_ceiling, "push/psync")
    row("push: the most io_uring can be ahead of psync here: "
        "min(iperf3, fio write) / psync", mib(mb["psync"]), mib(wref),
        wref / mb["psync"])
    row("push: io_uring vs psync, CPU s per GiB (client + worker)",
        f"{cpu['psync']:.2f} s", f"{cpu['push']:.2f} s",
        cpu["push"] / cpu["psync"], "≤ 0.7×",
        cpu["push"] / cpu["psync"] <= 0.7, "CPU/GiB")
    wcpu = res.get("median_worker_cpu_s_per_gib")
    if wcpu:
        row("push: the worker's CPU s per GiB (psync's run vs io_uring's)",
            f"{wcpu['psync']:.2f} s", f"{wcpu['push']:.2f} s",
            wcpu["push"] / wcpu["psync"])
    for p in res["sweep"][1:]:
        r = mb[f"push{p}"] / mb["push"]
        row(f"push, {p:,} partitions vs 64", mib(mb["push"]),
            mib(mb[f"push{p}"]), r, "≥ 0.8×", r >= 0.8, f"push {p // 1000}k")
    for p in res["sweep"][1:]:
        r = mb[f"disk{p}"] / mb["disk"]
        row(f"disk spill, {p:,} partitions vs 64", mib(mb["disk"]),
            mib(mb[f"disk{p}"]), r, "≥ 0.8×", r >= 0.8, f"disk {p // 1000}k")
    r = mb["disk"] / mb["fio_write"]
    row("disk spill, 64 partitions, vs fio write (64 KiB, qd32, O_DIRECT)",
        mib(mb["fio_write"]), mib(mb["disk"]), r, "≥ 1.0×", r >= 1.0,
        "disk/fio")
    top = res["sweep"][-1]
    for k, what in [("push", "push"), ("disk", "disk spill")]:
        if f"{k}_64k" in mb:
            a, b = mb[f"{k}_64k"], mb[f"{k}{top}_64k"]
            row(f"{what}, {top:,} partitions vs 64, 64 KiB records (the "
                "easy case: each record a whole push buffer)", mib(a),
                mib(b), b / a)
    for p, x in frame_points(res):
        data = x["logical_bytes"]
        fpm = x["batches"] / (data / 2**20)
        r = x["dir"]["alloc_bytes"] / data
        row(f"disk spill, {p:,} partitions: {fpm:,.1f} frames per MiB of "
            f"data ({x['frame_bytes'] / x['batches'] / 1024:,.1f} KiB per "
            "frame)", "—", f"{fpm:,.1f}", None)
        row(f"disk spill, {p:,} partitions: bytes on disk / data",
            f"{data / 2**20:,.1f} MiB of records",
            f"{x['dir']['alloc_bytes'] / 2**20:,.1f} MiB", r, "≤ 1.2×",
            r <= 1.2, f"disk bytes {p // 1000}k")
    big = res["big_data"]
    for k, what, dk in [("push", "worker", "worker_dir"),
                        ("disk", "disk target", "dir")]:
        if k not in big:
            continue
        x = big[k]
        a = x[dk]["alloc_bytes"]
        r = a / x["frame_bytes"]
        row(f"{what}: bytes on disk / frame bytes, {res['big']:,} "
            f"partitions", f"{x['frame_bytes'] / 2**20:,.1f} MiB of frames",
            f"{a / 2**20:,.1f} MiB in {x[dk]['files']:,} files", r,
            "≤ 1.2×", r <= 1.2, f"{k} bytes 100k")
    hwm = res["median_worker_hwm_kib"]
    for p in [q for q in res["sweep"][1:] + [res["big"]] if str(q) in hwm]:
        row(f"worker peak RSS, {p:,} partitions (vs 64)",
            f"{hwm['64'] / 1024:,.0f} MiB", f"{hwm[str(p)] / 1024:,.0f} MiB",
            hwm[str(p)] / hwm["64"])
    fetch_rows(row, res, "64 partitions,", res["sweep"][-1])
    row("local disk read, 64 partitions, vs fio read", mib(mb["fio_read"]),
        mib(mb["disk_read"]), mb["disk_read"] / mb["fio_read"], "≥ 0.9×",
        mb["disk_read"] / mb["fio_read"] >= 0.9, "disk read")
    if "fio_randread" in mb:
        row("local disk read, 64 partitions, vs fio randread 64 KiB qd16 "
            "(its access pattern)", mib(mb["fio_randread"]),
            mib(mb["disk_read"]), mb["disk_read"] / mb["fio_randread"])
    o = res["opens"]
    for k, what in [("disk", "disk target"), ("net", "from a worker")]:
        a, b = o.get(f"{k}64"), o.get(f"{k}_big")
        if not a or not b:
            continue
        r = b["first_us_median"] / a["first_us_median"]
        row(f"open one partition (to its first record), {res['big']:,} vs "
            f"64 partitions, {what}",
            f"{a['first_us_median'] / 1000:.2f} ms (open call "
            f"{a['open_us_median'] / 1000:.2f} ms)",
            f"{b['first_us_median'] / 1000:.2f} ms (open call "
            f"{b['open_us_median'] / 1000:.2f} ms)", r, "≤ 2× (≈ 1×)",
            r <= 2, f"open {k}")
    return out


def read_rows(res):
    """Rows as wire_rows makes them, for the read path (benchmark read):
    the fetch against its limit, partition after partition at 10,000
    partitions against 64, each with its goal; the CPU per GiB stated."""
    cpu = res["median_cpu_s_per_gib"]
    wcpu = res["median_worker_cpu_s_per_gib"]
    top = res["top"]
    out = []

    def row(*a, **kw):
        ratio_row(out, *a, **kw)
    fetch_rows(row, res, f"64 partitions of {res['size']}, page cache "
               "dropped,", top)
    row("the fetch: CPU s per GiB, reader / worker", "—",
        f"{cpu['fetch']:.2f} s / {wcpu['fetch']:.2f} s", None)
    k, what = f"fetch_by_part{top}", f"partition after partition at {top:,}"
    for who, c in [("reader", cpu), ("worker", wcpu)]:
        row(f"{what} vs 64: the {who}'s CPU s per GiB",
            f"{c['fetch_by_part64']:.2f} s", f"{c[k]:.2f} s",
            c[k] / c["fetch_by_part64"])
    return out


def record_rows(res):
    """Rows as wire_rows makes them, for the record path: per record size
    10,000 partitions against 64, and at 100 bytes the writer against
    its memcpy floor, each with its goal; the rest stated."""
    pts = {(x["record_bytes"], x["partitions"]): x
           for x in res["raw"]["points"]}
    out = []
    for n in sorted({k[0] for k in pts}):
        a, b = pts.get((n, 64)), pts.get((n, 10000))
        if a and b:
            r = b["ns_per_record"] / a["ns_per_record"]
            out.append([f"{n}-byte records: 10,000 partitions vs 64, ns "
                        "per record", f"{a['ns_per_record']:.1f} ns",
                        f"{b['ns_per_record']:.1f} ns", r, _r(r), "≤ 1.5×",
                        r <= 1.5, f"{n} B 10k/64"])
    for (n, p), x in sorted(pts.items()):
        r = x["ns_per_record"] / x["floor_ns"]
        goal = n == 100 and p in (64, 10000)
        out.append([f"{n}-byte records, {p:,} partitions: vs memcpy of "
                    "the same records", f"{x['floor_ns']:.1f} ns",
                    f"{x['ns_per_record']:.1f} ns "
                    f"({x['frames_per_mib']:,.0f} frames per MiB)", r, _r(r),
                    "≤ 3×" if goal else None, r <= 3 if goal else None,
                    f"{n} B {p:,}/memcpy"])
    return out


def t_records(res, m):
    rows = [[x[0], x[1], x[2], x[4], x[5] or "—",
             "" if x[6] is None else met(x[6])] for x in record_rows(res)]
    j = res["raw"]
    note = (f"`ush_bench_records --mib={j['mib']} --rounds={j['rounds']}`: "
            f"{j['mib']} MiB of records per writer run (one writer, null "
            "target: frames are built, CRC'd and dropped), partitions "
            "uniform random and drawn before the clock, medians of the "
            "rounds; the floor copies the same records with their 4-byte "
            "prefixes, in order, into one buffer of the pool's size, in the "
            "same round. Times are the thread's CPU time (the machine is "
            "shared); the writer's include its commit, where staged records "
            "are framed. Frames per MiB of record bytes.")
    return table(["measure", "memcpy / 64 partitions", "ushuffle", "ratio",
                  "target", ""], rows), note


def t_wire(res, m):
    rows = [[x[0], x[1], x[2], x[4], x[5], "" if x[6] is None else met(x[6])]
            for x in wire_rows(res)]
    o = res["opens"]
    opened = ", ".join(f"{k} {v['opens']} of {v['partitions']:,}"
                       for k, v in o.items())
    note = (f"One run, {res['rounds']} round(s) alternating io_uring and "
            f"psync. Limits measured in the same rounds: iperf3 over "
            f"loopback, fio io_uring O_DIRECT 64 KiB qd32 write and read of "
            f"{res['size']} on the scratch disk. ushuffle: one writer "
            f"thread, codec none, the CLI's default records (100-1,000 B), "
            f"{res['size']} per map, to a separate `ushuffled` with its "
            f"default flags on loopback (a fresh one per job), disk spills "
            f"at fio's depth (`--iodepth=32`); throughput = frame bytes / "
            f"the job's runtime (writing + commit). The 1,000- and "
            f"10,000-partition points and the easy case (records of "
            f"{res['record_size']:,} B: 16 fill a 64 KiB batch) stop writing "
            f"after {res['cap_s']} s (`--runtime`) and then commit. Frames "
            f"per MiB: the writer's frames per MiB of records (median "
            f"round's job). Fetch: "
            f"`ushuffle --rw=read --numjobs=1` of the 64-partition push "
            f"(every record CRC-verified), local read the same of the disk "
            f"spill, both after the files were dropped from the page cache "
            f"(posix_fadvise DONTNEED), as fio reads O_DIRECT. "
            f"{res['big']:,} partitions: one job of {res['big_size']}; bytes "
            f"on disk = blocks "
            f"allocated under the worker's directory or the job's (du), "
            f"frame bytes = what the writer framed (and sent). Worker RSS: "
            f"VmHWM after the push. Open: `ush_bench_open_part`, "
            f"ush_reader_open of evenly spread partitions ({opened}) and "
            f"the time from it to the partition's first record (a reader "
            f"may defer its index work to the first next()), medians; "
            f"each partition then read to its end and its records counted "
            f"against the manifest.")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


def dask_goal(op):
    """(speed-up, memory) goals of a Dask case against p2p (issue 35)."""
    return (1.5 if op in ("shuffle", "merge") else 1.2), 1.0


DASK_CMD = "bench/run --only dask"


def t_dask(res, m):
    def runs(x):
        """A case's runs of one method: a list (rounds), or one run (an
        older result)."""
        return x if isinstance(x, list) else [x]

    def host(x):
        return max(x.get("host_peak_rss") or x["worker_peak_rss"])

    def cpu(x):
        return sum(v or 0 for v in x["worker_cpu_s"]) + \
            sum(x.get("ushuffled_cpu_s", []))

    def med(xs, f):
        ok = [f(x) for x in runs(xs) if not x["error"]]
        return median(ok) if ok else None

    def desc(xs):
        bad = [x for x in runs(xs) if x["error"]]
        if len(bad) == len(runs(xs)):
            return f"failed: {bad[0]['error'][:80]}"
        return (f"{med(xs, lambda x: x['wall_s']):.1f} s, "
                f"{med(xs, host) / 2**20:,.0f} MiB, CPU "
                f"{med(xs, cpu):.1f} s" +
                (f" ({len(bad)} failed)" if bad else ""))
    rows = []
    for case, ms in res["runs"].items():
        op, frame = case.split("/")
        us, p2p = ms["ushuffle"], ms["p2p"]
        speed, mem = dask_goal(op)
        cells = [f"{op}, {frame}", desc(p2p), desc(ms["tasks"]),
                 desc(ms["disk"]), desc(us)]
        uw, pw = med(us, lambda x: x["wall_s"]), med(p2p, lambda x:
                                                     x["wall_s"])
        if uw is None or pw is None:
            rows.append(cells + ["", "", "", ""])
            continue
        sp, mr = pw / uw, med(us, host) / med(p2p, host)
        rows.append(cells + [f"{sp:.2f}×; CPU {med(p2p, cpu) / med(us, cpu):.2f}×",
                             f"{mr:.2f}×", f"≥ {speed}×, ≤ {mem}×",
                             met(sp >= speed and mr <= mem)])
    for case, ms in res["runs"].items():
        if "ushuffle-none" not in ms:
            continue
        us, no = ms["ushuffle"], ms["ushuffle-none"]
        w = med(us, lambda x: sum(x.get("ushuffled_written", [])))
        wn = med(no, lambda x: sum(x.get("ushuffled_written", [])))
        if None in (w, wn) or not w:
            continue
        rows.append([f"{case.replace('/', ', ')}: lz4 (default) vs none",
                     "", "", "", f"none: {desc(no)}, {wn / 2**20:,.0f} MiB "
                     f"written; lz4: {w / 2**20:,.0f} MiB",
                     f"{med(no, lambda x: x['wall_s']) / med(us, lambda x: x['wall_s']):.2f}×; "
                     f"CPU {med(no, cpu) / med(us, cpu):.2f}×",
                     f"{wn / w:.2f}× fewer bytes", "—", ""])
    big = res.get("larger_than_memory")
    if big:
        lim = big["memory_limit"]
        for k in ("ushuffle", "p2p", "tasks", "disk"):
            if k not in big:
                continue
            x = big[k]
            paused = x.get("paused")
            under = not x["error"] and max(x["worker_peak_rss"]) < lim
            rows.append([f"{big['bytes'] / 2**30:.1f} GiB shuffle, 4× the "
                         f"workers' memory_limit of {lim / 2**20:,.0f} MiB: "
                         f"{k}", "", "", "", desc(x) + (
                             "; every partition verified"
                             if x.get("verified") else "") + (
                             f"; paused {paused}×" if paused else ""), "",
                         "", "completes, no pause" if k ==
                         "ushuffle" else "—",
                         met(under and not paused) if k == "ushuffle" else
                         ("completed" if not x["error"] else "failed")])
    parts = next(iter(res["runs"].values()))["ushuffle"][0]["partitions"]
    note = (f"{res['bytes'] / 2**20:,.0f} MiB of rows per side (pandas' "
            f"deep memory size), {parts} partitions in and out, "
            f"{res.get('rounds', 1)} round(s): every case with every "
            f"method in each, the methods' order reversed every other "
            f"case and round, medians. A LocalCluster of 2 worker processes × 1 "
            f"thread (`bench/dask_shuffle.py`; `{DASK_CMD}`): the rows are "
            f"made on the workers and persisted before the clock starts, "
            f"the output consumed there. Frames: mixed (an int64 key with "
            f"a quarter of the rows on one value, an id string and a "
            f"five-valued string with nulls, an int64, a float64 with "
            f"NaNs) and strings (a Zipf-skewed int64 key, a = 1.3; a URL, "
            f"a user agent, a referrer with 30 % nulls, a country code, an "
            f"int64). merge: with a frame of unique keys; set_index on the "
            f"key; groupby: .agg(split_out=32); merge_groupby: the merge, "
            f"then a groupby(split_out=32) of its output on another "
            f"column. Each cell: wall time, peak RSS per host (a Dask "
            f"worker plus, for ushuffle, the ushuffled it started, sampled "
            f"together every 50 ms, the larger of the two hosts; persisted "
            f"input included), CPU seconds of the workers and ushuffled. "
            f"Speed-up: p2p's wall time over ushuffle's (CPU: the same for "
            f"CPU seconds, steadier on a shared machine); memory: "
            f"ushuffle's peak per host over p2p's. The larger-than-memory "
            f"rows make their rows inside the graph (they do not fit to "
            f"persist), 256 partitions, and check every output "
            f"partition's row count, key sum and that each row hashes to "
            f"it.")
    return table(["operation, frame", "p2p", "tasks", "disk", "ushuffle",
                  "speed-up vs p2p", "memory vs p2p", "goal", ""],
                 rows), note


def t_replicas(res, m):
    bw, cpu = res["median_bw"], res["median_cpu_s_per_gib"]
    usr = res.get("median_user_s_per_gib", cpu)
    rows = [["push throughput (GiB of frames): replicas 2 vs 1",
             mib(bw["1"]), mib(bw["2"]), f"{bw['2'] / bw['1']:.2f}×",
             "≥ 0.5×", met(bw["2"] / bw["1"] >= 0.5)],
            ["writer CPU (user + system) per GiB of frames",
             f"{cpu['1']:.3f} s", f"{cpu['2']:.3f} s",
             f"{cpu['2'] / cpu['1']:.2f}×", "≤ 1.3×",
             met(cpu["2"] / cpu["1"] <= 1.3)],
            ["... user CPU alone (the library's own work)",
             f"{usr['1']:.3f} s", f"{usr['2']:.3f} s",
             f"{usr['2'] / usr['1']:.2f}×", "—", ""],
            ["... per GiB sent (twice the frames with 2)",
             f"{cpu['1']:.3f} s", f"{cpu['2'] / 2:.3f} s",
             f"{cpu['2'] / 2 / cpu['1']:.2f}×", "—", ""],
            ["worker SIGKILLed mid-push: writer noticed (median)", "—",
             f"{res['median_noticed_ms']:.1f} ms", "—", "—", ""],
            ["... its longest swap after the kill (median, max)", "—",
             f"{res['median_stall_ms']:.1f} ms, "
             f"{res['max_stall_ms']:.1f} ms", "—", "—", ""]]
    note = (f"`ush_bench_net_push --size={res['size_mib']} --replicas=1|2` "
            f"to three `ushuffled --direct=1` on loopback, "
            f"{res['rounds']} alternating rounds; writer CPU = the bench "
            f"process's user + system time. Loopback copies every send "
            f"(the kernel reports SEND_ZC as copied and the connections "
            f"switch to plain SEND), so sending twice costs the kernel two "
            f"copies (system time): the user-CPU row shows whether the client "
            f"adds a copy of its own. Kill rows: `--kill=PID` SIGKILLs one "
            f"worker half-way through a replicas-2 push; the writer goes on "
            f"with the other replica and the map commits.")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


def t_commit(res, m):
    ps, p50, p99 = (res["median_per_s"], res["median_p50_us"],
                    res["median_p99_us"])
    fio = res["median_fsyncs_per_s"]
    cpu = res.get("median_cpu_us", {})
    if "old" in ps:
        rows = [["commits per second: this build vs the old build",
                 f"{ps['old']:.0f}", f"{ps['new']:.0f}",
                 f"{ps['new'] / ps['old']:.2f}×", "—", ""],
                ["commit latency p50", f"{p50['old'] / 1000:.1f} ms",
                 f"{p50['new'] / 1000:.1f} ms",
                 f"{p50['new'] / p50['old']:.2f}×", "—", ""],
                ["commit latency p99", f"{p99['old'] / 1000:.1f} ms",
                 f"{p99['new'] / 1000:.1f} ms",
                 f"{p99['new'] / p99['old']:.2f}×", "—", ""]]
        if "old" in cpu:
            rows.append(["worker CPU per commit (user + sys)",
                         f"{cpu['old']:.0f} µs", f"{cpu['new']:.0f} µs",
                         f"{cpu['new'] / cpu['old']:.2f}×", "—", ""])
        rows.append(["the old build's commits per second vs fio's "
                     "fsyncs per second", f"{fio:.0f}", f"{ps['old']:.0f}",
                     f"{ps['old'] / fio:.2f}×", "—", ""])
    else:  # the old build speaks another protocol version
        rows = [["commits per second: this build (the old build speaks "
                 "another protocol: no baseline in this run)", "—",
                 f"{ps['new']:.0f}", "—", "≥ 5×", ""],
                ["commit latency p50", "—", f"{p50['new'] / 1000:.1f} ms",
                 "—", "—", ""],
                ["commit latency p99", "—", f"{p99['new'] / 1000:.1f} ms",
                 "—", "—", ""]]
    rows.append(["commits per second vs fio's fsyncs per second "
                 "(--fsync=1)", f"{fio:.0f}", f"{ps['new']:.0f}",
                 f"{ps['new'] / fio:.2f}×", "≥ 0.5×",
                 met(ps["new"] / fio >= 0.5)])
    cmd = res["data"]["new"][0]["cmd"].split(" --workers")[0]
    note = (f"{res['writers']} writers (a thread and ring each) commit "
            f"{res['maps']} maps of {res['map_kib']} KiB of one shuffle "
            f"against one ushuffled with its default options: the old "
            f"build is `{res['base']}` "
            + ("(each commit fdatasyncs on its worker thread, then appends "
               "its record under the worker's lock and syncs)"
               if res["base"] == "b0157be" else
               "(a commit's data synced through the ring, then its record "
               "in the committer's group: two dependent syncs)")
            + f", this build logs each record in the committer's group "
            f"while its data's syncs run (commit log format 2: one wait "
            f"for both). Latency is that of ush_writer_commit(). "
            f"fio's rate is one job of 4 KiB writes each followed by an "
            f"fsync on the same disk (`{res['fio_cmd']}`): the rate one "
            f"stream of syncs gets. Medians of {res['rounds']} rounds, "
            f"alternating. `{cmd}`.")
    if "old" not in ps:
        note += (f" The old build `{res['base']}` speaks another protocol "
                 f"version than this build's client, so this run has no "
                 f"baseline: the before/after comparison is the commit "
                 f"row's reference run in bench/results/README.md, made "
                 f"before the protocol changed.")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


def t_disks(res, m):
    bw = res["median_bw"]
    rows = [[f"push bandwidth over {n} directories vs 1",
             f"{bw['1'] / 2**20:.0f} MiB/s", f"{bw[n] / 2**20:.0f} MiB/s",
             f"{bw[n] / bw['1']:.2f}×", "—", ""] for n in ("2", "4")]
    note = (f"One ushuffled with 4 threads whose --dir lists 1, 2 or 4 "
            f"directories, each on an ext4 file system of its own loop "
            f"device over a file in the scratch directory (so all share "
            f"the one disk beneath: this measures the worker's spread, "
            f"not more spindles); {res['jobs']} CLI jobs of "
            f"{res['size_per_job']} each push one shuffle and commit. "
            f"Medians of {res['rounds']} rounds, alternating. "
            f"`{res['cmd'].split(' --workers')[0]}`.")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


def t_seal(res, m):
    md, r = res["median"], res["ratios"]
    rows = []
    for t, what in (("disk", "disk spill"), ("net", "net push")):
        rows.append([f"{what}: write MiB/s, sealed vs plain",
                     mib(md[f"{t}_plain"]["write_bw"]),
                     mib(md[f"{t}_sealed"]["write_bw"]),
                     f"{r[t]['write_bw']:.2f}×", "≥ 0.85×",
                     met(r[t]["write_bw"] >= 0.85)])
        rows.append([f"{what} read back{' (fetch)' if t == 'net' else ''}"
                     ": MiB/s", mib(md[f"{t}_plain"]["read_bw"]),
                     mib(md[f"{t}_sealed"]["read_bw"]),
                     f"{r[t]['read_bw']:.2f}×", "≥ 0.85×",
                     met(r[t]["read_bw"] >= 0.85)])
        rows.append([f"{what}: client CPU s per GiB (write + read)",
                     f"{md[t + '_plain']['cpu_s_per_gib']:.2f}",
                     f"{md[t + '_sealed']['cpu_s_per_gib']:.2f}",
                     f"{r[t]['cpu_s_per_gib']:.2f}×", "≤ 1.4×",
                     met(r[t]["cpu_s_per_gib"] <= 1.4)])
    rows.append(["net: worker CPU s",
                 f"{md['net_plain']['worker_cpu_s']:.2f}",
                 f"{md['net_sealed']['worker_cpu_s']:.2f}",
                 f"{r['net']['worker_cpu_s']:.2f}×", "≈ 1×", ""])
    cmd = res["data"]["net_sealed"][0]["cmd"].split(" --workers")[0]
    note = (f"One --rw=shuffle job of {res['size']} of 1000-byte records "
            f"per row, no codec, plain and sealed (AES-256-GCM, "
            f"`--encrypt-key-file`) alternating, {res['rounds']} rounds, "
            f"medians; net jobs push to and fetch from a fresh ushuffled "
            f"on loopback, whose CPU is counted apart. `{cmd}`.")
    return table(["measure", "plain", "sealed", "ratio", "target", ""],
                 rows), note


def t_spark(res, m):
    """The seed's job: per case, medians of sort shuffle and ushuffle."""
    rows = []
    base = res["cases"].get("400x80")
    for case, c in res["cases"].items():
        parts, rb = case.split("x")
        lab = f"{parts} partitions, {rb}-byte rows"

        def cell(k, scale=1.0, unit="s"):
            return (f"{c[k]['sort'] / scale:,.1f} {unit}",
                    f"{c[k]['ushuffle'] / scale:,.1f} {unit}",
                    f"{c[k].get('ratio', 0):.2f}× (p={c[k].get('p', 1):.2f})")
        goals = {"map_cpu_s": ("≤ 0.7×", lambda r: r <= 0.7),
                 "wall_s": ("≤ 0.9×", lambda r: r <= 0.9)}
        for k, name in [("map_cpu_s", "map tasks' CPU"),
                        ("reduce_cpu_s", "reduce tasks' CPU"),
                        ("total_cpu_s", "JVM + ushuffled CPU"),
                        ("wall_s", "wall time (3 repartitions)"),
                        ("jvm_peak_rss", "JVM peak RSS")]:
            a, b, r = cell(k, 2**20, "MiB") if k == "jvm_peak_rss" \
                else cell(k)
            target, verdict = "", ""
            if k in goals and case == "400x80":
                target = goals[k][0]
                verdict = met(goals[k][1](c[k]["ratio"]))
            elif k in goals and base:
                r0 = base[k]["ratio"]
                target = f"≤ 1.2× its 400-partition ratio ({r0:.2f}×)"
                verdict = met(c[k]["ratio"] <= 1.2 * r0)
            rows.append([f"{lab}: {name}", a, b, r, target, verdict])
    n = len(next(iter(res["cases"].values()))["runs"]["sort"])
    note = (f"{res['rows']:,} cached rows repartitioned 3 times into a "
            f"`noop` sink (every column moves), {n} rounds a side after "
            f"one warm-up round each, sort shuffle and ushuffle alternating "
            f"(`bench/spark_seed.py` under pyspark 3.5.8's `spark-submit`, "
            f"`local[2]`, 6 GiB driver; ushuffle through the plugin's jar "
            f"and one `ushuffled --threads=2` on the same 2 cores). Medians;"
            f" p: a two-sided permutation test of the medians' ratio. Map "
            f"and reduce CPU: Spark's executor CPU time of the shuffle-map "
            f"and result stages (task threads only); beside it the whole "
            f"JVM's CPU plus ushuffled's, so work moved off the task thread "
            f"still counts.")
    return table(["measure", "sort shuffle", "ushuffle", "ratio", "target",
                  ""], rows), note


def t_read(res, m):
    rows = [[x[0], x[1], x[2], x[4], x[5], "" if x[6] is None else met(x[6])]
            for x in read_rows(res)]
    note = (f"One run, {res['rounds']} round(s). Limits measured in the same "
            f"rounds: iperf3 over loopback, fio io_uring O_DIRECT 64 KiB "
            f"qd32 read of {res['size']} on the scratch disk. ushuffle: a "
            f"push of {res['size']} (codec none, the CLI's default records, "
            f"one writer) to a separate `ushuffled` with its default flags, "
            f"then `ushuffle --rw=read --numjobs=1` (every record "
            f"CRC-verified) after the worker's files were dropped from the "
            f"page cache; partition after partition: pushes of "
            f"{res['fetch_size']} at 64 and {res['top']:,} partitions "
            f"(alternating which goes first), each read right after it by "
            f"one thread (one range reader, one FETCH per worker). CPU: the "
            f"reading process's user + system time, and the worker's over "
            f"the same read (/proc), per GiB of frames. "
            f"`bench/run --only=read`.")
    return table(["measure", "baseline", "ushuffle", "ratio", "target", ""],
                 rows), note


TABLES = {"handoff": t_handoff, "alloc": t_alloc, "ctx_reuse": t_ctx,
          "disk": t_disk, "net": t_net, "codec": t_codec,
          "scaling": t_scaling, "partitions": t_parts,
          "small_jobs": t_small_jobs, "restart": t_restart,
          "wire": t_wire, "dask": t_dask, "replicas": t_replicas,
          "records": t_records, "commit": t_commit, "disks": t_disks,
          "seal": t_seal, "spark": t_spark, "read": t_read}
TITLES = {"handoff": "1. Hand-off: swap vs copy",
          "alloc": "2. Allocation per batch",
          "ctx_reuse": "3. Context reuse",
          "disk": "4. Disk spill vs fio",
          "net": "5. Push to a worker",
          "codec": "6. Codec cost",
          "scaling": "7. Scaling",
          "partitions": "8. Many partitions",
          "small_jobs": "9. Small jobs",
          "restart": "10. Restart time vs commit-log history",
          "wire": "11. Wire speed at real partition counts",
          "dask": "12. Dask shuffle: ushuffle vs Dask's p2p, tasks and disk",
          "replicas": "13. Replicas: push to two workers, and a worker's death",
          "records": "14. The record path: ns per record",
          "commit": "15. Group commit: many writers committing at once",
          "disks": "16. Many disks: one worker over 1, 2 and 4 file systems",
          "seal": "17. Sealed frames: AES-256-GCM against plain",
          "spark": "18. Spark: the seed's job, sort shuffle against ushuffle",
          "read": "19. Reading back: the fetch, and partition after "
                  "partition"}


def gnuplot(script, png, dat):
    if not shutil.which("gnuplot"):
        return False
    # A header line documents the columns; as a comment it is not a row.
    if not re.match(r"[-0-9.]", dat):
        dat = "# " + dat
    with open(png + ".dat", "w") as f:
        f.write(dat)
    s = (f"set terminal pngcairo size 900,480 font ',10' noenhanced\n"
         f"set output '{png}'\nset grid ytics\n"
         f"set key outside bottom center horizontal\n"
         f"set style data histograms\nset style histogram clustered gap 1\n"
         f"set style fill solid 0.8 border -1\nset boxwidth 0.9\n"
         f"DAT='{png}.dat'\n" + script)
    p = subprocess.run(["gnuplot"], input=s, text=True, capture_output=True)
    os.unlink(png + ".dat")
    if p.returncode:
        log(f"gnuplot failed for {png}: {p.stderr[-500:]}")
    return p.returncode == 0


def plot(name, res, img):
    png = os.path.join(img, f"bench-{name}.png")
    if name == "handoff":
        dat = "size copy swap\n" + "".join(
            f"{x['buffer_bytes'] >> 10}KiB {x['copy']['median_ns']} "
            f"{x['swap']['median_ns']}\n" for x in res["raw"]["results"])
        sc = ("set title 'Hand-off cost per buffer (median call, ns, log)'\n"
              "set logscale y\nplot DAT using 2:xtic(1) title 'copy', "
              "'' using 3 title 'swap'\n")
    elif name == "alloc":
        dat = "payload baseline copy swap\n" + "".join(
            f"{x['payload_bytes'] / 1024:.1f}KiB "
            f"{x['baseline']['median_ns_per_batch']} "
            f"{x['copy']['median_ns_per_batch']} "
            f"{x['swap']['median_ns_per_batch']}\n"
            for x in res["raw"]["results"])
        sc = ("set title 'Write time per batch (ns, log); baseline allocates "
              "1 MiB per batch, ushuffle 0 B'\nset logscale y\n"
              "plot DAT using 2:xtic(1) title 'baseline (1 MiB calloc)', "
              "'' using 3 title 'copy', '' using 4 title 'swap'\n")
    elif name == "ctx_reuse":
        rows = [x for x in res["raw"]["results"] if "fresh" in x]
        dat = "case fresh reused\n" + "".join(
            f"\"{x['codec']} {x['op'][0]} {x['batch_bytes'] // 1024}K\" "
            f"{x['fresh']['median_ns_per_batch']} "
            f"{x['reused']['median_ns_per_batch']}\n" for x in rows)
        sc = ("set title 'Time per batch: context per batch vs reused "
              "(ns, log)'\nset logscale y\nplot DAT using 2:xtic(1) title "
              "'fresh context', '' using 3 title 'reused'\n")
    elif name == "disk":
        dat = "bs fio io_uring psync\n" + "".join(
            f"{bs} {x['median_bw']['fio'] / 2**20} "
            f"{x['median_bw']['io_uring'] / 2**20} "
            f"{x['median_bw']['psync'] / 2**20}\n"
            for bs, x in res["bs"].items())
        sc = ("set title 'Disk spill, O_DIRECT write bandwidth (MiB/s)'\n"
              "set yrange [0:*]\nplot DAT using 2:xtic(1) title 'fio io_uring',"
              " '' using 3 title 'ushuffle io_uring', '' using 4 title "
              "'ushuffle psync'\n")
    elif name == "net":
        mb = res["median_bw"]
        dat = "what MiBs\n" + "".join(f"{k} {v / 2**20}\n"
                                      for k, v in mb.items())
        sc = ("set title 'Push to a worker (MiB/s)'\nset yrange [0:*]\n"
              "plot DAT using 2:xtic(1) title 'throughput'\n")
    elif name == "codec":
        dat = "codec alone lib job\n" + "".join(
            f"{k} {x['codec_bw'] / 2**20} {x['lib_bw'] / 2**20} "
            f"{x['ushuffle_bw'] / 2**20}\n"
            for k, x in res["codecs"].items())
        sc = ("set title 'Codec alone vs through ushuffle, null target "
              "(MiB/s raw)'\nset yrange [0:*]\nplot DAT using 2:xtic(1) "
              "title 'codec alone', '' using 3 title 'library (copy in + "
              "swap)', '' using 4 title 'CLI job'\n")
    elif name == "scaling":
        ns = res["numjobs"]
        t = res["targets"]
        dat = "n " + " ".join(f"{k} {k}_linear" for k in t) + "\n" + "".join(
            f"{n} " + " ".join(
                f"{t[k]['median_bw'][str(n)] / 2**20} "
                f"{n * t[k]['median_bw']['1'] / 2**20}" for k in t) + "\n"
            for n in ns)
        cols = []
        for i, k in enumerate(t):
            cols.append(f"DAT using 1:{2 + 2 * i} with linespoints lw 2 "
                        f"title '{k}'")
            cols.append(f"DAT using 1:{3 + 2 * i} with lines dt 2 "
                        f"title '{k} linear'")
        sc = ("set title 'Scaling with numjobs (MiB/s)'\nset xtics 1\n"
              "set yrange [0:*]\nplot " + ", ".join(cols) + "\n")
    elif name == "partitions":
        dat = "".join(f"{p} {res['median_bw'][str(p)] / 2**20} "
                      f"{res['median_rss_kib'][str(p)] / 1024}\n"
                      for p in res["partitions"])
        sc = ("set title 'Many partitions: write throughput and peak RSS'\n"
              "set logscale x\nset ylabel 'MiB/s'\nset y2label 'peak RSS "
              "(MiB)'\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\n"
              "set xlabel 'partitions'\nplot DAT using 1:2 with linespoints "
              "lw 2 title 'throughput', DAT using 1:3 axes x1y2 with "
              "linespoints lw 2 title 'peak RSS'\n")
    elif name == "wire":
        rows = [x for x in wire_rows(res) if x[6] is not None]
        dat = "measure ratio target\n" + "".join(
            f"\"{x[7]} {x[5].split()[0]}\" {x[3]} "
            f"{float(x[5].split()[1].rstrip('×'))}\n" for x in rows)
        sc = ("set title 'Wire speed: each ratio beside its target (≥ rows: "
              "higher is better, ≤ rows: lower)'\nset logscale y\n"
              "set xtics rotate by -35\nset yrange [0.01:*]\n"
              "plot DAT using 2:xtic(1) title 'ratio (this run)', "
              "'' using 3 title 'target'\n")
    else:
        return None
    return os.path.basename(png) if gnuplot(sc, png, dat) else None


def extra_plots(name, res, img):
    """Plots beyond a benchmark's first: [(title, file name)]."""
    out = []
    if name == "wire":
        png = os.path.join(img, "bench-wire-partitions.png")
        mb = res["median_bw"]
        dat = "partitions push disk\n" + "".join(
            f"{p} {mb['push' if p == 64 else f'push{p}'] / 2**20} "
            f"{mb['disk' if p == 64 else f'disk{p}'] / 2**20}\n"
            for p in res["sweep"])
        sc = (f"set title 'Throughput vs partitions (MiB/s of frames); "
              f"limits: iperf3 {mb['iperf3'] / 2**20:.0f}, fio write "
              f"{mb['fio_write'] / 2**20:.0f}, fio read "
              f"{mb['fio_read'] / 2**20:.0f}'\nset logscale x\n"
              f"set xrange [40:{int(res['sweep'][-1] * 1.6)}]\n"
              f"set xlabel 'partitions'\nset yrange [0:*]\n"
              f"plot DAT using 1:2 with linespoints lw 2 title 'push to "
              f"ushuffled (defaults)', DAT using 1:3 with linespoints lw 2 "
              f"title 'disk spill'\n")
        if gnuplot(sc, png, dat):
            out.append(("11. Throughput vs partitions",
                        os.path.basename(png)))
    elif name == "scaling" and res.get("net"):
        net = res["net"]
        lv = net["levels"]
        png = os.path.join(img, "bench-scaling-net.png")
        dat = "writers " + " ".join(f"t{t}" for t in lv) + "\n" + "".join(
            f"{w} " + " ".join(str(net["median_bw"][f"{w}x{t}"] / 2**20)
                               for t in lv) + "\n" for w in lv)
        cols = [f"DAT using 1:{2 + i} with linespoints lw 2 title "
                f"'{t} worker thread{'s' if t > 1 else ''}'"
                for i, t in enumerate(lv)]
        sc = ("set title 'Net push vs writer threads and worker threads "
              "(MiB/s of frames)'\nset logscale x 2\nset xtics ("
              + ", ".join(f"'{w}' {w}" for w in lv) + ")\n"
              "set xlabel 'writer threads (--numjobs)'\nset yrange [0:*]\n"
              "plot " + ", ".join(cols) + "\n")
        if gnuplot(sc, png, dat):
            out.append(("7. Net push scaling", os.path.basename(png)))
    return out


def summary_rows_of(text, name):
    """(run directory, summary rows) of the table the document shows for
    name now, or None: the rows with a verdict, as render makes them."""
    b, e = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    mt = re.search(re.escape(b) + "(.*?)" + re.escape(e), text, flags=re.S)
    if not mt:
        return None
    run = re.search(r"\*Run `([^`]+)`", mt.group(1))
    rows = []
    for line in mt.group(1).splitlines():
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and cells[-1] in ("**met**", "**not met**"):
            rows.append([TITLES[name], cells[0], cells[3], cells[4],
                         cells[5]])
    for line in mt.group(1).splitlines():
        if line.startswith("**skipped") or line.startswith("**failed"):
            rows.append([TITLES[name], "—", "—", "—",
                         "**" + line.strip("*").split(":")[0] + "**"])
    return (run.group(1) if run else "?", rows)


# Benchmarks whose section is also rendered into another page, between
# the same markers, where that page has them.
ALSO_IN = {"dask": os.path.join(ROOT, "docs", "python.md")}


def render(out, doc, img):
    with open(os.path.join(out, "machine.json")) as f:
        m = json.load(f)
    os.makedirs(img, exist_ok=True)
    try:
        with open(doc) as f:
            text = f.read()
    except OSError:
        text = "# Performance\n"
    rel = os.path.relpath(out, ROOT)
    summary = []
    stamps, commits = set(), set()
    older = {}  # run directory → titles whose summary rows come from it
    for name in BENCHES:
        try:
            with open(os.path.join(out, f"{name}.json")) as f:
                res = json.load(f)
        except OSError:
            # Not in this run: its section keeps the table of the run it
            # names, and the summary keeps that table's verdicts, so a
            # run of some benchmarks (--only) leaves the others' rows.
            prev = summary_rows_of(text, name)
            if prev:
                older.setdefault(prev[0], []).append(
                    TITLES[name].split(".")[0])
                summary += prev[1]
            continue
        st = res.get("status")
        stamps.add(res.get("utc", m["date"]))
        commits.add(res.get("commit", m["commit"]))
        mm = dict(m, date=res.get("utc", m["date"]),
                  commit=res.get("commit", m["commit"]),
                  dirty=res.get("dirty", m["dirty"]))
        body = [f"*Run `{rel}`, mode {res.get('mode', '?')}, on "
                f"{machine_line(mm)}.*", ""]
        if st == "ok":
            t, note = TABLES[name](res["result"], m)
            body += [t, "", note]
            # Rows with a verdict go to the summary at the top.
            for line in t.splitlines()[2:]:
                cells = [x.strip() for x in line.strip("|").split("|")]
                if cells[-1]:
                    summary.append([TITLES[name], cells[0], cells[3],
                                    cells[4], cells[5]])
            p = plot(name, res["result"], img)
            if p:
                body += ["", f"![{TITLES[name]}](img/{p})"]
            for title, q in extra_plots(name, res["result"], img):
                body += ["", f"![{title}](img/{q})"]
        elif st == "skipped":
            body += [f"**skipped: {res['reason']}**"]
        else:
            body += [f"**failed: {res.get('reason', '?')}**"]
        if st != "ok":
            summary.append([TITLES[name], "—", "—", "—", f"**{st}**"])
        block = "\n".join(body)
        b, e = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
        new = f"{b}\n{block}\n{e}"
        if b in text and e in text:
            text = re.sub(re.escape(b) + ".*?" + re.escape(e),
                          lambda _: new, text, flags=re.S)
        else:
            text += f"\n## {TITLES[name]}\n\n{new}\n"
        also_in = ALSO_IN.get(name)
        if also_in and os.path.exists(also_in):
            with open(also_in) as f:
                other = f.read()
            if b in other and e in other:
                other = re.sub(re.escape(b) + ".*?" + re.escape(e),
                               lambda _: new, other, flags=re.S)
                with open(also_in, "w") as f:
                    f.write(other)
    b, e = "<!-- bench:summary:begin -->", "<!-- bench:summary:end -->"
    when = " – ".join(sorted({min(stamps), max(stamps)})) if stamps else ""
    mm = dict(m, date=when, commit=", ".join(sorted(commits)) or m["commit"])
    also = "; ".join(f"{', '.join(v)} from `{k}`"
                     for k, v in older.items())
    if also:
        also = (f" Benchmarks not in it: the runs their sections name "
                f"({also}).")
    new = (f"{b}\n*Run `{rel}` on {machine_line(mm)}.*{also}\n\n" +
           table(["benchmark", "measure", "ratio", "target", ""], summary) +
           f"\n{e}")
    if b in text and e in text:
        text = re.sub(re.escape(b) + ".*?" + re.escape(e), lambda _: new,
                      text, flags=re.S)
    with open(doc, "w") as f:
        f.write(text)
    log(f"wrote {doc} and plots in {img}")


