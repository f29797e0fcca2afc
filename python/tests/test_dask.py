"""ushuffle.dask.shuffle on a real LocalCluster and real ushuffled: every
output partition holds the rows Dask's own shuffle_method="tasks" puts there, in
its order."""
import functools
import os
import signal
import tempfile
import time

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import wait

import ushuffle
import ushuffle.dask as ud
from conftest import Workers


def frame(n, seed, skew=False):
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 1000, n)
    if skew:
        k[rng.random(n) < 0.9] = 7
    f = rng.random(n)
    f[rng.random(n) < 0.1] = np.nan
    s = np.array([f"s{v}" for v in rng.integers(0, 50, n)], dtype=object)
    s[rng.random(n) < 0.1] = None
    i = pd.array(rng.integers(-5, 5, n), dtype="Int64")
    i[rng.random(n) < 0.1] = pd.NA
    return pd.DataFrame({"k": k, "f": f, "s": s, "i": i},
                        index=pd.RangeIndex(n) * 3)


def parts(client, ddf):
    return client.gather(client.compute(ddf.to_delayed()))


def assert_same(client, ours, theirs):
    """Partition by partition, row by row: the tasks shuffle is
    deterministic (map order, then row order)."""
    a, b = parts(client, ours), parts(client, theirs)
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        pd.testing.assert_frame_equal(x, y, obj=f"part {i}")
    return a


def check(client, workers, ddf, on, nparts, **opts):
    ours = ud.shuffle(ddf, on, npartitions=nparts, workers=workers.addr,
                      **opts)
    p = ours.persist()
    wait(p)
    assert workers.stored(), "the shuffle stored nothing on the workers"
    got = assert_same(client, p,
                      ddf.shuffle(on, npartitions=nparts, shuffle_method="tasks"))
    del p
    assert workers.emptied() == [], "the shuffle was not dropped"
    return got


def test_types_and_nulls(client, workers):
    ddf = dd.from_pandas(frame(20000, 1), npartitions=4)
    got = check(client, workers, ddf, "k", 5)
    assert sum(map(len, got)) == 20000
    check(client, workers, ddf, ["s", "i"], 3)


def test_more_dtypes(client, workers):
    """Raw bool, datetime, timedelta and uint columns beside pickled
    categorical and tz-aware ones, under a string index."""
    n = 6000
    rng = np.random.default_rng(8)
    t = pd.Timestamp("2026-01-01") + pd.to_timedelta(
        rng.integers(0, 10**6, n), unit="s")
    pdf = pd.DataFrame({
        "k": rng.integers(0, 100, n), "b": rng.random(n) < 0.5, "t": t,
        "d": t - t.min(), "u": rng.integers(0, 9, n).astype(np.uint16),
        "c": pd.Categorical(rng.choice(["x", "y", "z"], n)),
        "z": t.tz_localize("UTC")}, index=[f"r{i}" for i in range(n)])
    check(client, workers, dd.from_pandas(pdf, npartitions=3), "k", 4)


def mixed(i):
    """Input partitions whose column v is int64 or float64 (odd ones)."""
    rng = np.random.default_rng(i)
    v = rng.integers(0, 1000, 500)
    return pd.DataFrame({"k": rng.integers(0, 50, 500),
                         "v": v + 0.5 if i % 2 else v})


def test_mixed_layouts(client, workers):
    """Records of different dtypes meet in one reducer: it builds a frame
    per layout and concatenates them, as Dask's shuffle does."""
    ddf = dd.from_map(mixed, range(4), meta=mixed(1).iloc[:0])
    got = check(client, workers, ddf, "k", 3)
    assert all(p.v.dtype == np.float64 for p in got if len(p))


def test_empty_partitions(client, workers):
    pdf = frame(3000, 2)
    pdf = pdf[pdf.k < 2]  # two keys, twelve output partitions
    ddf = dd.from_pandas(frame(3000, 2), npartitions=4)
    ddf = ddf[ddf.k < 2]  # input partitions may be empty too
    got = check(client, workers, ddf, "k", 12)
    assert sum(1 for p in got if len(p) == 0) >= 10
    assert sum(map(len, got)) == len(pdf)


def test_skewed_key(client, workers):
    # 16 KiB push buffers: each partition's rows span many batches, and
    # the two Dask workers' frames interleave on the ushuffled workers.
    ddf = dd.from_pandas(frame(40000, 3, skew=True), npartitions=4)
    got = check(client, workers, ddf, "k", 4, push_size=16384)
    assert max(map(len, got)) >= 36000


def test_disk_target(client, tmp_path):
    ddf = dd.from_pandas(frame(5000, 4), npartitions=3)
    ours = ud.shuffle(ddf, "k", npartitions=4, dir=str(tmp_path))
    assert_same(client, ours, ddf.shuffle("k", npartitions=4,
                                          shuffle_method="tasks"))
    for _ in range(600):  # the scheduler drops it when its keys go
        if not os.listdir(tmp_path):
            break
        time.sleep(0.05)
    assert os.listdir(tmp_path) == []


