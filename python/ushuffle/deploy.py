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
    idempotent = True  # a second install() keeps the first's ushuffled

    def __init__(self, secret, app, token, ushuffled, args, per_worker,
                 port=0):
        self.secret, self.app, self.token = secret, app, token
        self.ushuffled, self.args = ushuffled, list(args)
        self.per_worker, self.port = per_worker, port
        self.proc = self.lock = self.dir = None
        self.address = None

    async def setup(self, worker):
        ushuffle.auth_secret(self.app, self.secret)
        host = _host(worker)
        key = f"{host}-{worker.name}" if self.per_worker else host
        # The port this host's ushuffled had before (its Dask worker was
        # restarted): the scheduler keeps it, so the clients' list holds.
        where = ["ushuffle-deploy", self.token, key]
        port = self.port or await worker.scheduler.get_metadata(
            keys=where, default=0)
        if self._start(worker, host, key, port):
            await worker.scheduler.set_metadata(keys=where,
                                                value=self._port)

    def _start(self, worker, host, key, port):
        """Starts the ushuffled of key on port (0: any) if this worker
        takes key's lock; whether it did."""
        path = os.path.join(tempfile.gettempdir(),
                            f"ushuffle-dask-{self.token}-{key}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another worker of the host runs it
            return False
        self.lock = (fd, path)
        self.dir = os.path.join(worker.local_directory, "ushuffled")
        os.makedirs(self.dir, exist_ok=True)
        secret_file = os.path.join(self.dir, "secret")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                          0o600), "wb") as f:
            f.write(self.secret)
        log = os.path.join(self.dir, "ushuffled.log")
        with open(log, "w+") as err:
            self.proc = subprocess.Popen(
                [self.ushuffled, f"--listen={host}:{port}",
                 f"--dir={self.dir}", f"--secret-file={secret_file}",
                 "--log-level=error", *self.args], stdout=subprocess.PIPE,
                stderr=err, text=True, preexec_fn=_die_with_parent)
            line = self.proc.stdout.readline()
            if not line.startswith("ushuffled: port "):
                self.proc.wait()
                err.seek(0)
                why = " ".join(err.read().split()[-60:]) or \
                    f"exit status {self.proc.returncode}"
                self.teardown(worker)
                raise RuntimeError(f"ushuffle.deploy: ushuffled on "
                                   f"{host}:{port} did not start: {why}")
        self._port = int(line.split()[-1])
        self.address = f"{host}:{self._port}@{key}"
        worker._ushuffle_deploy = self  # for install()'s worker list
        return True

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
    if p is None or p.proc is None:  # none here, or stopped
        return None
    return p.address, p.proc.pid


def _deployment(app, offer, dask_scheduler=None):
    """On the scheduler: app's deployment (its secret and token), the
    offered one if app has none yet. One round trip: two clients that
    install() at once agree on the first."""
    kept = dask_scheduler.get_metadata(["ushuffle-deploy", "apps", app],
                                       default=None)
    if kept is None:
        dask_scheduler.set_metadata(["ushuffle-deploy", "apps", app], offer)
        kept = offer
    return kept


# Dask recomputes lost outputs and keeps its own shuffles in memory: by
# default a commit waits for the page cache only (docs/operations.md,
# "Durability"), and writes go through it.
_EPHEMERAL = ("--sync=none", "--direct=0")


def install(client, replicas=None, app="dask", ushuffled=None, args=(),
            per_worker=False, durable=False, port=0):
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
    and a ushuffled if their host has none, but are not in the list.

    replicas: default 2 where the workers span two hosts or more, else 1.
    port: the port every ushuffled listens on (default 0: any; a
    restarted Dask worker's ushuffled comes back on the port its host's
    had, which the scheduler keeps). install() again, from this client or
    another, changes nothing and returns the same options: the secret
    and the deployment are the scheduler's, per app."""
    if ushuffled is None:
        from ushuffle import _paths
        ushuffled = _paths.USHUFFLED
    # The cluster's secret and token for app: made by the first install(),
    # kept by the scheduler, handed to every later one (a second client).
    secret, token = client.run_on_scheduler(
        _deployment, app, (secrets.token_hex(32).encode(),
                           secrets.token_hex(8)))
    ushuffle.auth_secret(app, secret)  # the client heartbeats
    # The scheduler drops each shuffle (ushuffle.dask.Lifetimes).
    client.run_on_scheduler(ushuffle.auth_secret, app, secret)
    args = (() if durable else _EPHEMERAL) + tuple(args)
    plugin = UshuffledPlugin(secret, app, token, ushuffled, args,
                             per_worker, port)
    # Idempotent: a second install() leaves the running ushuffled alone.
    client.register_plugin(plugin, name=f"{UshuffledPlugin.name}-{app}")
    got = pids(client)
    if not got:
        raise RuntimeError("ushuffle.deploy: no ushuffled started (no "
                           "Dask workers?)")
    if replicas is None:  # 2 where there are two hosts to hold them
        replicas = 2 if len({w.split("@")[1] for w in got}) > 1 else 1
    return {"workers": ",".join(sorted(got)), "replicas": replicas,
            "app": app}


def pids(client):
    """{address: process id} of the ushuffled install() started."""
    return dict(x for x in client.run(_address).values() if x)
