"""ushuffle as a shuffle method of Dask's expression-based dataframes
(docs/python.md).

register() adds "ushuffle" to the methods dask.dataframe's abstract
Shuffle expression lowers to, beside "p2p", "tasks" and "disk", so that
shuffle_method="ushuffle", or dask.config.set({"dataframe.shuffle.method":
"ushuffle"}), moves the rows of every operation that shuffles (df.shuffle,
set_index, sort_values, hash merges and joins, groupby and drop_duplicates
with split_out, ...) through ushuffle. A broadcast join stays a broadcast
join: Dask chooses it for ushuffle as it does for its own methods.

The lowered shuffle is three layers, as p2p's: one transfer (map) task per
input partition (write each output partition's rows through a ushuffle
Writer, commit, return the map status bytes and the rows per partition),
one barrier (statuses) task that lists them, and one unpack (reduce) task
per output partition (read exactly the attempts whose statuses Dask
delivered). A map task that Dask re-runs (its worker died) writes a new,
random attempt number; the attempts Dask did not deliver are never read.
A reducer that finds map outputs gone (a ushuffled restarted empty with
its Dask worker) asks the scheduler to rerun the maps under a new
shuffle id and reschedules itself, as p2p restarts a shuffle.

Lifetimes. With a distributed Client, the scheduler's: a SchedulerPlugin
hands each incarnation of a shuffle its id when its first map asks, and
drops it on the ushuffled workers when the statuses task, on which every
output partition depends, is forgotten. On Dask's local schedulers an id
task makes the id, and the shuffle is dropped when the local scheduler
releases the statuses (after the last output partition was read).

Rows travel as row batches (ushuffle/rows.py): the map hashes and sorts
them in C and packs each batch's columns straight into a push buffer;
the reducer copies each record's columns once into its output's. Each
batch names its map and its first row, so the reducer puts a
partition's rows in map order, then row order, and concatenates per map
as Dask's tasks shuffle does.
"""
import collections
import functools
import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dask
import distributed
import numpy as np
import pandas as pd
from dask.base import is_dask_collection
from dask.dataframe import methods
from distributed.diagnostics.plugin import SchedulerPlugin

# The Dask and distributed releases the lowering was tested with
# (python/constraints.txt): others are refused, on import.
TESTED = {"dask": ("2026.8.",), "distributed": ("2026.8.",)}


def _check_versions(found):
    if not all(found[k].startswith(TESTED[k]) for k in TESTED):
        tested = ", ".join(f"{k} {'/'.join(v + 'x' for v in TESTED[k])}"
                           for k in TESTED)
        raise ImportError(
            f"ushuffle.dask: tested with {tested} only; found dask "
            f"{found['dask']}, distributed {found['distributed']} "
            f"(python/constraints.txt)")


_check_versions({"dask": dask.__version__,
                 "distributed": distributed.__version__})

from dask._task_spec import List, Task, TaskRef  # noqa: E402
from dask.dataframe.dask_expr._merge import Merge  # noqa: E402
from dask.dataframe.dask_expr._shuffle import (  # noqa: E402
    Shuffle, ShuffleBase, SimpleShuffle)
from dask.utils import get_default_shuffle_method  # noqa: E402

import ushuffle
from ushuffle import rows as _rows

__all__ = ["register", "shuffle", "install", "Lifetimes", "stats", "cpu",
           "TESTED"]

# lz4 with 256 KiB push buffers: a batch is compressed into an idle
# buffer of the pool, and with 1 MiB ones the 8 MiB pool rarely had one
# (most batches went raw). docs/python.md, "Compression", has the
# figures: 3.5x fewer bytes on the string-heavy frame, 1.7x on the mixed
# one, for CPU within the noise.
_DEFAULTS = {"app": "dask", "dir": None, "codec": "lz4", "replicas": 1,
             "push_size": 256 << 10, "pool_bytes": 8 << 20,
             "timeout_ms": 0, "secret_file": None,
             "on_commit": None}
# What the scheduler needs to drop a shuffle.
_TARGET = ("workers", "app", "dir", "secret_file", "timeout_ms")
_local = threading.local()
log = logging.getLogger("ushuffle.dask")
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


