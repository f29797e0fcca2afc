"""A Dask DataFrame shuffle over ushuffle (docs/python.md).

shuffle(df, on) builds three layers: one map task per input partition
(hash rows as dask's partitioning_index does, write each partition's rows
through a ushuffle Writer, commit, return the map status bytes and the
rows per partition), one task that lists the statuses and sums the rows,
and one reduce task per output partition (read exactly the attempts whose
statuses Dask delivered). A map task that Dask re-runs (its worker died)
writes a new, random attempt number; the attempts Dask did not deliver
are never read.

Row batches carry the numeric columns (and index) as raw bytes, sliced
from one sorted copy per map and copied once into the reducer's columns;
the other columns travel pickled.
"""
import collections
import os
import pickle
import shutil
import struct
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
from dask.base import tokenize
from dask.dataframe.core import new_dd_object
from dask.dataframe.shuffle import partitioning_index
from dask.highlevelgraph import HighLevelGraph
from pandas._libs.algos import groupsort_indexer

import ushuffle

__all__ = ["shuffle", "drop"]

# A row batch is one record: a header "<4s I I Q" (magic, rows, layout
# length, rest length), the layout (a pickle: the frame's columns, which of
# them and whether the index travel raw, their dtypes), the rest (a pickle
# of the columns without a numpy dtype: object, string, nullable,
# categorical), then each raw column's bytes (the index first); every part
# starts 8-byte aligned. Raw columns cost no Python per row: the map sorts
# each once and writes slices of it, the reducer copies each record's
# slice straight into its output column. Every record is a whole batch
# within one frame (Writer.write_gather), so the frames of maps interleaved
# on a worker never split one.
_MAGIC = b"USD3"
_HDR = struct.Struct("<4sIIQ")
_PAD = bytes(8)
_RAW_KINDS = "biufcmM"  # numpy dtypes whose values are their bytes
_DEFAULTS = {"app": "dask", "dir": None, "codec": None,
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
# sort by it), take (the rows in partition order, once per map), pickle
# (the batches' rest columns and headers), decode (copy each record's
# columns into the output's, unpickle the rest), concat (make the frame).
# Transport: write (copy into push buffers, hand-offs, waits for credit),
# commit (flush, worker sync), fetch (reader). map and reduce: whole tasks.
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


def _pad(n):
    return _PAD[:-n % 8]


def _is_raw(dtype):
    return isinstance(dtype, np.dtype) and dtype.kind in _RAW_KINDS


def _sorted_parts(frame, order):
    """frame's rows in the order `order`, split into the layout (pickled),
    the raw columns as byte arrays (index first, if raw) and the rest
    frame (None when every column is raw)."""
    ix = frame.index
    raw_index = _is_raw(ix.dtype) and ix.nlevels == 1
    pos = [i for i, t in enumerate(frame.dtypes) if _is_raw(t)]
    sort = [np.take(frame.iloc[:, i].to_numpy(), order) for i in pos]
    if isinstance(ix, pd.RangeIndex):  # computed, not gathered
        sort.insert(0, (ix.start + ix.step * order).astype(ix.dtype))
    elif raw_index:
        sort.insert(0, np.take(ix.to_numpy(), order))
    # Bytes, not the dtype: numpy gives datetimes no buffer protocol.
    raws = [a.view(np.uint8) for a in sort]
    others = sorted(set(range(frame.shape[1])) - set(pos))
    rest = None
    if others or not raw_index:
        rest = frame.iloc[:, others].take(order)
        if raw_index:
            rest = rest.reset_index(drop=True)
    layout = pickle.dumps((frame.columns, ix.name, raw_index, pos,
                           [a.dtype.str for a in sort]), protocol=5)
    return layout, raws, [a.dtype.itemsize for a in sort], rest


def _write_rows(w, part, a, b, layout, raws, sizes, rest, limit):
    """Writes rows [a, b) of the sorted columns to part as one batch, or
    halves it if its record came out larger than limit bytes."""
    t = _clock()
    rp = b"" if rest is None else pickle.dumps(rest.iloc[a:b], protocol=5)
    pieces = [_HDR.pack(_MAGIC, b - a, len(layout), len(rp)),
              layout, _pad(len(layout)), rp, _pad(len(rp))]
    for r, sz in zip(raws, sizes):
        pieces += [r[a * sz:b * sz], _pad((b - a) * sz)]
    n = sum(memoryview(x).nbytes for x in pieces)
    t = _tally("pickle", t)
    if n > limit and b - a > 1:
        half = (a + b) // 2
        _write_rows(w, part, a, half, layout, raws, sizes, rest, limit)
        _write_rows(w, part, half, b, layout, raws, sizes, rest, limit)
        return
    w.write_gather(part, pieces)
    _tally("write", t)


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
    idx = np.asarray(partitioning_index(frame[on], nparts), dtype=np.intp)
    # A counting sort by partition, as dask's own group_split_pandas does.
    order, counts = groupsort_indexer(idx, nparts)
    counts = counts[1:]  # [0] counts the label -1, which hashes never give
    t = _tally("hash", t)
    parts = list(_sorted_parts(frame, order))
    del idx, order
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
    layout, raws, sizes, rest = parts
    parts.clear()
    try:
        _auth(cfg)
        ends = np.cumsum(counts)
        # Rows per batch from the bytes per row (the rest's deep size,
        # which exceeds its pickle's), so few batches need halving.
        limit = cfg["push_size"] - 256 - len(layout)
        per_row = sum(sizes) + (0 if rest is None else
                                rest.memory_usage(deep=True).sum() /
                                max(len(rest), 1))
        step = max(1, int(limit * 0.9 / max(per_row, 1)))
        target = "net" if cfg["workers"] else "disk"
        while True:
            attempt = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
            try:
                w = ushuffle.Writer(_ring(cfg), sid, index, attempt, nparts,
                                    target=target, dir=cfg["dir"],
                                    workers=cfg["workers"], app=cfg["app"],
                                    timeout_ms=cfg["timeout_ms"])
                break
            except ushuffle.Error as e:  # the random attempt is taken
                if e.name not in ("USH_ECOMMITTED", "EEXIST", "EBUSY"):
                    raise
        with w:
            for p in np.flatnonzero(counts):
                for a in range(ends[p] - counts[p], ends[p], step):
                    _write_rows(w, int(p), a, min(a + step, ends[p]),
                                layout, raws, sizes, rest, limit)
            t = _clock()
            del raws, rest  # in the push buffers now
            status = w.commit()
            _tally("commit", t)
        return status
    finally:
        slots.release()


def _bad(what):
    return ValueError(f"ushuffle.dask: a record that is not a row batch "
                      f"({what})")


class _Gather:
    """The rows of records sharing one layout: each raw column copied
    once, into an array sized for the partition's rows still to come."""

    def __init__(self, layout, capacity):
        self.layout = layout
        (self.columns, self.index_name, self.raw_index, self.pos,
         dtypes) = pickle.loads(layout)
        self.dtypes = [np.dtype(d) for d in dtypes]
        self.raws = [np.empty(capacity, d) for d in self.dtypes]
        self.bytes = [r.view(np.uint8) for r in self.raws]
        self.rests, self.rows = [], 0

    def add(self, rec, off, rows, rest):
        for r, d in zip(self.bytes, self.dtypes):
            n = rows * d.itemsize
            if off + n > rec.nbytes or self.rows + rows > len(r) // d.itemsize:
                raise _bad("columns beyond its end")
            r[self.rows * d.itemsize:][:n] = np.frombuffer(rec, np.uint8,
                                                           n, off)
            off += n + len(_pad(n))
        self.rows += rows
        if rest is not None:
            self.rests.append(rest)

    def frame(self):
        raws = [r[:self.rows] for r in self.raws]
        index = None
        if self.raw_index:
            index = pd.Index(raws.pop(0), name=self.index_name, copy=False)
        rest = None
        if self.rests:
            rest = pd.concat(self.rests, ignore_index=self.raw_index) \
                if len(self.rests) > 1 else self.rests[0]
            if index is None:
                index = rest.index
        cols, others = dict(zip(self.pos, raws)), iter(range(
            len(self.columns) - len(self.pos)))
        data = {i: cols[i] if i in cols else rest.iloc[:, next(others)]._values
                for i in range(len(self.columns))}
        out = pd.DataFrame(data, index=index, copy=False)
        out.columns = self.columns
        return out


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
            if rec.nbytes < _HDR.size:
                raise _bad("short")
            magic, rows, llen, rlen = _HDR.unpack_from(rec)
            off = _HDR.size + llen + len(_pad(llen))
            if magic != _MAGIC or off + rlen > rec.nbytes:
                raise _bad("header")
            layout = rec[_HDR.size:_HDR.size + llen]
            if g is None or layout != g.layout:
                if g is not None:
                    frames.append(g.frame())
                g = _Gather(bytes(layout), left)
            rest = pickle.loads(rec[off:off + rlen]) if rlen else None
            g.add(rec, off + rlen + len(_pad(rlen)), rows, rest)
            left -= rows
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

    opts: app, dir, codec, push_size, pool_bytes, timeout_ms,
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
