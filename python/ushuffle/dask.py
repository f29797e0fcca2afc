"""A Dask DataFrame shuffle over ushuffle (docs/python.md).

shuffle(df, on) builds three layers: one map task per input partition
(hash rows as dask's partitioning_index does, write each partition's rows
through a ushuffle Writer, commit, return the map status bytes and the
rows per partition), one task that lists the statuses and sums the rows,
and one reduce task per output partition (read exactly the attempts whose
statuses Dask delivered). A map task that Dask re-runs (its worker died)
writes a new, random attempt number; the attempts Dask did not deliver
are never read.

Rows travel as row batches (ushuffle/rows.py): the map hashes and sorts
them in C and packs each batch's columns straight into a push buffer;
the reducer copies each record's columns once into its output's.
"""
import collections
import os
import shutil
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
from dask.base import tokenize
from dask.dataframe.core import new_dd_object
from dask.highlevelgraph import HighLevelGraph

import ushuffle
from ushuffle import rows as _rows

__all__ = ["shuffle", "drop", "install"]

_DEFAULTS = {"app": "dask", "dir": None, "codec": None, "replicas": 1,
             "push_size": 1 << 20, "pool_bytes": 8 << 20,
             "timeout_ms": 0, "secret_file": None,
             "on_commit": None}
_local = threading.local()
# Writer threads per process: one map's rows are written while another's
# commit waits. At most that many maps are handed over at once: each such
# map's task (and input frame) waits outside the worker's thread pool.
_IO_THREADS = 2
_io_pool, _io_lock = [], threading.Lock()
# Seconds this process's tasks spent per phase (bench/dask_shuffle.py reads
# them to tell Python from transport). Python: hash (partition of each row,
# sort by it), take (the columns carried in the rest, in partition order),
# write (pack the batches into push buffers, hand-offs, waits for
# credit), decode (copy each record's columns into the output's,
# unpickle the rest), concat (make the frame). Transport: commit (flush,
# worker sync), fetch (reader). map and reduce: whole tasks.
# stats holds wall seconds, cpu the calling thread's CPU seconds.
stats = collections.Counter()
cpu = collections.Counter()


def _clock():
    return time.perf_counter(), time.thread_time()


def _tally(phase, t):
    """Adds the wall and this thread's CPU seconds since t (a _clock())
    to phase; returns the clock now."""
    now = _clock()
    stats[phase] += now[0] - t[0]
    cpu[phase] += now[1] - t[1]
    return now


def _ring(cfg):
    """The calling thread's ring (a ring serves one thread), made once."""
    key = (cfg["codec"], cfg["push_size"], cfg["pool_bytes"])
    ring = getattr(_local, "rings", {}).get(key)
    if ring is None:
        ring = ushuffle.Ring(codec=cfg["codec"], push_size=cfg["push_size"],
                             pool_bytes=cfg["pool_bytes"])
        _local.rings = {**getattr(_local, "rings", {}), key: ring}
    return ring


def _auth(cfg):
    if cfg["secret_file"]:
        ushuffle.auth_secret(cfg["app"], path=cfg["secret_file"])


def _io():
    """This process's writer threads and a slot per thread (a map holds
    one from its hand-over to its commit), made once."""
    with _io_lock:
        if not _io_pool:
            _io_pool.append(ThreadPoolExecutor(_IO_THREADS, "ushuffle-io"))
            _io_pool.append(threading.BoundedSemaphore(_IO_THREADS))
    return _io_pool


def _secede():
    """Leaves the Dask worker's thread pool, if in one, so that the
    worker starts its next task while this one waits."""
    try:
        from distributed import get_worker, secede
        get_worker()
    except (ImportError, ValueError):
        return
    secede()


def _map(frame, on, nparts, sid, index, cfg):
    """Writes frame's rows to their partitions and commits: returns the
    map status and the rows per partition (the reducers size their
    columns by them). The task thread hashes and sorts; a writer thread
    writes and commits while the task waits outside the worker's pool, so
    that the commit's wait (the workers' sync) overlaps the next map."""
    _auth(cfg)
    t0 = t = _clock()
    order, counts = _rows.partition(frame, on, nparts)
    t = _tally("hash", t)
    parts = [_rows.Packer(frame, order, cfg["push_size"])]
    del order
    _tally("take", t)
    pool, slots = _io()
    slots.acquire()  # a writer thread is free
    try:
        job = pool.submit(_write, cfg, sid, index, nparts, counts, parts)
    except BaseException:
        slots.release()
        raise
    del parts
    _secede()
    status = job.result()
    _tally("map", t0)
    if cfg["on_commit"]:
        cfg["on_commit"](index)
    return status, counts