def _write_map(frame, on, nparts, sid, index, cfg):
    """The map side: writes frame's rows to their partitions (by the
    columns on, as rows.partition) as map `index` of shuffle sid and
    commits; returns the map status and the rows per partition (the
    reducers size their columns by them). The task thread hashes and
    sorts; a writer thread writes and commits while the task waits
    outside the worker's pool, so that the commit's wait (the workers'
    sync) overlaps the next map."""
    t0 = t = _clock()
    # A stable sort by partition, as dask's group_split_pandas does: each
    # partition's rows keep their order.
    order, counts = _rows.partition(frame, on, nparts)
    t = _tally("hash", t)
    parts = [_rows.Packer(frame, order, cfg["push_size"], index)]
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


def _read(part, statuses, rows, cfg):
    """Partition part's records, by layout (maps whose frames had other
    dtypes write other layouts)."""
    gathers = {}
    with ushuffle.Reader(part, statuses, cfg["timeout_ms"]) as r:
        while True:
            t = _clock()
            rec = r.next()
            t = _tally("fetch", t)
            if rec is None:
                break
            layout = bytes(_rows.layout(rec))
            g = gathers.get(layout)
            if g is None:
                g = gathers[layout] = _rows.Gather(layout, rows)
            g.add(rec)
            _tally("decode", t)
    return gathers.values()


def _assemble(gathers, ignore_index):
    """One frame of the gathers' rows, per map in map order, as the tasks
    shuffle concatenates its pieces (dask's _concat)."""
    frames = [g.frame() for g in gathers]
    if len(frames) == 1:
        out, runs = frames[0]
    else:
        pieces = []
        for f, fruns in frames:
            lo = 0
            for m, n in fruns:
                pieces.append((m, f.iloc[lo:lo + n]))
                lo += n
        pieces.sort(key=lambda p: p[0])
        runs = [(m, len(f)) for m, f in pieces]
        out = methods.concat([f for _, f in pieces], uniform=True)
    if ignore_index:
        # Each map's piece numbered from 0, as tasks leaves it.
        out.index = pd.RangeIndex(len(out)) if len(runs) == 1 else \
            pd.Index(np.concatenate([np.arange(n) for _, n in runs]))
    return out


class _Maps:
    """What every reducer needs, in O(maps + partitions): the maps'
    statuses, the rows of each partition over all maps, map 0's empty
    frame, and the shuffle's id and statuses key (a reducer that finds
    map outputs lost asks the scheduler to rerun the maps). On a local
    scheduler it also owns the shuffle: dropped when the scheduler
    releases it, in the process that made it."""

    def __init__(self, statuses, rows, head, sid=None, key=None, drop=None):
        self.statuses, self.rows, self.head = statuses, rows, head
        self.sid, self.key = sid, key
        self._drop = drop  # (target, sid), or None: the scheduler's
        self._pid = os.getpid()

    def __reduce__(self):  # a copy never drops
        return _Maps, (self.statuses, self.rows, self.head, self.sid,
                       self.key)

    def __del__(self):
        if self._drop is not None and os.getpid() == self._pid:
            _drop(*self._drop)


def _statuses(results, nparts, sid, cfg, key=None):
    """The barrier: the maps' statuses, in map order."""
    rows = np.zeros(nparts, np.int64)
    for _, counts, _, _ in results:
        rows += counts
    drop = None if sid is None else ({k: cfg[k] for k in _TARGET}, sid)
    return _Maps([s for s, _, _, _ in results], rows, results[0][2],
                 results[0][3], key, drop)


def _lost(e):
    """Whether a reader's error says map outputs are gone (the ushuffled
    that held them was restarted empty, or is down), which a rerun of
    the maps mends; not a corrupt frame or a wrong secret."""
    return isinstance(e, ushuffle.NotCommitted) or \
        e.name in ("ECONNREFUSED", "ECONNRESET")


