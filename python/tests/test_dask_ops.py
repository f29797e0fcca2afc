"""Dask's own operations with shuffle="ushuffle" (ushuffle.dask.register())
on a real LocalCluster and real ushuffled: each result equals the same
operation through shuffle="tasks", partition by partition."""
import dask
import dask.dataframe as dd
import pytest

import ushuffle.dask as ud
from test_dask import assert_same, frame

# Each operation once with the shuffle method given (None: from the
# config only: sort_values takes none in Dask 2022.12).
OPS = {
    "shuffle": (lambda a, b, **kw: a.shuffle("k", npartitions=5, **kw)),
    "set_index": (lambda a, b, **kw: a.set_index("k", npartitions=4, **kw)),
    "merge": (lambda a, b, **kw: dd.merge(a, b, on="k", npartitions=4,
                                          broadcast=False, **kw)),
    "groupby": (lambda a, b, **kw: a.groupby("k").agg(
        {"f": "sum", "i": "max"}, split_out=3, **kw)),
    "sort_values": (lambda a, b, **kw: a.sort_values("f")),
}


def inputs():
    a = dd.from_pandas(frame(4000, 21), npartitions=4)
    b = dd.from_pandas(frame(1500, 22)[["k", "f"]].rename(columns={"f": "g"}),
                       npartitions=3)
    return a, b


def through_ushuffle(ddf):
    return any(str(k).startswith("ushuffle-reduce-") for k in ddf.dask.layers)


@pytest.mark.parametrize("op", sorted(OPS))
def test_operation(client, registered, op):
    """The method from the config, and named (sort_values takes none):
    the tasks method's result either way. Both give one graph but for
    df.shuffle, where a named method skips the _partitions column."""
    a, b = inputs()
    with dask.config.set(shuffle="ushuffle"):
        cases = [(OPS[op](a, b), None)]
    with dask.config.set(shuffle="tasks"):
        cases[0] = (cases[0][0], OPS[op](a, b))
    if op != "sort_values":
        named = OPS[op](a, b, shuffle="ushuffle")
        if named._name != cases[0][0]._name:
            cases.append((named, OPS[op](a, b, shuffle="tasks")))
    for ours, theirs in cases:
        assert through_ushuffle(ours) and not through_ushuffle(theirs)
        assert_same(client, ours, theirs)
    assert len(cases) == 1 + (op == "shuffle")


def test_untested_dask(monkeypatch):
    monkeypatch.setattr(dask, "__version__", "2023.1.0")
    with pytest.raises(RuntimeError, match="tested with dask and "
                       "distributed 2022.12.x only; found dask 2023.1.0"):
        ud.register()


def test_unknown_option():
    with pytest.raises(TypeError, match="unknown options.*'pushsize'"):
        ud.register(pushsize=1)
