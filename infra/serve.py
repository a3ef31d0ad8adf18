"""Run a WSGI app (named by import string) under gunicorn, in the foreground.

The proxy uses gevent workers: its requests are long idle waits on the inference server, and
a greenlet per request lets one process hold hundreds of them. The API does too, so that slow
clients cost it a connection each rather than one of a few threads (infra/gevent_worker.py).
The reference model server uses threads (it serialises on its own lock anyway, and a forward
pass would stall a gevent loop; it listens on loopback or a private network).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from gunicorn.app.base import BaseApplication


class _App(BaseApplication):
    def __init__(self, app_path: str, options: dict[str, Any]) -> None:
        self.app_path = app_path
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings and value is not None:
                self.cfg.set(key, value)

    def load(self) -> Any:
        from gunicorn.util import import_app

        return import_app(self.app_path)


PROFILES: dict[str, dict[str, Any]] = {
    "proxy": {"worker_class": "infra.gevent_worker.OneWritePyWSGIWorker", "workers": 2, "worker_connections": 2000,
              "timeout": 0, "keepalive": 75, "graceful_timeout": 10},
    # The API on gevent too: a greenlet per connection, so slow clients (infra/gevent_worker.py)
    # cost a connection each, not one of a few threads.
    "api": {"worker_class": "infra.gevent_worker.OneWritePyWSGIWorker", "workers": 1, "worker_connections": 1000,
            "timeout": 120, "graceful_timeout": 5},
    # keepalive: longer than the proxy's idle reuse limit (proxy/upstream/keepalive.py IDLE_SECONDS,
    # 4 s): with gunicorn's default 2 s, a connection idle 2-4 s could be closed just as the proxy
    # sent a call on it -- a reset the proxy must not retry (it may have been sampled), a 502.
    "model": {"worker_class": "infra.http_errors.JsonErrorThreadWorker", "workers": 1, "threads": 8, "timeout": 0,
              "graceful_timeout": 5, "keepalive": 75},
}


def slow_client_limits(settings: Any) -> None:
    """Settings.http_head_seconds / http_idle_seconds for the gevent workers about to be forked."""
    from infra.gevent_worker import configure

    configure(settings.http_head_seconds, settings.http_idle_seconds)


def run(app_path: str, bind: str | list[str], profile: str, **overrides: Any) -> None:
    # An override left unset (None, e.g. no --workers) keeps the profile's value.
    # No control socket: gunicorn 27 puts every master's at one path (~/.gunicorn/gunicorn.ctl),
    # so one server stopping removed it from under every other stack's on the machine.
    options = {**PROFILES[profile], "bind": bind, "accesslog": None, "errorlog": "-",
               "loglevel": "warning", "proc_name": f"polar-{profile}", "control_socket_disable": True,
               **{k: v for k, v in overrides.items() if v is not None}}
    _App(app_path, options).run()


METRICS_PREFIX = "polar-proxy-metrics-"


def _remove_orphaned_metrics_folders() -> None:
    """Folders of instances that were killed (SIGKILL leaves no chance to clean up)."""
    for path in Path(tempfile.gettempdir()).glob(f"{METRICS_PREFIX}*-*"):
        pid = path.name[len(METRICS_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def metrics_folder() -> Iterator[Callable[[Any, Any], None]]:
    """A fresh PROMETHEUS_MULTIPROC_DIR for one instance's workers (proxy/metrics.py), removed when
    the instance stops; yields gunicorn's ``child_exit`` hook, which drops a dead worker's live
    gauges (its counters stay: totals survive worker restarts). Set before any worker imports
    prometheus-client, which picks its storage at import."""
    _remove_orphaned_metrics_folders()
    folder = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")  # named by the gunicorn master's pid
    previous = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder

    def child_exit(server: Any, worker: Any) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, folder)

    owner = os.getpid()
    try:
        yield child_exit
    finally:
        # A gunicorn worker leaves through here too (its exit unwinds the master's stack it was
        # forked in): only the master removes the folder and restores the variable -- a worker
        # still writes its last events there at exit (ProxyMetrics.flush, atexit); without the
        # variable prometheus-client failed with a TypeError and the events were lost.
        if os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)
            if previous is None:
                os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            else:
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = previous
