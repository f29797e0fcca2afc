"""Dask's own operations with shuffle_method="ushuffle"
(ushuffle.dask.register()) on a real LocalCluster and real ushuffled: each
result equals the same operation through shuffle_method="tasks", partition
by partition; a broadcast join stays one."""
import dask
import dask.dataframe as dd
import pytest

import ushuffle.dask as ud
from test_dask import assert_same, frame

# Each operation with the shuffle method given.
OPS = {
    "shuffle": (lambda a, b, **kw: a.shuffle("k", npartitions=5, **kw)),
    "set_index": (lambda a, b, **kw: a.set_index("k", npartitions=4, **kw)),
    "merge": (lambda a, b, **kw: dd.merge(a, b, on="k", npartitions=4,
                                          broadcast=False, **kw)),
    "groupby": (lambda a, b, **kw: a.groupby("k").agg(
        {"f": "sum", "i": "max"}, split_out=3, **kw)),
    "sort_values": (lambda a, b, **kw: a.sort_values("f", **kw)),
    "drop_duplicates": (lambda a, b, **kw: a.drop_duplicates(
        subset=["k"], split_out=3, **kw)),
}


def inputs():
    a = dd.from_pandas(frame(4000, 21), npartitions=4)
    b = dd.from_pandas(frame(1500, 22)[["k", "f"]].rename(columns={"f": "g"}),
                       npartitions=3)
    return a, b


def through_ushuffle(ddf):
    return any((k[0] if isinstance(k, tuple) else k).startswith(
        "ushuffle-map-") for k in ddf.__dask_graph__())


@pytest.mark.parametrize("op", sorted(OPS))
def test_operation(client, registered, op):
    """The method from the config, and named: the tasks method's result
    either way."""
    a, b = inputs()
    key = "dataframe.shuffle.method"
    with dask.config.set({key: "ushuffle"}):
        ours = OPS[op](a, b)
        assert through_ushuffle(ours)
    with dask.config.set({key: "tasks"}):
        theirs = OPS[op](a, b)
        assert not through_ushuffle(theirs)
        assert_same(client, ours, theirs)
        named = OPS[op](a, b, shuffle_method="ushuffle")
        assert through_ushuffle(named)
        assert_same(client, named, theirs)


def test_broadcast_join_kept(client, registered):
    """A small side is broadcast with ushuffle as with Dask's methods:
    nothing shuffles."""
    a, b = inputs()
    b = b.repartition(npartitions=1)
    ours = dd.merge(a, b, on="k", shuffle_method="ushuffle")
    assert not through_ushuffle(ours)
    assert_same(client, ours, dd.merge(a, b, on="k", shuffle_method="tasks"))
    # 2 partitions against 64: Dask broadcasts the 2 (2 < log2(64) / 2).
    big = dd.from_pandas(frame(4000, 23), npartitions=64)
    small = a.repartition(npartitions=2)
    few = dd.merge(big, small, on="k", shuffle_method="ushuffle")
    assert not through_ushuffle(few)
    assert_same(client, few, dd.merge(big, small, on="k",
                                      shuffle_method="tasks"))


def test_untested_dask():
    """One line naming the tested and the found releases."""
    with pytest.raises(ImportError, match=r"^ushuffle.dask: tested with "
                       r"dask 2026\.8\.x, distributed 2026\.8\.x only; found "
                       r"dask 2022\.12\.1, distributed 2026\.8\.0 "
                       r"\(python/constraints.txt\)$"):
        ud._check_versions({"dask": "2022.12.1", "distributed": "2026.8.0"})


def test_unknown_option():
    with pytest.raises(TypeError, match="unknown options.*'pushsize'"):
        ud.register(pushsize=1)
