"""Runs Dask's own test_shuffle.py and test_multi.py (as they ship in the
installed dask wheel) with their shuffle_method fixture set to "ushuffle"
(conftest.py beside this file), on a local scheduler or a distributed
client:

    python run.py WORKDIR local|distributed [pytest args...]

The test files and conftest.py are copied to WORKDIR/MODE (Dask's own
conftest, whose fixture would win over ours, stays behind), and only the
tests that take the shuffle_method fixture run (the others do not
shuffle, or name their method), and not those Dask marks slow.
"""
import os
import shutil
import sys

import dask.dataframe.tests as dask_tests
import pytest

FILES = ("test_shuffle.py", "test_multi.py")


def main():
    work, mode, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if mode not in ("local", "distributed"):
        sys.exit(f"run.py: mode {mode!r}: local or distributed")
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.join(work, mode)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    src = os.path.dirname(dask_tests.__file__)
    for f in FILES:
        shutil.copy(os.path.join(src, f), d)
    shutil.copy(os.path.join(here, "conftest.py"), d)
    os.environ["USHUFFLE_DASK_SUITE"] = mode
    # Dask marks its long tests slow and runs them only on request (-m
    # slow runs them here too).
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs",
                          "-m", "not slow", "--rootdir", d, *rest, d]))


if __name__ == "__main__":
    main()