def _rerun(maps, e):
    """In a distributed worker: asks the scheduler to rerun the maps of
    maps' shuffle under a new id (Lifetimes.lost), and raises Reschedule
    so that this reducer runs again once they have. Returns where there
    is no scheduler to ask, or it refuses (too many reruns)."""
    try:
        from distributed import Reschedule, get_worker
        from distributed.utils import sync
        w = get_worker()
    except (ImportError, ValueError):
        return
    if maps.key is None or not sync(w.loop, w.scheduler.ushuffle_lost,
                                    key=maps.key, sid=maps.sid,
                                    why=str(e)):
        return
    raise Reschedule()


def _reduce(maps, part, ignore_index, cfg):
    _auth(cfg)
    t0 = _clock()
    if not maps.rows[part]:
        # The tasks shuffle's empty partition: map 0's empty piece, with
        # its dtypes (and categories).
        head = maps.head
        return head.reset_index(drop=True) if ignore_index else head
    try:
        gathers = _read(part, maps.statuses, int(maps.rows[part]), cfg)
    except ushuffle.Error as e:
        if _lost(e):
            _rerun(maps, e)
        raise
    t = _clock()
    out = _assemble(gathers, ignore_index)
    _tally("concat", t)
    _tally("reduce", t0)
    return out


def _local_id(cfg):
    """The id task: on a local scheduler, a new shuffle id for this
    compute (its maps, barrier and reducers share it); None in a
    distributed worker, whose maps ask the scheduler."""
    try:
        from distributed import get_worker
        get_worker()
        return None
    except (ImportError, ValueError):
        pass
    if not cfg["workers"]:
        os.makedirs(cfg["dir"], exist_ok=True)
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def _map(frame, col, nparts, token, index, ignore_index, cfg, sid):
    """A map task: the status, rows per partition, from map 0 the empty
    frame an empty output partition is, and the shuffle's id."""
    _auth(cfg)
    if sid is None:
        sid = _shuffle_id(token, cfg)
    head = frame.take(np.empty(0, np.intp)) if index == 0 else None
    if ignore_index:
        frame = frame.reset_index(drop=True)  # computed, not gathered
    # The column labels (a "_partitions" column Dask assigned is the
    # partitions themselves).
    on = [col] if not isinstance(col, list) else col
    status, counts = _write_map(frame, on, nparts, sid, index, cfg)
    if cfg["on_commit"]:
        cfg["on_commit"](index)
    return status, counts, head, sid


# Lifetimes: the scheduler's.

def _statuses_key(token):
    return f"ushuffle-statuses-{token}"


def _shuffle_id(token, cfg):
    """The id of this incarnation of the shuffle, from the scheduler."""
    try:
        from distributed import get_worker
        from distributed.utils import sync
        w = get_worker()
    except ValueError:
        raise RuntimeError("ushuffle.dask: a shuffle=\"ushuffle\" task ran "
                           "outside a distributed worker (compute it with "
                           "the Client it was built with)") from None
    sid = sync(w.loop, w.scheduler.ushuffle_shuffle_id,
               key=_statuses_key(token),
               target={k: cfg[k] for k in _TARGET})
    if sid is None:
        raise RuntimeError(f"ushuffle.dask: shuffle {token} was forgotten "
                           f"by the scheduler")
    return sid


def _drop(target, sid):
    """Drops shuffle sid on every ushuffled worker of target (or its
    directory on the disk target)."""
    try:
        if target["workers"]:
            _auth(target)
            ushuffle.shuffle_drop(target["workers"], target["app"], sid,
                                  target["timeout_ms"])
        else:
            shutil.rmtree(os.path.join(target["dir"], f"s{sid}"),
                          ignore_errors=True)
    except ushuffle.Error as e:  # an unreachable worker drops it at its
        log.warning("ushuffle.dask: %s", e)  # --app-ttl


def _heartbeat(target):
    """Tells target's workers its application is alive (a worker drops
    the shuffles of one it has not heard from for its --app-ttl)."""
    try:
        _auth(target)
        ushuffle.app_heartbeat(target["workers"], target["app"],
                               target["timeout_ms"])
    except ushuffle.Error as e:  # the next beat, or a replica, serves
        log.warning("ushuffle.dask: heartbeat: %s", e)


