"""ushuffle: Python bindings of libushuffle (include/ushuffle/ushuffle.h).

cffi in ABI mode: nothing is compiled; the shared library is found at
$USHUFFLE_LIB, else at the path the CMake build wrote into _paths.py
(build/python/ushuffle), else as libushuffle.so.0.4 on the loader's path.

Ownership follows the C API: a Ring serves the thread that created it;
Writer.write() takes any buffer-protocol object without copying it (the
library copies the record into its push buffer); Reader yields memoryviews
of the library's buffer, valid only until the next record. Every failing
call raises Error (or a subclass) carrying ush_last_error()'s text.
"""
import itertools
import os
import threading

from cffi import FFI

__all__ = ["Error", "NotCommitted", "Corrupt", "Ring", "Writer", "Reader",
           "status_info", "shuffle_drop", "app_heartbeat", "auth_secret",
           "version", "TARGET_DISK", "TARGET_NET", "TARGET_NULL"]

# Each struct of the header whole, as ushuffle.h lays it out (the size
# field tells the library how much of its struct the caller has);
# test_bindings.py checks every field's offset and every size against the
# header compiled by the C compiler.
_CDEF = """
typedef struct ush_ring ush_ring;
typedef struct ush_writer ush_writer;
typedef struct ush_reader ush_reader;
struct ush_ring_opts {
    uint32_t size; unsigned iodepth; size_t pool_bytes; size_t push_size;
    int sqpoll; int fixedbufs; int codec; int level;
};
struct ush_seal_key { uint32_t id; unsigned char key[32]; };
int ush_seal_keys_load(const char *path, struct ush_seal_key *keys,
                       uint32_t max);
struct ush_writer_opts {
    uint32_t size; uint32_t shuffle, map, attempt; uint32_t partitions;
    int target; const char *dir; int direct; int ioengine;
    const char *workers; uint32_t timeout_ms; uint32_t window;
    uint32_t zc_threshold; int send_zc; const char *app;
    uint32_t replicas; uint32_t reserved0;
    const struct ush_seal_key *seal_key;
};
struct ush_part_stats { uint64_t records; uint64_t bytes; uint64_t batches; };
struct ush_status { const void *data; size_t len; };
struct ush_status_info {
    uint32_t size; uint32_t shuffle, map, attempt, partitions;
    int target; uint64_t batches; uint32_t location_len;
    uint32_t sealed; uint32_t seal_key_id;
};
struct ush_reader_opts {
    uint32_t size; uint32_t partition; const struct ush_status *statuses;
    uint32_t nstatuses; uint32_t timeout_ms;
    const struct ush_seal_key *seal_keys; uint32_t nseal_keys;
    uint32_t require_sealed; uint32_t npartitions; uint32_t reserved0;
};
unsigned ush_version(void);
const char *ush_version_string(void);
const char *ush_strerror(int err);
const char *ush_err_name(int err);
const char *ush_last_error(void);
int ush_codec_parse(const char *s, int *codec, int *level);
void ush_ring_opts_init_size(struct ush_ring_opts *opts, size_t size);
int ush_ring_create(ush_ring **out, const struct ush_ring_opts *opts);
void ush_ring_free(ush_ring *ring);
void ush_writer_opts_init_size(struct ush_writer_opts *opts, size_t size);
int ush_writer_open(ush_writer **out, ush_ring *ring,
                    const struct ush_writer_opts *opts);
int ush_writer_write(ush_writer *w, uint32_t partition, const void *rec,
                     size_t len);
int ush_writer_acquire(ush_writer *w, void **buf, size_t *cap);
int ush_writer_swap(ush_writer *w, uint32_t partition, void **buf,
                    size_t len, uint32_t nrecords);
int ush_writer_release(ush_writer *w, void *buf);
int ush_writer_commit(ush_writer *w, struct ush_part_stats *parts);
int ush_writer_abort(ush_writer *w);
int ush_writer_status(const ush_writer *w, struct ush_status *st);
void ush_writer_free(ush_writer *w);
int ush_status_info_size(const struct ush_status *st,
                         struct ush_status_info *info, size_t size);
void ush_reader_opts_init_size(struct ush_reader_opts *opts, size_t size);
int ush_reader_open(ush_reader **out, const struct ush_reader_opts *opts);
int ush_reader_next(ush_reader *r, const void **rec, size_t *len);
uint32_t ush_reader_partition(const ush_reader *r);
void ush_reader_free(ush_reader *r);
int ush_shuffle_drop(const char *workers, const char *app, uint32_t shuffle,
                     uint32_t timeout_ms);
int ush_app_heartbeat(const char *workers, const char *app,
                      uint32_t timeout_ms);
int ush_auth_secret(const char *app, const void *secret, size_t len);
int ush_auth_secret_file(const char *app, const char *path);
"""

