"""kombu's Redis transport with one Redis client per channel for its commands, instead of a new
one for every publish, ack and unacked-index write (kombu's ``conn_or_acquire``): building a
``redis.Redis`` builds its table of ~250 response callbacks, which was the top function by own
time in every worker under load. The client is thread-safe (it takes a pooled connection per
command) and fork-safe (the pool resets in a child), so one per channel serves every caller.

``install()`` makes the ``redis://`` and ``rediss://`` broker URLs of this process use it; the
Celery app calls it, so workers, the API and Flower (``-A pipeline.celery_app``) all do.
"""

from __future__ import annotations

from typing import Any

from kombu import transport as kombu_transport
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _command_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the event loop's own client (BRPOP): kombu already keeps one
            return super()._create_client(asynchronous=True)
        client = self._command_client
        if client is None:
            client = self._command_client = super()._create_client(asynchronous=False)
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel


def install() -> None:
    for scheme in ("redis", "rediss"):
        kombu_transport.TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
        kombu_transport._transport_cache.pop(scheme, None)  # a lookup made before this one