# How many times one shuffle's maps are rerun because a reducer found
# their outputs lost: beyond, the reducer's error stands (a ushuffled
# that loses every rerun's data is not mended by one more).
_MAX_RERUNS = 3

# How often the scheduler heartbeats the applications of live shuffles:
# a fifth of ushuffled's default --app-ttl (300 s), so a beat or two
# lost to a stalled worker never expires a persisted result.
_HEARTBEAT_S = 60


class Lifetimes(SchedulerPlugin):
    """The scheduler plugin that owns shuffle lifetimes: each incarnation
    of a shuffle (from its first map until its statuses key is forgotten)
    gets an id of its own, dropped on the workers when the key goes. A
    recompute is a new incarnation: it never adds to a dropped one. While
    any shuffle of an application on workers lives, the plugin heartbeats
    that application, so the workers' --app-ttl never expires it."""

    name = "ushuffle"
    idempotent = True  # a second register() keeps the live shuffles

    def __init__(self):
        self.live = {}  # statuses key: (shuffle id, target)
        self.reruns = collections.Counter()  # statuses key: maps reruns

    async def start(self, scheduler):
        self.scheduler = scheduler
        scheduler.handlers["ushuffle_shuffle_id"] = self.shuffle_id
        scheduler.handlers["ushuffle_lost"] = self.lost
        # Drops and heartbeats talk to the workers: off the scheduler's
        # event loop, in order.
        self.dropper = ThreadPoolExecutor(1, "ushuffle-drop")
        from tornado.ioloop import PeriodicCallback
        self.beat = PeriodicCallback(self.heartbeat, _HEARTBEAT_S * 1000)
        self.beat.start()

    def heartbeat(self):
        targets = {tuple(t[k] for k in _TARGET): t
                   for _, t in self.live.values() if t["workers"]}
        for t in targets.values():
            self.dropper.submit(_heartbeat, t)

    def shuffle_id(self, key, target):
        if key not in self.scheduler.tasks:
            return None  # forgotten while the map was on its way
        if key not in self.live:
            sid = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
            self.live[key] = (sid, target)
        return self.live[key][0]

    def lost(self, key, sid, why=""):
        """A reducer of shuffle sid found map outputs gone (a ushuffled
        restarted empty with its Dask worker, or down): the maps run
        again under a new id, as p2p restarts a shuffle that lost a
        worker. The statuses task is released (its waiting reducers,
        the caller among them, wait again) and so are maps still in
        memory; the old id is dropped. Whether the caller should
        reschedule itself: true once sid was rerun (by this call or an
        earlier one), false past _MAX_RERUNS or for a forgotten key."""
        ts = self.scheduler.tasks.get(key)
        if ts is None:
            return False
        live = self.live.get(key)
        if live is None or live[0] != sid:
            return True  # rerun already, by another reducer's call
        if self.reruns[key] >= _MAX_RERUNS:
            return False
        self.reruns[key] += 1
        del self.live[key]
        self.dropper.submit(_drop, live[1], sid)
        log.warning("ushuffle.dask: shuffle %d (%s) lost map outputs, "
                    "rerunning its maps (%d of at most %d): %s", sid, key,
                    self.reruns[key], _MAX_RERUNS, why)
        recs = {dt.key: "released" for dt in ts.dependencies
                if dt.state == "memory"}
        if ts.state == "memory":
            recs[key] = "released"
        stimulus = f"ushuffle-lost-{sid}-{time.time()}"
        self.scheduler.transitions(recs, stimulus_id=stimulus)
        self.scheduler.stimulus_queue_slots_maybe_opened(
            stimulus_id=stimulus)
        return True

    def transition(self, key, start, finish, *args, **kwargs):
        if finish != "forgotten":
            return
        self.reruns.pop(key, None)
        if key in self.live:
            sid, target = self.live.pop(key)
            self.dropper.submit(_drop, target, sid)

    def restart(self, scheduler):
        for key in list(self.live):
            self.transition(key, None, "forgotten")

    async def close(self):
        self.beat.stop()
        self.restart(self.scheduler)
        self.dropper.shutdown(wait=True)


# The lowering.

_registered = None  # register()'s options, in this process


