"""ushuffle.rows, the C row work of the Dask shuffle, against pandas and
dask themselves: the partitions dask's partitioning_index gives, and
frames that come back cell for cell through real writers and readers."""
import numpy as np
import pandas as pd
import pytest
from dask.dataframe.shuffle import partitioning_index

import ushuffle
from ushuffle import rows


def keyed(n=3000, seed=3):
    rng = np.random.default_rng(seed)
    t = pd.Timestamp("2026-01-01") + pd.to_timedelta(
        rng.integers(0, 10**6, n), unit="s")
    s = np.array([f"k{v}é" if v % 3 else f"k{v}" for v in
                  rng.integers(0, 40, n)], dtype=object)
    s[rng.random(n) < 0.1] = None
    s[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({
        "i8": rng.integers(-100, 100, n).astype(np.int8),
        "u16": rng.integers(0, 9, n).astype(np.uint16),
        "f32": rng.random(n).astype(np.float32),
        "f": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
        "b": rng.random(n) < 0.5, "t": t, "s": s,
        "c": pd.Categorical(rng.choice(["x", "y"], n)),
        "n": pd.array(rng.integers(0, 5, n), dtype="Int64")})


@pytest.mark.parametrize("on", [["i8"], ["u16"], ["f32"], ["f"], ["b"],
                                ["t"], ["s"], ["c"], ["n"], ["i8", "s"],
                                ["t", "f", "c", "n"], "f", "s"])
def test_partition_is_dasks(on):
    df = keyed()
    order, counts = rows.partition(df, on, 7)
    want = np.asarray(partitioning_index(df[on], 7)).astype(np.int64)
    assert counts.tolist() == np.bincount(want, minlength=7).tolist()
    # Partition by partition, each in input order (a stable sort).
    assert order.tolist() == np.argsort(want, kind="stable").tolist()


def test_partition_ids():
    """A "_partitions" column is the partitions, as in dask's
    rearrange_by_column."""
    df = pd.DataFrame({"_partitions": [2, 0, 2, 1, 0], "x": range(5)})
    order, counts = rows.partition(df, "_partitions", 3)
    assert counts.tolist() == [2, 1, 2]
    assert order.tolist() == [1, 4, 3, 0, 2]


def roundtrip(df, tmp_path, push_size=1 << 16, nparts=3):
    tmp_path = tmp_path / f"{len(list(tmp_path.iterdir()))}"
    order, counts = rows.partition(df, ["k"], nparts)
    p = rows.Packer(df, order, push_size)
    ends = np.cumsum(counts)
    with ushuffle.Ring(push_size=push_size) as ring:
        with ushuffle.Writer(ring, 5, 0, 0, nparts, target="disk",
                             dir=str(tmp_path)) as w:
            for q in range(nparts):
                p.write(w, q, int(ends[q] - counts[q]), int(ends[q]))
            st = w.commit()
    out, batches = [], 0
    for q in range(nparts):
        g = None
        with ushuffle.Reader(q, [st]) as r:
            for rec in r:
                g = g or rows.Gather(bytes(rows.layout(rec)), counts[q])
                g.add(rec)
                batches += 1
        out.append(g.frame()[0] if g else None)
    for q, part in enumerate(out):
        want = df.iloc[order[ends[q] - counts[q]:ends[q]]]
        if part is None:
            assert want.empty
            continue
        # "equiv": pandas 3 keeps a RangeIndex through take() where it
        # can (one row); the rows carry an int64 index, the same values.
        pd.testing.assert_frame_equal(part, want, check_index_type="equiv")
    return batches


def test_cells_come_back(tmp_path):
    """Packed and pickled columns side by side; None and NaN stay what
    they were in a string column."""
    df = keyed().rename(columns={"i8": "k"})
    df.index = pd.Index([f"r{i}" for i in range(len(df))], name="row")
    assert roundtrip(df, tmp_path) > 3  # several batches per partition


def test_packed_index_and_strings(tmp_path):
    n = 5000
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"k": rng.integers(0, 9, n),
                       "s": [f"{'x' * (i % 50)}ü" for i in range(n)]},
                      index=pd.RangeIndex(7, 7 + 3 * n, 3, name="ix"))
    roundtrip(df, tmp_path)
    df.index = pd.Index(rng.random(n), name="fx")
    roundtrip(df, tmp_path)


def test_row_larger_than_a_push_buffer(tmp_path):
    """A row that fits no push buffer goes out as a record of its own."""
    df = pd.DataFrame({"k": [1, 2, 3, 1],
                       "s": ["a", "b" * 300000, None, "ccc"]})
    roundtrip(df, tmp_path, push_size=1 << 16)


class Sub(str):
    pass


def test_other_objects_travel_pickled(tmp_path):
    df = pd.DataFrame({"k": [1, 2, 3, 4], "o": ["a", 2, b"x", None],
                       "sub": [Sub(x) for x in "abcd"]})
    roundtrip(df, tmp_path)


def test_map_order_and_categories(tmp_path):
    """Records added in reverse (map 1's last row first) come back in map
    order, then row order, with each map's run of rows, and a categorical
    whose categories differ per map comes back with them unioned, as
    dask's concat makes them."""
    maps = [pd.DataFrame({"k": [0, 0, 0], "x": [1.0, 2.0, 3.0],
                          "c": pd.Categorical(["a", "b", "a"])}),
            pd.DataFrame({"k": [0, 0], "x": [4.0, 5.0],
                          "c": pd.Categorical(["z", "z"])})]
    statuses = []
    with ushuffle.Ring(push_size=1 << 16) as ring:
        for m in (1, 0):
            order = np.arange(len(maps[m]), dtype=np.int64)
            p = rows.Packer(maps[m], order, 1 << 16, m)
            p.step = 1  # a batch per row
            with ushuffle.Writer(ring, 6, m, 0, 1, target="disk",
                                 dir=str(tmp_path)) as w:
                p.write(w, 0, 0, len(order))
                statuses.append(w.commit())
    with ushuffle.Reader(0, statuses) as r:
        recs = [bytes(rec) for rec in r]
    assert len(recs) == 5
    g = rows.Gather(bytes(rows.layout(memoryview(recs[0]))), 5)
    for rec in sorted(recs, key=lambda r: rows.HDR.unpack_from(r)[2:4],
                      reverse=True):  # as frames may arrive
        g.add(memoryview(rec))
    out, runs = g.frame()
    assert runs == [[0, 3], [1, 2]]
    assert out["x"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert out["c"].tolist() == ["a", "b", "a", "z", "z"]
    assert list(out["c"].cat.categories) == ["a", "b", "z"]


def test_pack_checks_its_arguments():
    lens, starts, utf8 = rows._rows.encode_str(["ab", None, "c"])
    order = np.array([0, 1, 2], np.int64)
    dst = bytearray(64)
    assert rows._rows.pack(dst, [("s", lens, starts, utf8)], order, 0, 3) \
        == (3, 24)
    with pytest.raises(ValueError, match="a string cell beyond"):
        rows._rows.pack(dst, [("s", lens, starts, utf8[:1])], order, 0, 3)
    with pytest.raises(ValueError, match="order names row 3"):
        rows._rows.pack(dst, [("s", lens, starts, utf8)],
                        np.array([3], np.int64), 0, 1)
    with pytest.raises(TypeError, match="column 0 is not"):
        rows._rows.pack(dst, [("q", 1)], order, 0, 3)
    assert rows._rows.encode_str(["a", 1]) is None
