"""Connections waiting for a request give way to new ones when a gevent worker is nearly full.

A gevent worker serves at most ``worker_connections`` connections (gunicorn's pool); once they are
all taken it stops accepting, and a new connection waits in the kernel's backlog until one ends.
A connection that sends nothing ends at the head deadline (``http_head_seconds``, 20 s), so
anything on the network that reopens connections faster than that -- an agent on the worker's
host, its sandbox's network included -- kept the proxy (or the API) from serving every session.

So when a pool's free slots fall under ``reserve`` (a twentieth of it), each new connection
closes the one that has waited longest for a request's head: a new connection, a kept-alive one
idle between requests, or one whose head is half sent. A request being served is never closed.
A client whose kept-alive connection is closed this way opens a new one (what nginx does with
its idle keepalive connections under the same pressure).

Only as many as the reserve needs: a closed connection's slot is free only once its greenlet
has left the pool, which is a hub callback queued behind every connection gevent accepted in the
same burst (it accepts until the pool is full). Each of those saw no free slot and closed one
more: 850 of a 2,100-connection flood instead of ~220. So closed connections whose greenlets are
still in the pool count as free slots.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import gevent

log = logging.getLogger("polar.http")
RESERVE_SHARE = 20  # the pool's free slots kept: 1/20 of it (at least one)
LOG_EVERY_SECONDS = 10.0


class WaitingConnections:
    """One server's connections waiting for a request's head, oldest first."""

    def __init__(self) -> None:
        # handler -> its socket and greenlet (dicts keep insertion order)
        self._waiting: dict[Any, tuple[socket.socket, Any]] = {}
        self._closing: list[Any] = []  # the greenlets of connections closed to make room
        self.shed = 0
        self._logged_at = 0.0

    def waiting(self, handler: Any, sock: socket.socket) -> None:
        """Called in the connection's own greenlet (the one the pool holds)."""
        self._waiting.pop(handler, None)
        self._waiting[handler] = (sock, gevent.getcurrent())  # (again at the end: a kept-alive one waits anew)

    def done(self, handler: Any) -> None:
        self._waiting.pop(handler, None)

    def make_room(self, pool: Any) -> None:
        """Called as a connection starts: close the longest-waiting one if the pool is nearly full."""
        size = getattr(pool, "size", None)
        if not size or not self._waiting:
            return
        reserve = max(1, size // RESERVE_SHARE)
        if pool.free_count() >= reserve:
            return
        self._closing = [g for g in self._closing if g in pool]  # (at most ``reserve`` of them)
        if pool.free_count() + len(self._closing) >= reserve:
            return
        handler = next(iter(self._waiting))
        sock, greenlet = self._waiting.pop(handler)
        self._closing.append(greenlet)
        try:
            sock.shutdown(socket.SHUT_RDWR)  # its pending read ends (EOF) and its handler closes it
        except OSError:
            pass
        self.shed += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            self._logged_at = now
            log.warning("%d of %d connections in use: closed the one waiting longest for a request (%d so far); "
                        "something opens connections and sends nothing", size - pool.free_count(), size, self.shed)


def of(server: Any) -> WaitingConnections:
    """The server's register (one per listening socket: gunicorn gives each its own pool)."""
    found = server.__dict__.get("_polar_waiting")
    if found is None:
        found = server._polar_waiting = WaitingConnections()
    return found
