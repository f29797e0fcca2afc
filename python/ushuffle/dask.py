"""ushuffle as Dask's shuffle method (docs/python.md).

register() hooks dask.dataframe.shuffle.rearrange_by_column, the one
function every hash and range shuffle of Dask 2022.12 goes through
(df.shuffle, set_index, merge, groupby with split_out, sort_values), so
that shuffle="ushuffle", or dask.config.set(shuffle="ushuffle"), moves
the rows through ushuffle (and dask.dataframe.shuffle.shuffle, whose
column-label path Dask reserves to "tasks"). A shuffle is three layers: one map task per
input partition (write each output partition's rows through a ushuffle
Writer, commit, return the map status bytes and the rows per partition),
one statuses task that lists them, and one reduce task per output
partition (read exactly the attempts whose statuses Dask delivered). A
map task that Dask re-runs (its worker died) writes a new, random attempt
number; the attempts Dask did not deliver are never read.

Lifetimes are the scheduler's: a SchedulerPlugin hands each incarnation of
a shuffle its id when its first map asks, and drops it on the ushuffled
workers when the statuses task, on which every output partition depends,
is forgotten: after the last output key was released by every future,
persisted collection and client that held it.

Rows travel as row batches (ushuffle/rows.py): the map hashes and sorts
them in C and packs each batch's columns straight into a push buffer;
the reducer copies each record's columns once into its output's. Each
batch names its map and its first row, so the reducer puts a
partition's rows in map order, then row order, and concatenates per map
as Dask's tasks shuffle does.
"""
import collections
import inspect
import logging
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.dataframe.shuffle as _dshuffle
import numpy as np
import pandas as pd
from dask.base import is_dask_collection, tokenize
from dask.dataframe import methods
from dask.dataframe.core import new_dd_object
from dask.highlevelgraph import HighLevelGraph
from distributed.diagnostics.plugin import SchedulerPlugin

import ushuffle
from ushuffle import rows as _rows

__all__ = ["register", "shuffle", "install", "Lifetimes", "stats", "cpu"]

_DEFAULTS = {"app": "dask", "dir": None, "codec": None, "replicas": 1,
             "push_size": 1 << 20, "pool_bytes": 8 << 20,
             "timeout_ms": 0, "secret_file": None,
             "on_commit": None}
# What the scheduler needs to drop a shuffle.
_TARGET = ("workers", "app", "dir", "secret_file", "timeout_ms")
# The Dask and distributed releases the hook was tested with, and the
# signatures of the functions it replaces.
_TESTED = "2022.12."
_SIGNATURES = (("df", "col", "npartitions", "max_branch", "shuffle",
                "compute", "ignore_index"),
               ("df", "index", "shuffle", "npartitions", "max_branch",
                "ignore_index", "compute"))
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


def _statuses(results, nparts):
    """The maps' statuses, the rows of each partition over all maps and
    map 0's empty frame: what every reducer needs, in O(maps +
    partitions)."""
    rows = np.zeros(nparts, np.int64)
    for _, counts, _ in results:
        rows += counts
    return [s for s, _, _ in results], rows, results[0][2]


def _reduce(maps, part, ignore_index, cfg):
    _auth(cfg)
    t0 = _clock()
    statuses, rows, head = maps
    if not rows[part]:
        # The tasks shuffle's empty partition: map 0's empty piece, with
        # its dtypes (and categories).
        return head.reset_index(drop=True) if ignore_index else head
    gathers = _read(part, statuses, int(rows[part]), cfg)
    t = _clock()
    out = _assemble(gathers, ignore_index)
    _tally("concat", t)
    _tally("reduce", t0)
    return out


def _map(frame, col, nparts, token, index, ignore_index, cfg):
    """A map task: the status, rows per partition and, from map 0, the
    empty frame an empty output partition is."""
    _auth(cfg)
    sid = _shuffle_id(token, cfg)
    head = frame.take(np.empty(0, np.intp)) if index == 0 else None
    if ignore_index:
        frame = frame.reset_index(drop=True)  # computed, not gathered
    # The column labels (a "_partitions" column Dask assigned is the
    # partitions themselves).
    on = [col] if isinstance(col, str) else list(col)
    status, counts = _write_map(frame, on, nparts, sid, index, cfg)
    if cfg["on_commit"]:
        cfg["on_commit"](index)
    return status, counts, head


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

    def __init__(self):
        self.live = {}  # statuses key: (shuffle id, target)

    async def start(self, scheduler):
        self.scheduler = scheduler
        scheduler.handlers["ushuffle_shuffle_id"] = self.shuffle_id
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

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "forgotten" and key in self.live:
            sid, target = self.live.pop(key)
            self.dropper.submit(_drop, target, sid)

    def restart(self, scheduler):
        for key in list(self.live):
            self.transition(key, None, "forgotten")

    async def close(self):
        self.beat.stop()
        self.restart(self.scheduler)
        self.dropper.shutdown(wait=True)


# The hook.

def _client():
    try:
        from distributed import get_client
        return get_client()
    except ValueError:
        raise RuntimeError("ushuffle.dask: shuffle=\"ushuffle\" needs a "
                           "distributed.Client (its scheduler drops each "
                           "shuffle when its keys are forgotten)") from None


