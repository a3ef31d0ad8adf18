"""Run a WSGI app (named by import string) under gunicorn, in the foreground.

The proxy uses gevent workers: its requests are long idle waits on the inference server, and
a greenlet per request lets one process hold hundreds of them. The API and the reference model
server use threads (short requests; the model serialises on its own lock anyway).
"""

from __future__ import annotations

from typing import Any

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
    "api": {"worker_class": "gthread", "workers": 1, "threads": 16, "timeout": 120,
            "graceful_timeout": 5},
    "model": {"worker_class": "gthread", "workers": 1, "threads": 8, "timeout": 0,
              "graceful_timeout": 5},
}


def run(app_path: str, bind: str | list[str], profile: str, **overrides: Any) -> None:
    # An override left unset (None, e.g. no --workers) keeps the profile's value.
    options = {**PROFILES[profile], "bind": bind, "accesslog": None, "errorlog": "-",
               "loglevel": "warning", "proc_name": f"polar-{profile}",
               **{k: v for k, v in overrides.items() if v is not None}}
    _App(app_path, options).run()

