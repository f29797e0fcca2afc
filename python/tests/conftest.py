"""Fixtures of the Python tests: real ushuffled processes that require a
secret, and one real distributed.LocalCluster (2 worker processes)."""
import os
import re
import secrets
import subprocess
import tempfile
import time
import urllib.request

import pytest

SECRET = secrets.token_hex(24)
# Set before the cluster starts: its worker processes inherit it, and
# every connection of the library proves it (docs/security.md).
os.environ["USHUFFLE_SECRET"] = SECRET


def ushuffled_path():
    from ushuffle import _paths
    return _paths.USHUFFLED


class Workers:
    """Two ushuffled on loopback, each over its own directory, with
    their metrics served on loopback too."""

    def __init__(self, root, extra=()):
        secret = os.path.join(root, "secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET)
        self.procs, self.dirs, self.metrics, addrs = [], [], [], []
        for i in range(2):
            d = os.path.join(root, f"w{i}")
            os.makedirs(d)
            with open(os.path.join(root, f"w{i}.log"), "w+") as log:
                p = subprocess.Popen(
                    [ushuffled_path(), "--listen=127.0.0.1:0", f"--dir={d}",
                     "--threads=1", "--direct=0", "--log-level=error",
                     "--metrics=127.0.0.1:0", f"--secret-file={secret}",
                     *extra],
                    stdout=subprocess.PIPE, stderr=log, text=True)
                line = p.stdout.readline()
                assert line.startswith("ushuffled: port "), line
                # Written to stderr before the port line to stdout.
                log.seek(0)
                m = re.search(r"metrics on \S+ \(port (\d+)\)", log.read())
            self.procs.append(p)
            self.dirs.append(d)
            self.metrics.append(f"http://127.0.0.1:{m.group(1)}/metrics")
            addrs.append(f"127.0.0.1:{int(line.split()[-1])}")
        self.addr = ",".join(addrs)

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
