"""docs/python.md's first example ("Dask in five lines"), run as it is
written: only the scheduler's address, the Parquet directory and the
`process` it leaves to the reader are filled in. Here on one host (a
dask-scheduler and two dask-worker processes); test_netns.py runs it on
two hosts (network namespaces)."""
import os
import re
import subprocess
import sys
import time

import pandas as pd

from test_dask import frame

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                   "python.md")


def example():
    """The first Python block after the "Dask in five lines" heading."""
    with open(DOC) as f:
        text = f.read()
    after = text[text.index("## Dask in five lines"):]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def events(path, n=20000):
    """A Parquet directory of events with a "user" column."""
    df = frame(n, 17).rename(columns={"k": "user"})
    os.makedirs(path)
    for i in range(4):  # written by pandas: no Dask scheduler involved
        df.iloc[i * n // 4:(i + 1) * n // 4].to_parquet(
            os.path.join(path, f"part.{i}.parquet"))
    return pd.read_parquet(path)


def run_example(address, path):
    """Runs the example, in an interpreter of its own as a user's
    script (in this one, a Client a fixture entered would stay the
    current one), against the scheduler at address and the events at
    path; checks that its result holds the events' rows (with `process`
    the identity) and returns it."""
    want = events(path)
    code = example()
    assert 'Client("scheduler:8786")' in code and '"events/"' in code, code
    code = code.replace("scheduler:8786", address).replace(
        '"events/"', repr(path + "/"))
    out = path + ".result.parquet"
    script = (f"def process(part):\n    return part\n\n{code}\n"
              f"assert opts['workers']\n"
              f"result.to_parquet({out!r})\nclient.close()\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    got = pd.read_parquet(out)
    key = ["user", "f", "i"]
    pd.testing.assert_frame_equal(
        got.sort_values(key, na_position="first").reset_index(drop=True),
        want.sort_values(key, na_position="first").reset_index(drop=True),
        check_dtype=False)
    return got


def wait_file(path, proc):
    for _ in range(600):
        if os.path.exists(path):
            return
        assert proc.poll() is None, f"{proc.args} exited {proc.returncode}"
        time.sleep(0.1)
    raise AssertionError(f"no {path} after 60 s")


def test_first_example_one_host(tmp_path):
    sched = str(tmp_path / "scheduler.json")
    procs = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
         "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
         "--scheduler-file", sched], stderr=subprocess.DEVNULL)]
    try:
        wait_file(sched, procs[0])
        for i in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker",
                 "--scheduler-file", sched, "--host", "127.0.0.1",
                 "--nthreads", "1", "--local-directory",
                 str(tmp_path / f"w{i}"), "--dashboard-address", ":0"],
                stderr=subprocess.DEVNULL))
        from distributed import Client
        with Client(scheduler_file=sched) as c:
            c.wait_for_workers(2, timeout=120)
            address = c.scheduler.address
        run_example(address, str(tmp_path / "events"))
        with Client(scheduler_file=sched) as c:
            c.shutdown()
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