def _options(expr_options):
    """The options of one shuffle: register()'s (in the process that
    lowers it: the client's, or the scheduler's, which register() set
    too), overridden by those ushuffle.dask.shuffle() put in the
    expression."""
    mine = (expr_options or {}).get("ushuffle")
    if mine is None and _registered is None:
        raise RuntimeError("ushuffle.dask: shuffle_method=\"ushuffle\" "
                           "before ushuffle.dask.register()")
    cfg = {**_DEFAULTS, **(_registered or {}), **(mine or {})}
    if not cfg["workers"]:
        cfg["dir"] = cfg["dir"] or os.path.join(
            "/var/tmp", f"ushuffle-dask-{os.getuid()}")
    return cfg


class UshuffleShuffle(SimpleShuffle):
    """ushuffle's lowering of Dask's Shuffle: maps, a barrier, reducers."""

    @functools.cached_property
    def _meta(self):
        meta = self.frame._meta
        return meta.reset_index(drop=True) if self.ignore_index else meta

    def _layer(self):
        cfg = _options(self.options)
        token = self._name.split("-")[-1]
        nparts = self.npartitions_out
        col = self.partitioning_index
        idname = f"ushuffle-id-{token}"
        mname = f"ushuffle-map-{token}"
        sname = _statuses_key(token)
        dsk = {idname: Task(idname, _local_id, cfg)}
        maps = []
        for i in range(self.frame.npartitions):
            t = Task((mname, i), _map, TaskRef((self.frame._name, i)),
                     col, nparts, token, i, self.ignore_index, cfg,
                     TaskRef(idname))
            dsk[t.key] = t
            maps.append(t.ref())
        dsk[sname] = Task(sname, _statuses, List(*maps), nparts,
                          TaskRef(idname), cfg, sname)
        for i, part in enumerate(self._partitions):
            t = Task((self._name, i), _reduce, TaskRef(sname), part,
                     self.ignore_index, cfg)
            dsk[t.key] = t
        return dsk


def _lower_shuffle(self):
    """Shuffle._lower, once installed: "ushuffle" (named, or the config's
    method) lowers to UshuffleShuffle, any other method as Dask's."""
    if (self.method or get_default_shuffle_method()) != "ushuffle":
        return _dask_lower(self)
    # Fewer outputs than inputs need no repartition first (as p2p): each
    # map writes to any number of partitions.
    return UshuffleShuffle(self.frame, self.partitioning_index,
                            self.npartitions_out, self.ignore_index,
                            self.options, self.original_partitioning_index)


def _is_broadcast_join(self):
    """Merge.is_broadcast_join, once installed: for "ushuffle" the choice
    Dask makes for its own methods (a small side is broadcast, not
    shuffled)."""
    if (self.shuffle_method or get_default_shuffle_method()) == "ushuffle":
        self = self.substitute_parameters({"shuffle_method": "tasks"})
    return _dask_broadcast(self)


def _shuffle_meta(self):
    """ShuffleBase._meta, once installed: with ignore_index, "ushuffle"
    numbers each map's rows from 0 as "tasks" does, and says so in the
    meta as Dask does for "tasks" (the abstract Shuffle's meta must be
    the lowered one's)."""
    meta = _dask_meta(self)
    if self.ignore_index and (self.method or get_default_shuffle_method()) \
            == "ushuffle":
        meta = meta.reset_index(drop=True)
    return meta


_dask_lower = _dask_broadcast = _dask_meta = None


def _install():
    """Adds "ushuffle" to the methods Dask's Shuffle lowers to, and to
    those Merge may broadcast for, in this process (once)."""
    global _dask_lower, _dask_broadcast, _dask_meta
    if _dask_lower is not None:
        return
    _dask_meta = ShuffleBase.__dict__["_meta"].func
    prop = functools.cached_property(_shuffle_meta)
    prop.__set_name__(ShuffleBase, "_meta")
    ShuffleBase._meta = prop
    _dask_lower = Shuffle._lower
    _dask_broadcast = Merge.__dict__["is_broadcast_join"].func
    Shuffle._lower = _lower_shuffle
    prop = functools.cached_property(_is_broadcast_join)
    prop.__set_name__(Merge, "is_broadcast_join")
    Merge.is_broadcast_join = prop


