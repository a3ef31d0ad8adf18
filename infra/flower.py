"""Flower on this project's broker, with every stage queue listed and nothing served unauthenticated.

Flower lists the queues its known workers consume, falling back to the app's declared queues only
when it knows no worker at all (mher/flower#335): a stage whose fleet is down -- the moment its
backlog matters most -- vanishes from the Broker page and from ``/api/queues/length``. Here the
declared stage queues are always listed beside whatever the workers consume. Flower 2.2 also
serves ``/metrics`` (worker names, task names and counts) to anyone, whatever its auth: here it
asks for the same credentials as every other page (a Prometheus scrape gives ``basic_auth``).
Credentials with a non-ASCII character made Flower's check fail with a 500 (``hmac.compare_digest``
takes ASCII strings only): they are a 401 like any other wrong ones.
Task events: workers start without them (they cost CPU per task); Flower's own ``enable_events``
(on by default) turns them on in every worker it sees within seconds of starting.
"""

from __future__ import annotations

from typing import Any


def patch_flower() -> None:
    """Apply the changes (``polar flower`` calls this before starting Flower)."""
    list_every_declared_queue()
    authenticate_metrics()
    refuse_non_ascii_credentials()


def list_every_declared_queue() -> None:
    """Patch Flower's queue listing (Flower 2.2's ``BaseHandler.get_active_queue_names``)."""
    from flower.views import BaseHandler

    if getattr(BaseHandler.get_active_queue_names, "polar", False):
        return

    def get_active_queue_names(self: Any) -> list[str]:
        queues = {q["name"] for info in self.application.workers.values() for q in info.get("active_queues", [])}
        queues |= {q.name for q in self.capp.conf.task_queues or [] if q.name}
        return sorted(queues)

    get_active_queue_names.polar = True  # type: ignore[attr-defined]
    BaseHandler.get_active_queue_names = get_active_queue_names


def authenticate_metrics() -> None:
    """``/metrics`` behind Flower's own check (``get_current_user``: basic auth, or its OAuth)."""
    from flower.views.monitor import Metrics
    from tornado import web

    if getattr(Metrics.get, "polar", False):
        return
    get = web.authenticated(Metrics.get)
    get.polar = True  # type: ignore[attr-defined]
    Metrics.get = get  # type: ignore[method-assign]


def refuse_non_ascii_credentials() -> None:
    """Flower's ``get_current_user``, answering 401 where its comparison raised a TypeError."""
    from flower.views import BaseHandler
    from tornado import web

    original = BaseHandler.get_current_user
    if getattr(original, "polar", False):
        return

    def get_current_user(self: Any) -> Any:
        try:
            return original(self)
        except TypeError:  # "comparing strings with non-ASCII characters is not supported"
            raise web.HTTPError(401) from None

    get_current_user.polar = True  # type: ignore[attr-defined]
    BaseHandler.get_current_user = get_current_user  # type: ignore[method-assign]
