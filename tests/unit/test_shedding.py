"""infra/shedding.py on a real gevent pool, greenlets and sockets: a nearly full pool closes the
connections waiting longest, oldest first, and only as many as its reserve needs. A closed
connection's slot comes free only when its greenlet leaves the pool -- after every connection
gevent accepted in the same burst has started -- so those still in the pool count as free."""

from __future__ import annotations

import gevent
import pytest
from gevent import socket
from gevent.pool import Pool

from infra.shedding import RESERVE_SHARE, WaitingConnections

RESERVE = 2
SIZE = RESERVE * RESERVE_SHARE


class Handler:
    """A connection waiting for its request's head, as gevent_worker's handler does: it ends at
    EOF, and lingers in the pool a moment after ``done`` (the hub's callback comes later)."""

    def __init__(self, shedding: WaitingConnections) -> None:
        self.server_side, self.client_side = socket.socketpair()
        self.shedding, self.closed = shedding, False

    def run(self) -> None:
        self.shedding.waiting(self, self.server_side)
        try:
            self.closed = self.server_side.recv(1) == b""
        except OSError:  # (gevent ends a read pending on a socket shut down under it with EBADF)
            self.closed = True
        self.shedding.done(self)
        gevent.sleep(0.05)


@pytest.fixture
def full_pool():
    pool, shedding = Pool(SIZE), WaitingConnections()
    handlers = [Handler(shedding) for _ in range(8)]
    for _ in range(SIZE - len(handlers)):
        pool.spawn(gevent.sleep, 30)
    for h in handlers:
        pool.spawn(h.run)
    gevent.sleep(0)  # each handler waits for its head
    yield pool, shedding, handlers
    pool.kill()
    for h in handlers:
        h.server_side.close()
        h.client_side.close()


def test_a_burst_of_new_connections_closes_the_oldest_and_only_what_the_reserve_needs(full_pool):
    pool, shedding, handlers = full_pool
    for _ in range(5):  # five connections start before any closed one's greenlet runs again
        shedding.make_room(pool)
    gevent.sleep(0.01)  # the closed ones see EOF and say done; their greenlets are still in the pool
    assert [h.closed for h in handlers] == [True] * RESERVE + [False] * 6 and shedding.shed == RESERVE
    for _ in range(5):  # more of the same burst
        shedding.make_room(pool)
    assert shedding.shed == RESERVE
    gevent.sleep(0.1)  # their greenlets have ended: the reserve is free again
    assert pool.free_count() == RESERVE
    shedding.make_room(pool)
    assert shedding.shed == RESERVE
    pool.spawn(gevent.sleep, 30)  # a new connection takes a reserved slot: one more goes
    shedding.make_room(pool)
    gevent.sleep(0.01)
    assert shedding.shed == RESERVE + 1 and [h.closed for h in handlers] == [True] * (RESERVE + 1) + [False] * 5