def _configure(cfg, dask_scheduler=None):
    """On the scheduler (which lowers the expressions a client sends):
    the hook and, unless None, register()'s options."""
    global _registered
    _install()
    if cfg is not None:
        _registered = cfg


_ready = set()  # (client id, scheduler) with the hook and the plugin


def _scheduler_side(client, cfg=None):
    """The hook, the options (unless None) and the Lifetimes plugin on
    client's scheduler: once per client, unless there are options."""
    key = (client.id, client.scheduler.address)
    if key in _ready and cfg is None:
        return
    client.register_plugin(Lifetimes(), name=Lifetimes.name)
    client.run_on_scheduler(_configure, cfg)
    _ready.add(key)


def _check_opts(opts):
    unknown = set(opts) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"ushuffle.dask: unknown options {sorted(unknown)}")


def _current_client():
    try:
        from distributed import default_client
        return default_client()
    except ValueError:
        return None


def _reached(cfg):
    """cfg, once its workers answered a heartbeat: else the error now,
    naming the worker, before any task writes anything."""
    if cfg["workers"]:
        _auth(cfg)
        ushuffle.app_heartbeat(cfg["workers"], cfg["app"], cfg["timeout_ms"])
    return cfg


def register(workers=None, client=None, **opts):
    """Makes "ushuffle" a shuffle method of Dask's DataFrame operations,
    through ushuffled workers ("HOST:PORT,...") or, without workers, the
    disk target under opts["dir"] (default /var/tmp/ushuffle-dask-UID;
    one host only). With a distributed client (client, else the default
    one), also on its scheduler, which lowers the expressions, and with
    the scheduler plugin that drops each shuffle when its keys are
    forgotten. Calling it again replaces the options.

    opts: app, dir, codec, replicas (workers each batch goes to: with
    2, a worker lost loses nothing), push_size, pool_bytes, timeout_ms,
    secret_file (else $USHUFFLE_SECRET on the Dask workers and the
    scheduler), on_commit (called with the map index after each commit:
    for tests). install() returns the workers, replicas and app of the
    ushuffled it starts."""
    global _registered
    _check_opts(opts)
    _install()
    cfg = _reached({**_DEFAULTS, **opts, "workers": workers})
    client = client or _current_client()
    if client is not None:
        _scheduler_side(client, cfg)
    _registered = cfg


def install(client, **opts):
    """One ushuffled per host of client's Dask workers; returns the
    options of register() and shuffle() that use them
    (ushuffle/deploy.py)."""
    from ushuffle.deploy import install as start
    return start(client, **opts)


def _check_on(df, on):
    """on, as Dask's shuffle takes it: column labels, the index name, or
    a Series or Index of df; a short KeyError for a label df lacks."""
    if is_dask_collection(on):
        return on
    if isinstance(on, tuple) and on in df.columns:
        return [on]  # a tuple label, not a tuple of labels
    labels = list(on) if pd.api.types.is_list_like(on) else [on]
    missing = [c for c in labels
               if c not in df.columns and c != df._meta.index.name]
    if missing:
        cols = list(df.columns)
        more = f", ... ({len(cols)} in all)" if len(cols) > 10 else ""
        raise KeyError(f"ushuffle.dask.shuffle: no column {missing} in the "
                       f"frame (columns: {cols[:10]}{more})")
    return on


def shuffle(df, on, npartitions=None, ignore_index=False, workers=None,
            **opts):
    """df.shuffle(on, npartitions, ignore_index=..., shuffle_method=
    "ushuffle") with these options (register()'s) for this one shuffle:
    they travel in the expression."""
    _check_opts(opts)
    on = _check_on(df, on)
    _install()
    client = _current_client()
    if client is not None:
        _scheduler_side(client)
    cfg = _reached({**_DEFAULTS, **opts, "workers": workers})
    return df.shuffle(on, npartitions=npartitions, ignore_index=ignore_index,
                      shuffle_method="ushuffle", ushuffle=cfg)