def _graph(df, col, nparts, ignore_index, cfg):
    """df's rows in nparts partitions by col, through ushuffle."""
    _client().register_scheduler_plugin(Lifetimes(), name=Lifetimes.name,
                                        idempotent=True)
    if cfg["workers"]:
        _auth(cfg)
        # Fails now, naming the worker, before any task writes anything.
        ushuffle.app_heartbeat(cfg["workers"], cfg["app"], cfg["timeout_ms"])
    else:
        cfg["dir"] = cfg["dir"] or os.path.join(
            "/var/tmp", f"ushuffle-dask-{os.getuid()}")
        os.makedirs(cfg["dir"], exist_ok=True)
    token = tokenize(df, col, nparts, ignore_index, cfg)
    mname, rname = f"ushuffle-map-{token}", f"ushuffle-reduce-{token}"
    sname = _statuses_key(token)
    graph = {(mname, i): (_map, (df._name, i), col, nparts, token, i,
                          ignore_index, cfg)
             for i in range(df.npartitions)}
    graph[sname] = (_statuses, [(mname, i) for i in range(df.npartitions)],
                    nparts)
    graph.update({(rname, j): (_reduce, sname, j, ignore_index, cfg)
                  for j in range(nparts)})
    meta = df._meta.reset_index(drop=True) if ignore_index else df._meta
    hlg = HighLevelGraph.from_collections(rname, graph, dependencies=[df])
    return new_dd_object(hlg, rname, meta, [None] * (nparts + 1))


def _rearrange(df, col, npartitions=None, max_branch=None, shuffle=None,
               compute=None, ignore_index=False):
    """dask.dataframe.shuffle.rearrange_by_column, once register()ed:
    shuffle="ushuffle" (or the config's) comes here, any other method
    goes to Dask's own."""
    method = shuffle or dask.config.get("shuffle", None) or "disk"
    if method != "ushuffle":
        return _dask_rearrange(df, col, npartitions, max_branch, shuffle,
                               compute, ignore_index)
    cfg = getattr(_local, "cfg", None) or _registered
    if cfg is None:
        raise RuntimeError("ushuffle.dask: shuffle=\"ushuffle\" before "
                           "ushuffle.dask.register()")
    # As Dask's: fewer outputs than inputs repartitions first.
    if npartitions is not None and npartitions < df.npartitions:
        df = df.repartition(npartitions=npartitions)
    return _graph(df, col, npartitions or df.npartitions, ignore_index,
                  dict(cfg))


def _shuffle(df, index, shuffle=None, npartitions=None, max_branch=32,
             ignore_index=False, compute=None):
    """dask.dataframe.shuffle.shuffle, once register()ed: column labels
    named with shuffle="ushuffle" go straight to rearrange_by_column, as
    Dask sends them for "tasks" (no "_partitions" column: it would cost a
    copy of every partition, and Dask's removal of it makes an empty
    output partition the meta, not map 0's empty piece)."""
    if shuffle == "ushuffle" and (isinstance(index, str) or (
            pd.api.types.is_list_like(index) and
            not is_dask_collection(index))):
        cols = [index] if isinstance(index, str) else list(index)
        if set(cols) <= set(df.columns):
            return _rearrange(df, cols, npartitions=npartitions,
                              shuffle=shuffle, ignore_index=ignore_index)
    return _dask_shuffle(df, index, shuffle, npartitions, max_branch,
                         ignore_index, compute)


_dask_rearrange = _dshuffle.rearrange_by_column
_dask_shuffle = _dshuffle.shuffle
_registered = None


def _check_opts(opts):
    unknown = set(opts) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"ushuffle.dask: unknown options {sorted(unknown)}")


def _install():
    """Hooks dask.dataframe.shuffle, on the Dask it was tested with:
    rearrange_by_column, which every shuffle method goes through, and
    shuffle's column-label path."""
    import distributed
    found = (dask.__version__, distributed.__version__)
    params = tuple(tuple(inspect.signature(f).parameters)
                   for f in (_dask_rearrange, _dask_shuffle))
    if not all(v.startswith(_TESTED) for v in found) or \
            params != _SIGNATURES:
        raise RuntimeError(
            f"ushuffle.dask: the hook into dask.dataframe.shuffle."
            f"rearrange_by_column was tested with dask and distributed "
            f"{_TESTED}x only; found dask {found[0]}, distributed "
            f"{found[1]}")
    _dshuffle.rearrange_by_column = _rearrange
    _dshuffle.shuffle = _shuffle


def register(workers=None, **opts):
    """Makes shuffle="ushuffle" a shuffle method of Dask's DataFrame
    operations, through ushuffled workers ("HOST:PORT,...") or, without
    workers, the disk target under opts["dir"] (one host only). Calling
    it again replaces the options.

    opts: app, dir, codec, replicas (workers each batch goes to: with
    2, a worker lost loses nothing), push_size, pool_bytes, timeout_ms,
    secret_file (else $USHUFFLE_SECRET on the Dask workers and the
    scheduler), on_commit (called with the map index after each commit:
    for tests). install() returns the workers, replicas and app of the
    ushuffled it starts."""
    global _registered
    _check_opts(opts)
    _install()
    _registered = {**_DEFAULTS, **opts, "workers": workers}


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
    """df.shuffle(on, npartitions, ignore_index=..., shuffle="ushuffle")
    with these options (register()'s) for this one shuffle."""
    _check_opts(opts)
    on = _check_on(df, on)
    _install()
    _local.cfg = {**_DEFAULTS, **opts, "workers": workers}
    try:
        return _dshuffle.shuffle(df, on, shuffle="ushuffle",
                                 npartitions=npartitions,
                                 ignore_index=ignore_index)
    finally:
        del _local.cfg
