"""A Dask DataFrame shuffle over ushuffle (docs/python.md).

shuffle(df, on) builds three layers: one map task per input partition
(hash rows as dask's partitioning_index does, write each partition's rows
through a ushuffle Writer, commit, return the map status bytes), one task
that gathers the statuses, and one reduce task per output partition (read
exactly the attempts whose statuses Dask delivered). A map task that Dask
re-runs (its worker died) writes a new, random attempt number; the
attempts Dask did not deliver are never read.

Row batches are pandas frames pickled with protocol 5: the numeric columns
travel as out-of-band buffers written straight from the frame's memory.
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

import numpy as np
import pandas as pd
from dask.base import tokenize
from dask.dataframe.core import new_dd_object
from dask.dataframe.shuffle import partitioning_index
from dask.highlevelgraph import HighLevelGraph
from pandas._libs.algos import groupsort_indexer

import ushuffle

__all__ = ["shuffle", "drop"]

# A row batch is one record: a header "<4s I Q" + nbuf x "Q" (magic,
# buffer count, pickle length, buffer lengths), the pickle, then each
# out-of-band buffer, every part starting 8-byte aligned. Every record is
# a whole batch within one frame (Writer.write_gather), so the frames of
# maps interleaved on a worker never split one.
_MAGIC = b"USD2"
_HDR = struct.Struct("<4sIQ")
_PAD = bytes(8)
_DEFAULTS = {"app": "dask", "dir": None, "codec": None,
             "push_size": 1 << 20, "pool_bytes": 32 << 20,
             "timeout_ms": 0, "secret_file": None,
             "on_commit": None}
_local = threading.local()
# Seconds this process's tasks spent per phase (bench/dask_shuffle.py reads
# them to tell Python from transport). Python: hash (partition of each row,
# sort by it), take (each batch's rows), pickle, decode (copy the record,
# unpickle), concat. Transport: write (copy into push buffers, hand-offs,
# waits for credit), commit (flush, worker sync), fetch (reader).
stats = collections.Counter()


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


def _encode(frame):
    """The pieces of frame's record (not copied) and its length."""
    bufs = []
    data = pickle.dumps(frame, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    pieces = [_HDR.pack(_MAGIC, len(raws), len(data)),
              struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))]
    for r in [memoryview(data)] + raws:
        pieces += [r, _pad(r.nbytes)]
    return pieces, sum(memoryview(x).nbytes for x in pieces)


def _write_rows(w, part, frame, rows, limit):
    """Writes frame's rows (positions) to part as batches of at most limit
    bytes: halves a batch that came out too large."""
    t = time.perf_counter()
    # take() makes the batch's blocks contiguous, so pickle hands them out
    # of band instead of copying them.
    sub = frame.take(rows)
    t2 = time.perf_counter()
    pieces, n = _encode(sub)
    t3 = time.perf_counter()
    stats["take"] += t2 - t
    stats["pickle"] += t3 - t2
    if n > limit and len(rows) > 1:
        half = len(rows) // 2
        _write_rows(w, part, frame, rows[:half], limit)
        _write_rows(w, part, frame, rows[half:], limit)
        return
    w.write_gather(part, pieces)
    stats["write"] += time.perf_counter() - t3


def _map(frame, on, nparts, sid, index, cfg):
    _auth(cfg)
    t = time.perf_counter()
    idx = np.asarray(partitioning_index(frame[on], nparts), dtype=np.intp)
    # A counting sort by partition, as dask's own group_split_pandas does.
    order, counts = groupsort_indexer(idx, nparts)
    counts = counts[1:]  # [0] counts the label -1, which hashes never give
    ends = np.cumsum(counts)
    # Rows per batch from the frame's bytes per row (its deep size, which
    # exceeds the pickle's), so few batches need halving.
    limit = cfg["push_size"] - 256
    per_row = frame.memory_usage(deep=True).sum() / max(len(frame), 1)
    step = max(1, int(limit * 0.8 / max(per_row, 1)))
    stats["hash"] += time.perf_counter() - t
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
                _write_rows(w, int(p), frame,
                            order[a:min(a + step, ends[p])], limit)
        t2 = time.perf_counter()
        status = w.commit()
        stats["commit"] += time.perf_counter() - t2
    stats["map"] += time.perf_counter() - t
    if cfg["on_commit"]:
        cfg["on_commit"](index)
    return status


def _decode(rec):
    """The frame of one record: one copy (the record's), which the
    frame's numeric columns then use in place."""
    b = memoryview(bytearray(rec))
    magic, nbuf, plen = _HDR.unpack_from(b)
    if magic != _MAGIC:
        raise ValueError("ushuffle.dask: a record that is not a row batch")
    lens = struct.unpack_from(f"<{nbuf}Q", b, _HDR.size)
    off, parts = _HDR.size + 8 * nbuf, []
    for n in (plen,) + lens:
        parts.append(b[off:off + n])
        off += n + len(_pad(n))
    return pickle.loads(parts[0], buffers=parts[1:])


def _reduce(statuses, part, meta, cfg):
    _auth(cfg)
    t = time.perf_counter()
    frames = []
    with ushuffle.Reader(part, statuses, cfg["timeout_ms"]) as r:
        while True:
            t2 = time.perf_counter()
            rec = r.next()
            t3 = time.perf_counter()
            stats["fetch"] += t3 - t2
            if rec is None:
                break
            frames.append(_decode(rec))
            stats["decode"] += time.perf_counter() - t3
    t2 = time.perf_counter()
    out = meta.copy() if not frames else \
        pd.concat(frames) if len(frames) > 1 else frames[0]
    stats["concat"] += time.perf_counter() - t2
    stats["reduce"] += time.perf_counter() - t
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
    graph[sname] = (list, [(mname, i) for i in range(df.npartitions)])
    meta = df._meta
    graph.update({(rname, j): (_reduce, sname, j, meta, cfg)
                  for j in range(nparts)})
    hlg = HighLevelGraph.from_collections(rname, graph, dependencies=[df])
    # Every collection derived from the result shares this layer: the
    # shuffle lives as long as one of them does.
    layer = hlg.layers[rname]
    layer._ushuffle_drop = weakref.finalize(layer, _drop, cfg, sid)
    return new_dd_object(hlg, rname, meta, [None] * (nparts + 1))
