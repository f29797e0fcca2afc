"""Dask's test_shuffle.py and test_multi.py with shuffle_method="ushuffle"
(run.py copies them here). USHUFFLE_DASK_SUITE says where they compute:

local        Dask's local schedulers (the tests' own choice, mostly
             "sync"), ushuffle's disk target under a temporary directory;
distributed  a LocalCluster of 2 worker processes and a Client, the tests'
             local schedulers sent to it, ushuffled deployed on it by
             ushuffle.dask.install() (replicas 1: one host).

Only tests that take the shuffle_method fixture run (the others name
their method or do not shuffle). EXCLUDED lists, by name, those that
cannot pass with any method but Dask's own, and why.
"""
import fnmatch
import os
import shutil
import tempfile

import dask
import dask.base
import pytest
from dask.conftest import pytest_collection_modifyitems as _dask_modify
from dask.conftest import xfail  # noqa: F401 (a fixture the tests use)

import ushuffle.dask as ud

MODE = os.environ.get("USHUFFLE_DASK_SUITE", "local")

# Test name (a pattern of fnmatch, parameters included): why it cannot
# pass with "ushuffle".
EXCLUDED = {
    "test_dataframe_shuffle_on_arg[ushuffle-*-True]":
        "asserts that only shuffle_method='tasks' changes the index with "
        "ignore_index=True; ushuffle numbers each map's rows from 0 as "
        "tasks does (python/tests/test_dask_fidelity.py::test_ignore_index "
        "holds it to tasks' result)",
}


@pytest.fixture(params=["ushuffle"])
def shuffle_method(request):
    with dask.config.set({"dataframe.shuffle.method": "ushuffle"}):
        yield request.param


def pytest_collection_modifyitems(config, items):
    _dask_modify(config, items)
    keep, drop = [], []
    for item in items:
        if "shuffle_method" not in getattr(item, "fixturenames", ()):
            drop.append(item)
            continue
        # "[" is literal in the names, a class in fnmatch.
        why = next((w for p, w in EXCLUDED.items() if fnmatch.fnmatchcase(
            item.name, p.replace("[", "[[]"))), None)
        if why:
            item.add_marker(pytest.mark.skip(reason=f"ushuffle: {why}"))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.fixture(scope="session", autouse=True)
def target():
    root = tempfile.mkdtemp(prefix="ushuffle-dask-suite-", dir="/var/tmp")
    try:
        if MODE == "local":
            ud.register(dir=root)
            yield
        else:
            yield from _distributed()
    finally:
        left = os.listdir(root)
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"shuffles left behind: {left}"


def _distributed():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, \
            Client(cluster) as client:
        ud.register(client=client, **ud.install(client, replicas=1))
        own = dask.base.get_scheduler

        def to_client(get=None, scheduler=None, collections=None, cls=None):
            # The tests ask for "sync" (assert_eq's default) or none.
            if get is None and (scheduler is None or scheduler in (
                    "sync", "synchronous", "single-threaded", "threads")):
                return client.get
            return own(get, scheduler, collections, cls)

        dask.base.get_scheduler = to_client
        try:
            yield
        finally:
            dask.base.get_scheduler = own