def _write(cfg, sid, index, nparts, counts, parts):
    """Writes the sorted rows (on a writer thread, its own ring) and
    commits: the map status. Empties parts, the only other reference to
    the sorted rows, so that they go before the commit's wait; frees the
    map's slot at the end."""
    slots = _io()[1]
    packer = parts.pop()
    try:
        _auth(cfg)
        ends = np.cumsum(counts)
        target = "net" if cfg["workers"] else "disk"
        while True:
            attempt = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
            try:
                w = ushuffle.Writer(_ring(cfg), sid, index, attempt, nparts,
                                    target=target, dir=cfg["dir"],
                                    workers=cfg["workers"], app=cfg["app"],
                                    timeout_ms=cfg["timeout_ms"],
                                    replicas=cfg["replicas"])
                break
            except ushuffle.Error as e:  # the random attempt is taken
                if e.name not in ("USH_ECOMMITTED", "EEXIST", "EBUSY"):
                    raise
        with w:
            t = _clock()
            for p in np.flatnonzero(counts):
                packer.write(w, int(p), int(ends[p] - counts[p]),
                             int(ends[p]))
            t = _tally("write", t)
            del packer  # in the push buffers now
            status = w.commit()
            _tally("commit", t)
        return status
    finally:
        slots.release()


def _statuses(results, nparts):
    """The maps' statuses and the rows of each partition over all maps:
    what every reducer needs, in O(maps + partitions)."""
    rows = np.zeros(nparts, np.int64)
    for _, counts in results:
        rows += counts
    return [s for s, _ in results], rows


def _reduce(maps, part, meta, cfg):
    _auth(cfg)
    t0 = _clock()
    statuses, rows = maps
    left = int(rows[part])
    frames, g = [], None
    with ushuffle.Reader(part, statuses, cfg["timeout_ms"]) as r:
        while True:
            t = _clock()
            rec = r.next()
            t = _tally("fetch", t)
            if rec is None:
                break
            layout = _rows.layout(rec)
            if g is None or layout != g.layout:
                if g is not None:
                    left -= g.rows
                    frames.append(g.frame())
                g = _rows.Gather(bytes(layout), left)
            g.add(rec)
            _tally("decode", t)
    t = _clock()
    if g is not None:
        frames.append(g.frame())
    out = meta.copy() if not frames else \
        pd.concat(frames) if len(frames) > 1 else frames[0]
    _tally("concat", t)
    _tally("reduce", t0)
    return out


def _drop(cfg, sid):
    if cfg["workers"]:
        try:
            ushuffle.shuffle_drop(cfg["workers"], cfg["app"], sid)
        except ushuffle.Error:
            pass  # an unreachable worker drops it at its --app-ttl
    else:
        shutil.rmtree(os.path.join(cfg["dir"], f"s{sid}"),
                      ignore_errors=True)


def install(client, **opts):
    """One ushuffled per host of client's Dask workers; returns the
    options of shuffle() that use them (ushuffle/deploy.py)."""
    from ushuffle.deploy import install as start
    return start(client, **opts)


def drop(result):
    """Drops the shuffle behind a collection shuffle() returned now,
    instead of when the collection is freed."""
    for layer in result.dask.layers.values():
        f = getattr(layer, "_ushuffle_drop", None)
        if f:
            f()


def shuffle(df, on, npartitions=None, workers=None, **opts):
    """df shuffled by column(s) on into npartitions (df's by default)
    through ushuffled workers ("HOST:PORT,...") or, without workers, the
    disk target under opts["dir"] (one host only).

    opts: app, dir, codec, replicas (workers each batch goes to: with
    2, a worker lost loses nothing), push_size, pool_bytes, timeout_ms,
    secret_file (else $USHUFFLE_SECRET on the Dask workers), on_commit
    (called with the map index after each commit: for tests).

    The shuffle's data is dropped when the returned collection (every
    collection derived from it) has been freed: compute, then let go."""
    unknown = set(opts) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"ushuffle.dask.shuffle: unknown options {unknown}")
    cfg = {**_DEFAULTS, **opts, "workers": workers}
    on = [on] if isinstance(on, str) else list(on)
    missing = [c for c in on if c not in df.columns]
    if missing:
        raise KeyError(f"ushuffle.dask.shuffle: no column {missing} in "
                       f"the frame (columns: {list(df.columns)})")
    nparts = int(npartitions or df.npartitions)
    if workers:
        _auth(cfg)
        # Fails now, naming the worker, before any task writes anything.
        ushuffle.app_heartbeat(workers, cfg["app"], cfg["timeout_ms"])
    else:
        cfg["dir"] = cfg["dir"] or os.path.join(
            "/var/tmp", f"ushuffle-dask-{os.getuid()}")
        os.makedirs(cfg["dir"], exist_ok=True)
    sid = uuid.uuid4().int & 0x7FFFFFFF
    token = tokenize(df, on, nparts, sid)
    mname, sname, rname = (f"ushuffle-{k}-{token}"
                           for k in ("map", "statuses", "reduce"))
    graph = {(mname, i): (_map, (df._name, i), on, nparts, sid, i, cfg)
             for i in range(df.npartitions)}
    graph[sname] = (_statuses, [(mname, i) for i in range(df.npartitions)],
                    nparts)
    meta = df._meta
    graph.update({(rname, j): (_reduce, sname, j, meta, cfg)
                  for j in range(nparts)})
    hlg = HighLevelGraph.from_collections(rname, graph, dependencies=[df])
    # Every collection derived from the result shares this layer: the
    # shuffle lives as long as one of them does.
    layer = hlg.layers[rname]
    layer._ushuffle_drop = weakref.finalize(layer, _drop, cfg, sid)
    return new_dd_object(hlg, rname, meta, [None] * (nparts + 1))
