"""Fixtures of the Python tests: real ushuffled processes that require a
secret, and one real distributed.LocalCluster (2 worker processes)."""
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

# Set before the cluster starts: its worker processes inherit it, and
# every connection of the library proves it (docs/security.md). Kept
# where it is set: a Dask worker that imports a test module (to unpickle
# a hook defined there) imports this one too, and must not change it.
SECRET = os.environ.setdefault("USHUFFLE_SECRET", secrets.token_hex(24))


def ushuffled_path():
    from ushuffle import _paths
    return _paths.USHUFFLED


class Workers:
    """Two ushuffled on loopback, each over its own directory, with
    their metrics served on loopback too."""

    def __init__(self, root, extra=()):
        self.secret = os.path.join(root, "secret")
        with open(os.open(self.secret, os.O_WRONLY | os.O_CREAT, 0o600),
                  "w") as f:
            f.write(SECRET)
        self.root, self.extra = root, extra
        self.procs, self.dirs, self.metrics, self.ports = [], [], [], []
        for i in range(2):
            d = os.path.join(root, f"w{i}")
            os.makedirs(d)
            p, port, metrics = self._start(i, d, 0)
            self.procs.append(p)
            self.dirs.append(d)
            self.metrics.append(metrics)
            self.ports.append(port)
        self.addr = ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _start(self, i, d, port):
        with open(os.path.join(self.root, f"w{i}.log"), "a+") as log:
            start = log.tell()
            p = subprocess.Popen(
                [ushuffled_path(), f"--listen=127.0.0.1:{port}",
                 f"--dir={d}", "--threads=1", "--direct=0",
                 "--log-level=error", "--metrics=127.0.0.1:0",
                 f"--secret-file={self.secret}", *self.extra],
                stdout=subprocess.PIPE, stderr=log, text=True)
            line = p.stdout.readline()
            assert line.startswith("ushuffled: port "), line
            # Written to stderr before the port line to stdout.
            log.seek(start)
            m = re.search(r"metrics on \S+ \(port (\d+)\)", log.read())
        return (p, int(line.split()[-1]),
                f"http://127.0.0.1:{m.group(1)}/metrics")

    def restart_empty(self, i):
        """Worker i killed (SIGKILL) and started again on its port over
        an empty directory: what a Dask worker's restart does to the
        ushuffled it runs (ushuffle.deploy)."""
        self.procs[i].kill()
        self.procs[i].wait()
        self.procs[i].stdout.close()
        shutil.rmtree(self.dirs[i])
        os.makedirs(self.dirs[i])
        self.procs[i], _, self.metrics[i] = self._start(
            i, self.dirs[i], self.ports[i])

    def held(self):
        """The shuffles each worker holds (its ushuffled_shuffles gauge)."""
        out = []
        for url in self.metrics:
            with urllib.request.urlopen(url, timeout=30) as r:
                text = r.read().decode()
            out.append(int(re.search(r"^ushuffled_shuffles (\d+)$", text,
                                     re.M).group(1)))
        return out

    def stored(self):
        """Files the workers hold besides their lock, identity marker and
        commit logs, and a line for each worker that holds shuffles."""
        out = [f"{url}: {n} shuffles held"
               for url, n in zip(self.metrics, self.held()) if n]
        for d in self.dirs:
            for base, _, files in os.walk(d):
                out += [os.path.join(base, f) for f in files
                        if f not in ("ushuffled.lock", "ushuffled.id")
                        and not f.startswith("commit.")]
        return out

    def emptied(self, timeout=30):
        """Waits until the workers hold nothing (drops are asynchronous:
        the scheduler's plugin sends them when keys are forgotten); what
        stored() lists after timeout seconds."""
        end = time.monotonic() + timeout
        while self.stored() and time.monotonic() < end:
            time.sleep(0.05)
        return self.stored()

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            assert p.wait(timeout=30) == 0


@pytest.fixture(scope="session")
def workers():
    with tempfile.TemporaryDirectory(dir="/var/tmp") as root:
        w = Workers(root)
        try:
            yield w
        finally:
            w.stop()


@pytest.fixture(scope="session")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture
def registered(client, workers):
    """shuffle_method="ushuffle" through the two ushuffled."""
    import ushuffle.dask
    ushuffle.dask.register(workers=workers.addr, client=client)
    yield workers
    assert workers.emptied() == [], "a shuffle outlived its keys"
