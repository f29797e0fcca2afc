"""ushuffled deployed by a Dask cluster itself (docs/python.md).

install(client) registers a worker plugin: on each host, the first Dask
worker to take the host's lock starts one ushuffled (its data directory
in that worker's local directory, listening on the worker's address,
labelled with the host for replica placement) and stops it, removing
the directory, when that worker closes (with the cluster) or dies
(the kernel signals the orphan). The secret is made here, for this
cluster, and reaches the workers inside the plugin (Dask's own
connection, never a command line): ushuffled reads it from a file only
its user can read, the Dask workers' library is given it in memory.
The worker list comes from the workers themselves once they started.
"""
import ctypes
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from urllib.parse import urlsplit

from distributed.diagnostics.plugin import WorkerPlugin

import ushuffle

__all__ = ["install", "pids", "UshuffledPlugin"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # In the child, before exec: ushuffled gets SIGTERM when the Dask
    # worker that started it dies, even by SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG,
                                            signal.SIGTERM)


def _host(worker):
    return urlsplit(worker.address).hostname


class UshuffledPlugin(WorkerPlugin):
    """Starts (setup) and stops (teardown) its host's ushuffled on the
    worker that takes the host's lock; on every worker, hands the
    cluster's secret to the library."""

    name = "ushuffle-ushuffled"

    def __init__(self, secret, app, token, ushuffled, args, per_worker):
        self.secret, self.app, self.token = secret, app, token
        self.ushuffled, self.args = ushuffled, list(args)
        self.per_worker = per_worker
        self.proc = self.lock = self.dir = None
        self.address = None

    def setup(self, worker):
        ushuffle.auth_secret(self.app, self.secret)
        host = _host(worker)
        key = f"{host}-{worker.name}" if self.per_worker else host
        path = os.path.join(tempfile.gettempdir(),
                            f"ushuffle-dask-{self.token}-{key}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another worker of the host runs it
            return
        self.lock = (fd, path)
        self.dir = os.path.join(worker.local_directory, "ushuffled")
        os.makedirs(self.dir, exist_ok=True)
        secret_file = os.path.join(self.dir, "secret")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                          0o600), "wb") as f:
            f.write(self.secret)
        self.proc = subprocess.Popen(
            [self.ushuffled, f"--listen={host}:0", f"--dir={self.dir}",
             f"--secret-file={secret_file}", "--log-level=error",
             *self.args], stdout=subprocess.PIPE, text=True,
            preexec_fn=_die_with_parent)
        line = self.proc.stdout.readline()
        if not line.startswith("ushuffled: port "):
            self.teardown(worker)
            raise RuntimeError(f"ushuffle.deploy: ushuffled on {host} did "
                               f"not start (it printed {line!r})")
        port = int(line.split()[-1])
        self.address = f"{host}:{port}@{key}"
        worker._ushuffle_deploy = self  # for install()'s worker list

    def teardown(self, worker):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if self.lock is not None:
            fd, path = self.lock
            os.unlink(path)
            os.close(fd)
            self.lock = None


def _address(dask_worker):
    p = getattr(dask_worker, "_ushuffle_deploy", None)
    return None if p is None else (p.address, p.proc.pid)


# Dask recomputes lost outputs and keeps its own shuffles in memory: by
# default a commit waits for the page cache only (docs/operations.md,
# "Durability"), and writes go through it.
_EPHEMERAL = ("--sync=none", "--direct=0")


def install(client, replicas=2, app="dask", ushuffled=None, args=(),
            per_worker=False, durable=False):
    """Starts one ushuffled per host of client's Dask workers (per worker
    with per_worker: several on one host, as in a LocalCluster), each
    with its own data directory in a Dask worker's local directory, and
    returns the options of ushuffle.dask.shuffle that use them: workers
    (as "HOST:PORT@LABEL,..."), replicas and app.

    Commits are not synced (ushuffled --sync=none --direct=0): a map
    output survives its ushuffled being killed, not a host crash, after
    which its readers fail with USH_ENOTCOMMITTED and Dask reruns the
    maps; durable=True syncs every commit (--sync=full --direct=1).
    ushuffled: the program (default: the one the package was built
    with); args: further ushuffled options (--threads=2, ...; they come
    after those above and override them). They stop
    when the cluster closes. Workers that join later get the secret,
    and a ushuffled if their host has none, but are not in the list."""
    if ushuffled is None:
        from ushuffle import _paths
        ushuffled = _paths.USHUFFLED
    secret = secrets.token_hex(32).encode()
    ushuffle.auth_secret(app, secret)  # the client heartbeats
    # The scheduler drops each shuffle (ushuffle.dask.Lifetimes).
    client.run_on_scheduler(ushuffle.auth_secret, app, secret)
    args = (() if durable else _EPHEMERAL) + tuple(args)
    plugin = UshuffledPlugin(secret, app, secrets.token_hex(8), ushuffled,
                             args, per_worker)
    client.register_plugin(plugin, name=UshuffledPlugin.name)
    got = pids(client)
    if not got:
        raise RuntimeError("ushuffle.deploy: no ushuffled started (no "
                           "Dask workers?)")
    return {"workers": ",".join(sorted(got)), "replicas": replicas,
            "app": app}


def pids(client):
    """{address: process id} of the ushuffled install() started."""
    return dict(x for x in client.run(_address).values() if x)