TARGET_NULL, TARGET_DISK, TARGET_NET = 0, 1, 2
_SONAME = "libushuffle.so.0.4"

ffi = FFI()
ffi.cdef(_CDEF)


def _find_lib():
    path = os.environ.get("USHUFFLE_LIB")
    if path:
        return path
    try:
        from ._paths import LIBUSHUFFLE
        return LIBUSHUFFLE
    except ImportError:
        return _SONAME


lib = ffi.dlopen(_find_lib())


class Error(OSError):
    """A libushuffle call failed: .code is the negative error code, .name
    its symbol ("ECONNREFUSED", "USH_ECRC"), str() ush_last_error().
    Pickles as itself (class, code, name, text), so that it crosses
    process boundaries (Dask workers) unchanged."""

    def __init__(self, code, what, detail=None):
        # detail: the failed call's ush_last_error() (_check() passes
        # it); an Error made by hand says the code's ush_strerror(), not
        # whatever a call before left in the thread's last error.
        name = ffi.string(lib.ush_err_name(code)).decode()
        msg = detail or ffi.string(lib.ush_strerror(code)).decode()
        self._set(code, name, f"{what}: {msg} ({name})")

    def _set(self, code, name, text):
        self.code, self.name = code, name
        if -code < 4000:  # an errno: OSError's errno and strerror
            OSError.__init__(self, -code, text)
        else:
            OSError.__init__(self, text)

    def __reduce__(self):
        # The instance's attributes too (code, name, and any a caller
        # set on it, as Python's own exceptions keep theirs).
        return _rebuild, (type(self), self.code, self.name,
                          self.strerror or self.args[0]), self.__dict__


def _rebuild(cls, code, name, text):
    """An Error of class cls as pickled: no library call, no new text."""
    e = cls.__new__(cls)
    e._set(code, name, text)
    return e


class NotCommitted(Error):
    """USH_ENOTCOMMITTED: a status names an attempt not stored."""


class Corrupt(Error):
    """USH_ECORRUPT or USH_ECRC: data or a status does not check."""


class Draining(Error):
    """USH_EDRAINING: every worker of a writer's list decommissions
    (one that does is left out of the map's list, no error)."""


_CLASSES = {-4004: NotCommitted, -4001: Corrupt, -4002: Corrupt,
            -4009: Draining}


def _check(rc, what):
    if rc < 0:
        detail = ffi.string(lib.ush_last_error()).decode(errors="replace")
        raise _CLASSES.get(rc, Error)(rc, what, detail)
    return rc


def _cstr(s):
    return ffi.NULL if s is None else s.encode()


def version():
    return ffi.string(lib.ush_version_string()).decode()


