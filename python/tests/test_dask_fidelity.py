"""ushuffle.dask keeps what Dask's tasks shuffle keeps: categories,
empty partitions, row order, the index, the keys Dask accepts, and
exceptions that cross processes as themselves."""
import pickle

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.dataframe.utils import clear_known_categories

import ushuffle
import ushuffle.dask as ud
from test_dask import assert_same, frame, parts


def cats(i):
    """Partitions whose categorical c has categories of its own."""
    own = [["a", "b"], ["c", "b"], ["d"], ["e", "a"]][i]
    k = np.arange(6) + 10 * i
    return pd.DataFrame({"k": k, "c": pd.Categorical(
        [own[j % len(own)] for j in range(6)], categories=own)})


@pytest.mark.parametrize("known", [True, False])
def test_categories_per_partition(client, registered, known):
    """Categories unioned in map order; the empty output partitions (20
    of them for 24 rows) are map 0's empty piece, categories included,
    whether the meta knows the categories or holds Dask's placeholder."""
    meta = cats(0).iloc[:0]
    ddf = dd.from_map(cats, range(4), meta=meta if known else
                      clear_known_categories(meta))
    got = assert_same(client, ud.shuffle(ddf, "k", npartitions=20),
                      ddf.shuffle("k", npartitions=20, shuffle_method="tasks"))
    assert any(len(p) == 0 for p in got)
    assert any(len(p.c.cat.categories) > 2 for p in got)


def test_order_drop_duplicates_keep_last(client, registered):
    """Rows of an output partition in map order, then row order: with 16
    KiB push buffers each partition arrives in many batches interleaved
    across maps, and keep="last" must keep the row tasks keeps."""
    ddf = dd.from_pandas(frame(30000, 41, skew=True), npartitions=6)
    ours = ud.shuffle(ddf, "k", npartitions=3, workers=registered.addr,
                      push_size=16384)
    theirs = ddf.shuffle("k", npartitions=3, shuffle_method="tasks")
    pd.testing.assert_frame_equal(
        ours.drop_duplicates(subset="k", keep="last").compute(),
        theirs.drop_duplicates(subset="k", keep="last").compute())


def test_ignore_index(client, registered):
    ddf = dd.from_pandas(frame(5000, 42), npartitions=4)
    theirs = ddf.shuffle("k", npartitions=6, ignore_index=True,
                         shuffle_method="tasks")
    for ours in (ud.shuffle(ddf, "k", npartitions=6, ignore_index=True),
                 ddf.shuffle("k", npartitions=6, ignore_index=True,
                             shuffle_method="ushuffle")):
        assert isinstance(ours._meta.index, pd.RangeIndex)
        got = assert_same(client, ours, theirs)
        assert not any(p.index.is_unique for p in got if len(p) > 100)


def labelled():
    """A frame with an int label, a tuple label and a named index."""
    n = 2000
    rng = np.random.default_rng(43)
    pdf = pd.DataFrame({"k": rng.integers(0, 50, n), 0: rng.integers(0, 9, n),
                        ("x", "y"): rng.integers(0, 7, n),
                        "v": rng.random(n)},
                       index=pd.Index(rng.integers(0, 30, n), name="idx"))
    return dd.from_pandas(pdf, npartitions=3, sort=False)


# on as ushuffle.dask.shuffle takes it, and as tasks does the same.
ONS = {
    "series": (lambda d: d.k + 1, lambda d: d.k + 1),
    "index": (lambda d: d.index, lambda d: d.index),
    "index name": (lambda d: "idx", lambda d: "idx"),
    "int label": (lambda d: 0, lambda d: 0),
    "tuple label": (lambda d: ("x", "y"), lambda d: [("x", "y")]),
    "labels": (lambda d: ["k", 0], lambda d: ["k", 0]),
}


def graphs_sent(client):
    """The graphs this client sent its scheduler (the scheduler's
    update-graph events on the client's topic): what this test computed,
    not what other clients, or earlier tests' work still settling, did."""
    return {msg["stimulus_id"] for _, msg in client.get_events(client.id)
            if msg.get("action") == "update-graph"}


@pytest.mark.parametrize("kind", sorted(ONS))
def test_on(client, registered, kind):
    ddf = labelled()
    ours_on, tasks_on = ONS[kind]
    before = graphs_sent(client)
    ours = ud.shuffle(ddf, ours_on(ddf), npartitions=4)
    assert graphs_sent(client) == before, "computed while building"
    assert_same(client, ours, ddf.shuffle(tasks_on(ddf), npartitions=4,
                                          shuffle_method="tasks"))


def test_graphs_sent_counts_this_client_only(client):
    """test_on's check sees a compute of its own client, and not one of
    another client on the same scheduler (which a count of the
    scheduler's transitions did: issue 38, item 9)."""
    from distributed import Client
    ddf = labelled()
    before = graphs_sent(client)
    with Client(client.scheduler.address) as other:
        other.compute(ddf.k.sum()).result()
    assert graphs_sent(client) == before
    client.compute(ddf.k.sum()).result()
    assert len(graphs_sent(client) - before) == 1


def test_unknown_label_short_message():
    wide = dd.from_pandas(pd.DataFrame({f"c{i}": [i] for i in range(500)}),
                          npartitions=1)
    with pytest.raises(KeyError, match=r"no column \['nope'\].*500 in all") \
            as e:
        ud.shuffle(wide, ["c1", "nope"])
    assert len(str(e.value)) < 300


def test_row_larger_than_push_buffer(client, registered):
    pdf = frame(3000, 44)
    pdf.loc[pdf.index[7], "s"] = "z" * 200000  # 12 push buffers
    ddf = dd.from_pandas(pdf, npartitions=3)
    got = assert_same(client, ud.shuffle(ddf, "k", npartitions=4,
                                         workers=registered.addr,
                                         push_size=16384),
                      ddf.shuffle("k", npartitions=4, shuffle_method="tasks"))
    assert sum((p.s.str.len() == 200000).sum() for p in got) == 1


def raises(code, workers):
    """On a Dask worker: a real library error of code."""
    if code == -4004:  # a status whose shuffle was dropped
        with ushuffle.Ring() as ring:
            with ushuffle.Writer(ring, 99, 0, 1, 1, workers=workers,
                                 app="dask") as w:
                w.write(0, b"r")
                st = w.commit()
        ushuffle.shuffle_drop(workers, "dask", 99)
        ushuffle.Reader(0, [st])
    ushuffle.app_heartbeat("127.0.0.1:1", "dask")  # ECONNREFUSED


@pytest.mark.parametrize("code,cls", [(-4004, ushuffle.NotCommitted),
                                      (-111, ushuffle.Error)])
def test_exceptions_cross_processes(client, registered, code, cls):
    with pytest.raises(cls) as e:
        client.submit(raises, code, registered.addr, pure=False).result()
    assert type(e.value) is cls and e.value.code == code
    assert e.value.errno == (-code if code > -4000 else None)
    assert e.value.name == ("USH_ENOTCOMMITTED" if code == -4004
                            else "ECONNREFUSED")
    again = pickle.loads(pickle.dumps(e.value))
    assert (type(again), again.args, again.code) == \
        (cls, e.value.args, code)
