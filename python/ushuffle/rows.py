"""How ushuffle.dask's rows travel: the partition of every row, and row
batches packed from a frame's columns straight into a writer's push
buffer, then read back into columns.

The per-row work is C (ushuffle._rows, python/_rows.c): hashing the key
columns as dask's partitioning_index does and sorting the rows by
partition is one pass; packing gathers each column's rows of a batch
into the push buffer, with no sorted copy of the frame and no pickle of
string columns.

A row batch is one record: a header "<4s I I I I Q" (magic, rows, map,
the map's sorted row it starts at, layout length, rest length), the layout (a pickle: the frame's columns, the
index's name, which columns and whether the index are packed, and how),
the rest (a pickle of the columns pack does not carry: categorical,
nullable, tz-aware, objects other than str), then each packed column, the
index first: fixed-width values as their bytes; a string column as one
int32 per row (its UTF-8 length; -1 None, -2 NaN), then the UTF-8. Every
part starts 8-byte aligned. The map and first row let the reducer put a
partition's rows in map order, then row order, whatever order the
batches arrived in.
"""
import pickle
import struct

import numpy as np
import pandas as pd
from dask.dataframe import methods
from pandas.core.util.hashing import hash_array

try:
    from . import _rows
except ImportError as e:
    raise ImportError(
        "ushuffle.dask needs ushuffle._rows, the C extension the build "
        "makes beside the package when Python's headers (python3-dev) "
        "are installed") from e

__all__ = ["partition", "Packer", "Gather", "BadRecord"]

MAGIC = b"USD4"
HDR = struct.Struct("<4sIIIIQ")
_PAD = bytes(8)
_FIXED = "biufcmM"  # numpy dtypes whose values are their bytes


class BadRecord(ValueError):
    """A record that is not a row batch."""

    def __init__(self, what):
        super().__init__(f"ushuffle.dask: a record that is not a row "
                         f"batch ({what})")


def _pad(n):
    return _PAD[:-n % 8]


def _up(n):
    """n rounded up to a multiple of 8."""
    return n + len(_pad(n))


def _bytes(a):
    # Bytes, not the dtype: numpy gives datetimes no buffer protocol.
    return np.ascontiguousarray(a).view(np.uint8)


def _fixed(dtype):
    return isinstance(dtype, np.dtype) and dtype.kind in _FIXED


_KEY_RAW, _KEY_HASHED, _KEY_IDS = range(3)


def partition(frame, on, nparts):
    """(order, counts): the positions of frame's rows partition by
    partition (each partition's rows in their input order), and the rows
    of each partition, where partition p holds the rows dask's
    partitioning_index(frame[on], nparts) maps to p; or, for on
    "_partitions" (dask's rearrange_by_column), the rows whose value
    there is p."""
    if on in ("_partitions", ["_partitions"]):
        ids = frame["_partitions"].to_numpy(np.int64)
        spec, series = [(_KEY_IDS, 8, _bytes(ids))], True
    else:
        keys = frame[on]
        series, spec = isinstance(keys, pd.Series), []
    for s in [] if spec else [keys] if series else (
            keys.iloc[:, i] for i in range(keys.shape[1])):
        v = s._values
        if _fixed(v.dtype) and v.dtype.kind != "c" and v.dtype.itemsize <= 8:
            spec.append((_KEY_RAW, v.dtype.itemsize, _bytes(v)))
        else:  # pandas' own hash (strings, categoricals, nullables)
            spec.append((_KEY_HASHED, 8, _bytes(hash_array(v))))
    order = np.empty(len(frame), np.int64)
    counts = np.empty(nparts, np.int64)
    _rows.hash_partition(spec, len(frame), not series, nparts, order, counts)
    return order, counts


def _column(values):
    """How pack carries a column of these values: (kind, pack's column
    spec), or None when it travels in the rest."""
    if _fixed(values.dtype):
        return values.dtype.str, ("r", values.dtype.itemsize,
                                  _bytes(values))
    if isinstance(values, np.ndarray) and values.dtype == object:
        enc = _rows.encode_str(values.tolist())
        if enc:
            return "str", ("s",) + enc
    return None