class _Handle:
    """An owned C object: close() frees it once; `with` closes it; any
    other use once closed raises ValueError."""
    _p = None
    _kind = "object"
    _thread = None  # the only thread that may free it; None: any

    def _h(self):
        """The C handle, while open."""
        if self._p is None:
            raise ValueError(f"{self._kind} is closed")
        return self._p

    def close(self):
        if self._p is not None:
            # The library aborts the process on a free from another
            # thread than the ring's creator.
            if self._thread not in (None, threading.get_ident()):
                raise ValueError(
                    f"{self._kind}.close() from a thread other than the "
                    f"one that created its ring: a ring and its writers "
                    f"are closed by that thread")
            p, self._p = self._p, None
            self._free(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Ring(_Handle):
    """One io_uring and its buffer pool, for the calling thread only.

    Options: iodepth, pool_bytes, push_size, sqpoll, fixedbufs (ints) and
    codec ("none", "lz4", "zstd", "zstd:LEVEL")."""
    _kind = "ring"

    def __init__(self, codec=None, **opts):
        o = ffi.new("struct ush_ring_opts *")
        lib.ush_ring_opts_init_size(o, ffi.sizeof(o[0]))
        for k, v in opts.items():
            if k == "size" or not hasattr(o, k):
                raise TypeError(f"Ring: unknown option {k!r}")
            setattr(o, k, v)
        if codec is not None:
            c, lv = ffi.new("int *"), ffi.new("int *")
            _check(lib.ush_codec_parse(codec.encode(), c, lv),
                   f"Ring: codec {codec!r}")
            o.codec, o.level = c[0], lv[0]
        out = ffi.new("ush_ring **")
        _check(lib.ush_ring_create(out, o), "ush_ring_create")
        self._p = out[0]
        self._thread = threading.get_ident()
        # Its writers not freed yet, by key: their C handles, not the
        # Writers, which the collector may finalize after the ring (weak
        # references are cleared first) or on another thread.
        self._writers = {}

    def _free(self, p):
        """Frees the ring (its writers first); from its creator thread."""
        writers, self._writers = self._writers, {}
        for w in writers.values():
            lib.ush_writer_free(w)  # the library frees none with the ring
        lib.ush_ring_free(p)

    def __del__(self):
        # Only the creator thread may free a ring (the library aborts
        # otherwise): one collected elsewhere is leaked, not freed.
        if self._p is not None and threading.get_ident() == self._thread:
            self.close()


_keys = itertools.count()


_SEAL_KEYS_MAX = 16  # USH_SEAL_KEYS_MAX


def _seal_keys(path):
    """The keys of key file path (ush_seal_keys_load): a cffi array and
    their count."""
    keys = ffi.new("struct ush_seal_key[]", _SEAL_KEYS_MAX)
    n = _check(lib.ush_seal_keys_load(path.encode(), keys, len(keys)),
               f"ush_seal_keys_load ({path})")
    return keys, n


class Writer(_Handle):
    """The map output (shuffle, map, attempt) of `partitions` partitions.

    target: "disk" (dir=...) or "net" (workers="HOST:PORT,...");
    app: the application id (ush_writer_opts.app); encrypt_key_file: a
    key file (docs/security.md): every batch is sealed under its first
    key, so workers never see the records; further options are
    ush_writer_opts fields (direct, timeout_ms, window, ...)."""
    _kind = "writer"

    def __init__(self, ring, shuffle, map, attempt, partitions,
                 target="net", dir=None, workers=None, app=None,
                 encrypt_key_file=None, **opts):
        o = ffi.new("struct ush_writer_opts *")
        lib.ush_writer_opts_init_size(o, ffi.sizeof(o[0]))
        o.shuffle, o.map, o.attempt = shuffle, map, attempt
        o.partitions = partitions
        o.target = {"null": TARGET_NULL, "disk": TARGET_DISK,
                    "net": TARGET_NET}[target]
        keep = [ffi.NULL if s is None else ffi.new("char[]", s.encode())
                for s in (dir, workers, app)]  # alive until the open
        o.dir, o.workers, o.app = keep
        if encrypt_key_file is not None:
            keys, _ = _seal_keys(encrypt_key_file)
            keep.append(keys)
            o.seal_key = keys
        for k, v in opts.items():
            if k in ("size", "dir", "workers", "app", "seal_key",
                     "reserved0") or not hasattr(o, k):
                raise TypeError(f"Writer: unknown option {k!r}")
            setattr(o, k, v)
        out = ffi.new("ush_writer **")
        _check(lib.ush_writer_open(out, ring._h(), o),
               f"ush_writer_open (shuffle {shuffle} map {map} "
               f"attempt {attempt})")
        self._p = out[0]
        self._ring = ring  # the writer borrows it
        self._key = next(_keys)
        ring._writers[self._key] = self._p
        self.partitions = partitions
        # The push buffer write_gather() was lent, and its records.
        self._buf, self._nrec = None, 0

    def write(self, partition, record):
        """Appends one record (any buffer-protocol object, not copied
        here) to partition."""
        buf = ffi.from_buffer(record)
        h = self._h()
        if self._nrec and partition == self._part:
            self._swap()  # write_gather()'s records of partition first
        _check(lib.ush_writer_write(h, partition, buf, len(buf)),
               f"ush_writer_write (partition {partition})")

    def write_gather(self, partition, pieces):
        """Appends one record made of the buffers pieces, copied straight
        into a push buffer the library lends (ush_writer_acquire/swap).
        The records of a partition written in a row share a batch, so
        they reach a reader in one frame, never interleaved with another
        map's; the batch is handed over when it is full or another
        partition is written. A record must fit a push buffer."""
        views = [ffi.from_buffer(x) for x in pieces]
        n = sum(len(v) for v in views)
        h = self._h()
        self._lend(h)
        if 4 + n > self._cap:
            raise ValueError(f"write_gather: a record of {n} bytes does "
                             f"not fit a push buffer of {self._cap}")
        if self._nrec and (partition != self._part or
                           self._len + 4 + n > self._cap):
            self._swap()
        self._part = partition
        dst = ffi.cast("char *", self._buf[0]) + self._len
        dst[0:4] = n.to_bytes(4, "little")
        off = 4
        for v in views:
            ffi.memmove(dst + off, v, len(v))
            off += len(v)
        self._len += off
        self._nrec += 1

    def write_into(self, partition, fill):
        """Appends one record that fill writes straight into a push
        buffer the library lends, as write_gather() does: fill(buf) gets
        a writable memoryview of the room left in the batch and returns
        the record's length, or 0 when it needs more room. Returns False
        when it did not fit an empty push buffer either (nothing was
        written), else True."""
        h = self._h()
        self._lend(h)
        if self._nrec and (partition != self._part or
                           self._len + 4 > self._cap - self._cap // 8):
            self._swap()  # another partition's, or nearly full
        self._part = partition
        while True:
            room = self._cap - self._len - 4
            view = memoryview(ffi.buffer(
                ffi.cast("char *", self._buf[0]) + self._len + 4, room))
            try:
                n = fill(view)
            finally:
                view.release()
            if n:
                if not 0 < n <= room:
                    raise ValueError(f"write_into: fill wrote {n} bytes "
                                     f"into a room of {room}")
                dst = ffi.cast("char *", self._buf[0]) + self._len
                dst[0:4] = n.to_bytes(4, "little")
                self._len += 4 + n
                self._nrec += 1
                return True
            if not self._nrec:
                return False
            self._swap()

    def _lend(self, h):
        """Borrows a push buffer for write_gather() and write_into()."""
        if self._buf is None:
            b, cap = ffi.new("void **"), ffi.new("size_t *")
            _check(lib.ush_writer_acquire(h, b, cap),
                   "ush_writer_acquire")
            self._buf, self._cap, self._len, self._nrec = b, cap[0], 0, 0
            self._part = None

    def _swap(self):
        _check(lib.ush_writer_swap(self._h(), self._part, self._buf,
                                   self._len, self._nrec),
               f"ush_writer_swap (partition {self._part})")
        self._len = self._nrec = 0

    def _give_back(self):
        """Hands over the batch write_gather() is filling, and returns
        its buffer."""
        if self._buf is not None:
            if self._nrec:
                self._swap()
            _check(lib.ush_writer_release(self._h(), self._buf[0]),
                   "ush_writer_release")
            self._buf = None

    def commit(self):
        """Publishes the output; returns the map status as bytes."""
        h = self._h()
        self._give_back()
        _check(lib.ush_writer_commit(h, ffi.NULL), "ush_writer_commit")
        st = ffi.new("struct ush_status *")
        _check(lib.ush_writer_status(h, st), "ush_writer_status")
        return bytes(ffi.buffer(st.data, st.len))

    def abort(self):
        """Drops everything written so far."""
        _check(lib.ush_writer_abort(self._h()), "ush_writer_abort")

    def _h(self):
        # Its ring's close() freed it.
        if self._p is not None and self._key not in self._ring._writers:
            self._p = None
        return super()._h()

    @property
    def _thread(self):
        # Once its ring's close() freed it, closing it frees nothing.
        return self._ring._thread if self._key in self._ring._writers \
            else None

    def _free(self, p):
        """Frees the writer, aborting it if it was not committed."""
        if self._ring._writers.pop(self._key, None) is not None:
            lib.ush_writer_free(p)  # takes back a lent buffer
        self._buf = None  # else the ring freed it

    def __del__(self):
        # Not closed: aborted, its files and buffers freed. As for the
        # ring, only from the ring's thread; elsewhere the ring's close()
        # frees it.
        if self._p is not None and \
                threading.get_ident() == self._ring._thread:
            self.close()


def status_info(status):
    """Checks a map status (bytes) and describes it as a dict."""
    st = ffi.new("struct ush_status *", (ffi.from_buffer(status),
                                         len(status)))
    i = ffi.new("struct ush_status_info *")
    _check(lib.ush_status_info_size(st, i, ffi.sizeof(i[0])),
           "ush_status_info")
    return {k: getattr(i, k) for k in ("shuffle", "map", "attempt",
                                       "partitions", "target", "batches",
                                       "sealed", "seal_key_id")}


class Reader(_Handle):
    """Reads `partition` (with npartitions > 1: the partitions
    [partition, partition + npartitions), one after another, as a reducer
    of coalesced partitions does; .partition says whose record came last)
    over exactly the attempts the map statuses name.

    Iterating yields each record as a memoryview of the library's buffer,
    valid only until the next record is asked for (or close()): copy what
    must outlive it (bytes(view)). The view is released then, so a kept
    one raises ValueError rather than read freed memory (unless it is
    still exported, e.g. to numpy.frombuffer; slices of it are not
    released). encrypt_key_file: the key file of sealed maps; given, a
    plain map is refused."""

    _kind = "reader"
    _view = None
    _busy = None  # the thread whose next() runs, or None

    def __init__(self, partition, statuses, timeout_ms=0,
                 encrypt_key_file=None, npartitions=1):
        # Guards _p and _busy: next() runs the C call without the GIL.
        self._lock = threading.Lock()
        statuses = list(statuses)
        if not statuses:
            raise ValueError("Reader: no map statuses")
        self._bufs = [ffi.from_buffer(s) for s in statuses]
        arr = ffi.new("struct ush_status[]", len(statuses))
        for i, b in enumerate(self._bufs):
            arr[i].data, arr[i].len = b, len(b)
        o = ffi.new("struct ush_reader_opts *")
        lib.ush_reader_opts_init_size(o, ffi.sizeof(o[0]))
        o.partition, o.statuses, o.nstatuses = partition, arr, len(statuses)
        o.timeout_ms = timeout_ms
        o.npartitions = npartitions
        if encrypt_key_file is not None:
            # Keys given: only sealed maps are read.
            keys, o.nseal_keys = _seal_keys(encrypt_key_file)
            o.seal_keys, o.require_sealed = keys, 1
        out = ffi.new("ush_reader **")
        _check(lib.ush_reader_open(out, o),
               f"ush_reader_open (partition {partition}"
               + (f", {npartitions} partitions)" if npartitions > 1
                  else ")"))
        self._p = out[0]
        self._bufs = None
        self._rec = ffi.new("const void **")
        self._len = ffi.new("size_t *")

    def next(self):
        """The next record as a memoryview (valid until the next call),
        or None at the end. One thread at a time: a second one's call,
        or a close(), while it waits raises ValueError."""
        with self._lock:
            h = self._h()
            if self._busy is not None:
                raise ValueError("reader.next() while another thread's "
                                 "next() runs")
            self._busy = threading.get_ident()
            self._release()
        try:
            rc = lib.ush_reader_next(h, self._rec, self._len)
        finally:
            with self._lock:
                self._busy = None
        if not _check(rc, "ush_reader_next"):
            return None
        self._view = memoryview(ffi.buffer(self._rec[0], self._len[0]))
        return self._view

    def close(self):
        """Frees the reader; from any thread, but never while next()
        runs (it waits for a worker without the GIL): that raises
        ValueError and frees nothing, as Ring and Writer do from a thread
        not theirs."""
        with self._lock:
            if self._busy is not None:
                raise ValueError("reader.close() while next() runs in "
                                 "another thread: close it once next() "
                                 "has returned")
            p, self._p = self._p, None
        if p is not None:
            self._free(p)

    @property
    def partition(self):
        """The partition of the record last returned (the range's first
        before any)."""
        return lib.ush_reader_partition(self._h())

    def _release(self):
        v, self._view = self._view, None
        if v is not None:
            try:
                v.release()
            except BufferError:
                pass  # exported: valid no longer, but not ours to end

    def __iter__(self):
        while True:
            rec = self.next()
            if rec is None:
                return
            yield rec

    def _free(self, p):
        self._release()
        lib.ush_reader_free(p)

    def __del__(self):
        if hasattr(self, "_lock"):  # else __init__ failed before _p
            self.close()


def shuffle_drop(workers, app, shuffle, timeout_ms=0):
    """Asks every worker of "HOST:PORT,..." to drop shuffle's data."""
    _check(lib.ush_shuffle_drop(workers.encode(), _cstr(app), shuffle,
                                timeout_ms), f"ush_shuffle_drop ({shuffle})")


def app_heartbeat(workers, app, timeout_ms=0):
    """Tells every worker the application is alive (see --app-ttl)."""
    _check(lib.ush_app_heartbeat(workers.encode(), _cstr(app), timeout_ms),
           "ush_app_heartbeat")


def auth_secret(app=None, secret=None, path=None):
    """Sets the secret of app (None: every application), from bytes or
    from the file at path; secret None (and no path) forgets it."""
    if path is not None:
        _check(lib.ush_auth_secret_file(_cstr(app), path.encode()),
               f"ush_auth_secret_file ({path})")
    else:
        _check(lib.ush_auth_secret(_cstr(app),
                                   secret if secret else ffi.NULL,
                                   len(secret) if secret else 0),
               "ush_auth_secret")