def kill_once(flag):
    """on_commit hook: the first map to commit kills its Dask worker
    process, after the commit: Dask loses that status and re-runs it."""
    def hook(index):
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)
    return hook


def test_worker_killed_in_map(client, workers, tmp_path):
    flag = str(tmp_path / "killed")
    ddf = dd.from_pandas(frame(20000, 5), npartitions=6)
    check(client, workers, ddf, "k", 4, on_commit=kill_once(flag))
    assert os.path.exists(flag), "no Dask worker was killed"
    client.wait_for_workers(2, timeout=60)


def commit_then_wait(where, maps, index):
    """on_commit hook: the commit that makes `maps` commits (the last map
    of the first run) says so ("ready") and waits for "go" before its
    task returns, so nothing reads the shuffle before the test says; the
    maps' rerun passes through."""
    os.close(os.open(os.path.join(where, f"c{index}-{os.urandom(8).hex()}"),
                     os.O_CREAT | os.O_WRONLY))
    if len([f for f in os.listdir(where) if f.startswith("c")]) < maps:
        return
    try:
        os.close(os.open(os.path.join(where, "ready"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    end = time.monotonic() + 120
    while not os.path.exists(os.path.join(where, "go")):
        assert time.monotonic() < end, "the test never said go"
        time.sleep(0.02)


def test_outputs_lost_after_the_maps(client, tmp_path):
    """Replicas 1, every map committed, then a ushuffled restarted empty
    (as a restarted Dask worker's is) before any reducer reads: the
    reducers' USH_ENOTCOMMITTED makes the scheduler rerun the maps under
    a new shuffle id, and the result is Dask's own; the lost incarnation
    is dropped from the surviving worker."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as root:
        w = Workers(root)
        try:
            maps = 4
            ddf = dd.from_pandas(frame(20000, 12), npartitions=maps)
            hook = functools.partial(commit_then_wait, str(tmp_path), maps)
            ours = ud.shuffle(ddf, "k", npartitions=6, workers=w.addr,
                              on_commit=hook)
            fut = client.compute(ours)
            end = time.monotonic() + 120
            while not (tmp_path / "ready").exists():
                assert time.monotonic() < end and not fut.done(), \
                    fut.exception() if fut.done() else "no commit"
                time.sleep(0.02)
            w.restart_empty(0)
            (tmp_path / "go").touch()
            got = fut.result(timeout=120)
            want = ddf.shuffle("k", npartitions=6,
                               shuffle_method="tasks").compute()
            pd.testing.assert_frame_equal(got, want)
            commits = [f for f in os.listdir(tmp_path) if f[0] == "c"]
            assert len(commits) == 2 * maps  # the maps ran twice
            del fut
            assert w.emptied() == []
        finally:
            w.stop()


def test_unknown_column(workers):
    ddf = dd.from_pandas(frame(100, 6), npartitions=2)
    with pytest.raises(KeyError, match="no column.*nope"):
        ud.shuffle(ddf, ["k", "nope"], workers=workers.addr)
    assert workers.stored() == []


def test_unreachable_workers(client, workers):
    ddf = dd.from_pandas(frame(100, 7), npartitions=2)
    dead = workers.addr + ",127.0.0.1:1"
    with pytest.raises(ushuffle.Error, match="127.0.0.1:1") as e:
        ud.shuffle(ddf, "k", workers=dead)
    assert e.value.name == "ECONNREFUSED"
    assert workers.stored() == []


def test_bindings_roundtrip(tmp_path):
    """The bindings alone: buffer-protocol writes, memoryview reads,
    errors carrying ush_last_error()'s text."""
    with ushuffle.Ring() as ring:
        with ushuffle.Writer(ring, 9, 0, 0, 2, target="disk",
                             dir=str(tmp_path)) as w:
            w.write(1, b"abc")
            w.write(1, np.arange(4, dtype=np.int64))
            w.write(0, memoryview(bytearray(b"z" * 100000))[1:])
            st = w.commit()
        assert ushuffle.status_info(st)["partitions"] == 2
        with pytest.raises(ushuffle.Error, match="committed"):
            ushuffle.Writer(ring, 9, 0, 0, 2, target="disk",
                            dir=str(tmp_path))
    with ushuffle.Reader(1, [st]) as r:
        recs = [bytes(m) for m in r]
    assert recs == [b"abc", np.arange(4, dtype=np.int64).tobytes()]
    with ushuffle.Reader(0, [st]) as r:
        assert [m.nbytes for m in r] == [99999]
    with pytest.raises(ushuffle.Corrupt):
        ushuffle.Reader(0, [st[:-1] + bytes([st[-1] ^ 1])])
