"""Flower on this project's broker, with every stage queue listed.

Flower lists the queues its known workers consume, falling back to the app's declared queues only
when it knows no worker at all (mher/flower#335): a stage whose fleet is down -- the moment its
backlog matters most -- vanishes from the Broker page and from ``/api/queues/length``. Here the
declared stage queues are always listed beside whatever the workers consume. Task events: workers
start without them (they cost CPU per task); Flower's own ``enable_events`` (on by default) turns
them on in every worker it sees within seconds of starting.
"""

from __future__ import annotations

from typing import Any


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
