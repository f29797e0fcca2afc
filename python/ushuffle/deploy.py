"""ushuffled deployed by a Dask cluster itself (docs/python.md).

install(client) registers worker plugins: on each host, the first Dask
worker to take the host's lock (an abstract Unix socket: it goes with
its process, nothing is left on disk) starts one ushuffled (its data
directory in that worker's local directory, listening on the worker's
address, labelled with the host for replica placement) and stops it,
removing the directory, when that worker closes (with the cluster) or
dies (the kernel signals the orphan). That deployment is the cluster's:
one per cluster, whoever installs it.

Each application (a client's install(); or, named, an `app` several
clients share) has a secret of its own, made on the scheduler, which
hands it to the workers inside a worker plugin of that application
(Dask's own connection, never a command line): ushuffled reads it from
its --secrets-dir (a file per application, mode 0600, read at each
connection), the Dask workers' library is given it in memory. When the
application's last client is gone (closed, or lost: killed), the
scheduler waits the workers' --app-ttl, the time after which they drop
its data, then removes the application's plugin: its secret files and
in-memory secrets go. The worker list comes from the workers themselves
once they started.
"""
import asyncio
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
from urllib.parse import urlsplit

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

import ushuffle

__all__ = ["install", "pids", "UshuffledPlugin", "AppPlugin",
           "Deployments"]

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
    worker that takes the host's lock. The applications' secrets come
    from their own plugins (AppPlugin)."""

    name = "ushuffle-ushuffled"
    idempotent = True  # a second install() keeps the first's ushuffled

    def __init__(self, token, ushuffled, args, per_worker, port=0):
        self.token = token
        self.ushuffled, self.args = ushuffled, list(args)
        self.per_worker, self.port = per_worker, port
        self.proc = self.lock = self.dir = self.apps = None
        self.address = None

    async def setup(self, worker):
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
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Abstract (Linux): held while this process lives, and no
            # file to remove however it ends.
            lock.bind(f"\0ushuffle-dask-{self.token}-{key}")
        except OSError:
            lock.close()  # another worker of the host runs it
            return False
        self.lock = lock
        self.dir = os.path.join(worker.local_directory, "ushuffled")
        self.apps = os.path.join(self.dir, "apps")
        os.makedirs(self.apps, mode=0o700, exist_ok=True)
        for app, secret in _APPS.items():
            _write_secret(self.apps, app, secret)
        # Only the applications' own secrets: not one the Dask worker's
        # environment holds for every application.
        env = {k: v for k, v in os.environ.items()
               if k != "USHUFFLE_SECRET"}
        log = os.path.join(self.dir, "ushuffled.log")
        with open(log, "w+") as err:
            self.proc = subprocess.Popen(
                [self.ushuffled, f"--listen={host}:{port}",
                 f"--dir={self.dir}", f"--secrets-dir={self.apps}",
                 "--log-level=error", *self.args], stdout=subprocess.PIPE,
                stderr=err, text=True, preexec_fn=_die_with_parent, env=env)
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
        worker._ushuffle_deploy = self  # for install()'s list, AppPlugin
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
            self.dir = self.apps = None
        if self.lock is not None:
            self.lock.close()
            self.lock = None


# The applications' secrets this process was given (AppPlugin): a
# worker sets its plugins up concurrently, so a ushuffled started after
# an application's plugin ran gets the secrets from here.
_APPS = {}


def _write_secret(apps, app, secret):
    """app's file in the --secrets-dir apps: written aside and renamed,
    as ushuffled reads it at each connection."""
    tmp = os.path.join(apps, f".{app}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              "wb") as f:
        f.write(secret)
    os.rename(tmp, os.path.join(apps, app))


def _running(worker):
    """The deployment of the ushuffled this worker runs, or None (none
    here, or stopped)."""
    p = getattr(worker, "_ushuffle_deploy", None)
    return p if p is not None and p.proc is not None else None


def _apps_dir(worker):
    """The --secrets-dir of the ushuffled this worker runs, or None."""
    p = _running(worker)
    return p.apps if p is not None else None


class AppPlugin(WorkerPlugin):
    """One application's secret on every Dask worker: in the library's
    memory, and, where the worker runs its host's ushuffled, as the
    application's file in its --secrets-dir. Removed (teardown) when the
    scheduler retires the application."""

    idempotent = True  # install() again from its client changes nothing

    def __init__(self, app, secret):
        self.app, self.secret = app, secret
        self.name = f"ushuffle-app-{app}"

    def setup(self, worker):
        ushuffle.auth_secret(self.app, self.secret)
        _APPS[self.app] = self.secret
        apps = _apps_dir(worker)
        if apps is not None:
            _write_secret(apps, self.app, self.secret)

    def teardown(self, worker):
        ushuffle.auth_secret(self.app, None)
        _APPS.pop(self.app, None)
        apps = _apps_dir(worker)
        if apps is not None:
            try:
                os.unlink(os.path.join(apps, self.app))
            except FileNotFoundError:
                pass


class Deployments(SchedulerPlugin):
    """On the scheduler: the cluster's deployment (its token, once) and
    its applications (app: secret, and the clients that use it). When an
    application's last client is removed, its secret is retired once the
    workers' --app-ttl has passed (the time after which they drop the
    data of an application they no longer hear from): its AppPlugin is
    unregistered on the workers, its secret forgotten here. A client
    that comes back (the same id) before then keeps it."""

    name = "ushuffle-deploy"
    idempotent = True

    def __init__(self, ttl_s):
        self.ttl_s = ttl_s
        self.token = None
        self.apps = {}  # app: (secret, set of client ids)
        self.own = {}  # client id: the app install() named for it
        self.retiring = {}  # app: the timer's handle

    async def start(self, scheduler):
        self.scheduler = scheduler

    def application(self, client, app, offer):
        """The deployment's token and app's secret (app: None for a new
        application of client's own, one per client), offered ones if
        there are none yet; (token, app, secret)."""
        self.token = self.token or offer[0]
        if app is None:
            app = self.own.setdefault(client, f"dask-{offer[1]}")
        secret, who = self.apps.setdefault(app, (offer[2].encode(), set()))
        who.add(client)
        handle = self.retiring.pop(app, None)
        if handle is not None:
            handle.cancel()
        return self.token, app, secret

    def add_client(self, scheduler, client):
        for app, (_, who) in self.apps.items():
            if client in who and app in self.retiring:
                self.retiring.pop(app).cancel()

    def remove_client(self, scheduler, client):
        loop = asyncio.get_running_loop()
        for app, (_, who) in self.apps.items():
            # Its last client still connected (clients that left earlier
            # are still in who: one may come back).
            live = {c for c in who if c != client
                    and c in scheduler.clients}
            if client in who and not live and app not in self.retiring:
                self.retiring[app] = loop.call_later(
                    self.ttl_s, lambda a=app: asyncio.ensure_future(
                        self.retire(a)))

    async def retire(self, app):
        self.retiring.pop(app, None)
        if app not in self.apps:
            return
        live = {c for c in self.apps[app][1] if c in self.scheduler.clients}
        if live:  # a client of it came back
            self.apps[app] = (self.apps[app][0], live)
            return
        del self.apps[app]
        self.own = {c: a for c, a in self.own.items() if a != app}
        ushuffle.auth_secret(app, None)
        try:
            await self.scheduler.unregister_worker_plugin(
                None, f"ushuffle-app-{app}")
        except Exception:  # noqa: BLE001 (no plugin: nothing to remove)
            pass


def _address(dask_worker):
    p = _running(dask_worker)
    return (p.address, p.proc.pid) if p is not None else None


def _application(client, app, offer, dask_scheduler=None):
    """On the scheduler: (token, app, secret), from its Deployments."""
    return dask_scheduler.plugins[Deployments.name].application(
        client, app, offer)


# Dask recomputes lost outputs and keeps its own shuffles in memory: by
# default a commit waits for the page cache only (docs/operations.md,
# "Durability"), and writes go through it.
_EPHEMERAL = ("--sync=none", "--direct=0")
# A Dask host's ushuffled holds what its maps push until the reducers
# read it, through the page cache: 8 MiB of registered memory per thread
# (ushuffled's default is 32) keeps eight 1 MiB frames in flight per
# thread and cuts its RSS from 75 to about 30 MiB (bench/dask_shuffle.py:
# peak RSS per host, Dask worker and ushuffled, against p2p's worker).
# One per Dask worker (per_worker) runs one thread, as the worker does.
_LEAN = ("--pool=8m",)
# ushuffled's default --app-ttl, in seconds.
_APP_TTL_S = 300


def install(client, replicas=None, app=None, ushuffled=None, args=(),
            per_worker=False, durable=False, port=0, app_ttl_s=None):
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
    when the cluster closes. Workers that join later get the secrets,
    and a ushuffled if their host has none, but are not in the list.

    replicas: default 2 where the workers span two hosts or more, else 1.
    port: the port every ushuffled listens on (default 0: any; a
    restarted Dask worker's ushuffled comes back on the port its host's
    had, which the scheduler keeps). The first install() on a cluster
    starts the ushuffled; later ones, from any client, use them.

    app: None (default) makes this client an application of its own,
    named "dask-<random>", with a secret of its own (install() again
    from the same client returns the same); a name given is shared by
    every client that gives it. The secret is made on the scheduler and
    retired app_ttl_s seconds after the application's last client is
    gone (default: ushuffled's --app-ttl, 300 s; given, the first
    install() also passes it to the ushuffled it starts)."""
    if ushuffled is None:
        from ushuffle import _paths
        ushuffled = _paths.USHUFFLED
    ttl = [f"--app-ttl={int(app_ttl_s * 1000)}"] if app_ttl_s else []
    client.register_plugin(Deployments(app_ttl_s or _APP_TTL_S),
                           name=Deployments.name)
    # The cluster's token (made by the first install()) and this
    # application's name and secret: the scheduler's, one round trip.
    token, app, secret = client.run_on_scheduler(
        _application, client.id, app,
        (secrets.token_hex(8), secrets.token_hex(6),
         secrets.token_hex(32)))
    ushuffle.auth_secret(app, secret)  # the client heartbeats
    # The scheduler drops each shuffle (ushuffle.dask.Lifetimes).
    client.run_on_scheduler(ushuffle.auth_secret, app, secret)
    args = (() if durable else _EPHEMERAL) + _LEAN + \
        (("--threads=1",) if per_worker else ()) + tuple(ttl) + tuple(args)
    # Idempotent: a second install() leaves the running ushuffled alone.
    client.register_plugin(UshuffledPlugin(token, ushuffled, args,
                                           per_worker, port))
    app_plugin = AppPlugin(app, secret)
    client.register_plugin(app_plugin, name=app_plugin.name)
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