class Packer:
    """frame's rows in the order `order`, as row batches (write()) of map
    m."""

    def __init__(self, frame, order, push_size, m=0):
        ix = frame.index
        self.order, self.m, self.cols = order, m, []
        kinds, packed = [], []
        if isinstance(ix, pd.RangeIndex):  # computed, not gathered
            kinds.append(np.dtype(np.int64).str)
            self.cols.append(("R", ix.start, ix.step))
        elif ix.nlevels == 1 and (c := _column(ix._values)):
            kinds.append(c[0])  # encoded once: a string index is a copy
            self.cols.append(c[1])
        index = bool(kinds)
        others = []
        for i in range(frame.shape[1]):
            c = _column(frame.iloc[:, i]._values)
            if c:
                packed.append(i)
                kinds.append(c[0])
                self.cols.append(c[1])
            else:
                others.append(i)
        self.rest = None
        if others or not index:
            rest = frame.iloc[:, others].take(order)
            self.rest = rest.reset_index(drop=True) if index else rest
        self.layout = pickle.dumps((frame.columns, ix.name, index, packed,
                                    kinds), protocol=5)
        self.head = _up(HDR.size + len(self.layout))
        # Rows per batch while a rest travels: its pickle's size is known
        # only once made, so it is guessed from the rest's size in memory.
        self.step = 1 << 62
        if self.rest is not None and len(self.rest):
            per_row = self.rest.memory_usage(deep=True).sum() / len(self.rest)
            fixed = _rows.pack(None, self.cols, order, 0, 1)[1] \
                if len(order) else 0
            self.step = max(1, int(push_size * 0.9 / (per_row + fixed)))

    def write(self, w, part, a, b):
        """Writes rows [a, b) of the order to part through Writer w."""
        step = self.step
        while a < b:
            hi = min(b, a + step)
            rest = b"" if self.rest is None else pickle.dumps(
                self.rest.iloc[a:hi], protocol=5)
            # Without a rest, pack fits as many rows as there is room.
            exact = self.rest is not None
            got = []
            if w.write_into(part, lambda buf: self._fill(
                    buf, rest, a, hi, exact, got)):
                a += got[0]
            elif hi - a > 1:
                step = max(1, (hi - a) // 2)
            else:  # one row larger than a push buffer: a record alone
                w.write(part, self._alone(rest, a))
                a += 1

    def _fill(self, buf, rest, a, b, exact, got):
        """Packs rows [a, b) (exact) or as many of them as fit into buf
        (appending how many to got); returns the record's length, or 0
        when they do not fit."""
        off = _up(self.head + len(rest))
        if off >= len(buf):
            return 0
        rows, n = _rows.pack(buf[off:], self.cols, self.order, a, b)
        if not rows or (exact and rows < b - a):
            return 0
        self._head(buf, a, rows, rest)
        got.append(rows)
        return off + n

    def _head(self, buf, a, rows, rest):
        HDR.pack_into(buf, 0, MAGIC, rows, self.m, a, len(self.layout),
                      len(rest))
        end = HDR.size + len(self.layout)
        buf[HDR.size:end] = self.layout
        buf[end:self.head] = _pad(end)
        end = self.head + len(rest)
        buf[self.head:end] = rest
        buf[end:_up(end)] = _pad(end)

    def _alone(self, rest, a):
        """Row a as a record of its own size."""
        off = _up(self.head + len(rest))
        # pack reserves the most padding its columns may need.
        n = _rows.pack(None, self.cols, self.order, a, a + 1)[1]
        buf = bytearray(off + n + 16 * len(self.cols))
        self._head(buf, a, 1, rest)
        got = _rows.pack(memoryview(buf)[off:], self.cols, self.order, a,
                         a + 1)
        assert got == (1, n)
        del buf[off + n:]
        return buf


class Gather:
    """The rows of records sharing one layout: each packed column copied
    once, into an array sized for the partition's rows still to come."""

    def __init__(self, layout, capacity):
        self.layout = layout
        (self.columns, self.index_name, self.index, self.packed,
         kinds) = pickle.loads(layout)
        self.kinds = [None if k == "str" else np.dtype(k) for k in kinds]
        self.cols = [np.empty(capacity, object if d is None else d)
                     for d in self.kinds]
        self.bytes = [None if d is None else c.view(np.uint8)
                      for c, d in zip(self.cols, self.kinds)]
        # Per record: (map, its first row in the map, its first row here,
        # rows) and its rest frame (None when every column is packed).
        self.recs, self.rests, self.rows = [], [], 0
        self.capacity = capacity
        assert np.dtype(object).itemsize == 8  # unpack_str's slots

    def add(self, rec):
        """Adds a record (a buffer) whose layout is this one's."""
        if rec.nbytes < HDR.size:
            raise BadRecord("short")
        magic, rows, m, first, llen, rlen = HDR.unpack_from(rec)
        off = _up(HDR.size + llen)
        if magic != MAGIC or off + rlen > rec.nbytes:
            raise BadRecord("header")
        if self.rows + rows > self.capacity:
            raise BadRecord("more rows than its partition holds")
        rest = pickle.loads(rec[off:off + rlen]) if rlen else None
        off = _up(off + rlen)
        for c, b, d in zip(self.cols, self.bytes, self.kinds):
            if d is None:
                # Straight into the column's cells: the array owns them.
                addr = c.__array_interface__["data"][0] + self.rows * 8
                off = _rows.unpack_str(rec, off, rows, addr)
                continue
            n = rows * d.itemsize
            if off + n > rec.nbytes:
                raise BadRecord("columns beyond its end")
            b[self.rows * d.itemsize:][:n] = np.frombuffer(rec, np.uint8,
                                                           n, off)
            off = _up(off + n)
        self.recs.append((m, first, self.rows, rows))
        self.rests.append(rest)
        self.rows += rows

    def frame(self):
        """The rows in map order, then row order, and [map, rows] of each
        map's run of them."""
        order = sorted(range(len(self.recs)), key=lambda i: self.recs[i][:2])
        cols = [c[:self.rows] for c in self.cols]
        if order != list(range(len(order))):  # arrived out of map order
            take = np.concatenate([np.arange(self.recs[i][2],
                                             self.recs[i][2] +
                                             self.recs[i][3])
                                   for i in order])
            cols = [c[take] for c in cols]
        index = None
        if self.index:
            index = pd.Index(cols.pop(0), name=self.index_name, copy=False)
        rests = [self.rests[i] for i in order if self.rests[i] is not None]
        rest = None
        if rests:
            # Dask's concat, as the tasks shuffle's: it unions the
            # categories of categoricals that differ between maps.
            rest = methods.concat(rests, uniform=True) \
                if len(rests) > 1 else rests[0]
            if index is None:
                index = rest.index
        packed, others = dict(zip(self.packed, cols)), iter(range(
            len(self.columns) - len(self.packed)))
        data = {i: packed[i] if i in packed
                else rest.iloc[:, next(others)]._values
                for i in range(len(self.columns))}
        out = pd.DataFrame(data, index=index, copy=False)
        out.columns = self.columns
        runs = []
        for i in order:
            m, rows = self.recs[i][0], self.recs[i][3]
            if runs and runs[-1][0] == m:
                runs[-1][1] += rows
            else:
                runs.append([m, rows])
        return out, runs


def layout(rec):
    """A record's layout (to tell whether it starts a new Gather)."""
    if rec.nbytes < HDR.size:
        raise BadRecord("short")
    llen = HDR.unpack_from(rec)[4]
    if HDR.size + llen > rec.nbytes:
        raise BadRecord("header")
    return rec[HDR.size:HDR.size + llen]
