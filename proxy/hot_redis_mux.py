"""One Redis connection shared by all of a gevent worker's calls, their commands batched.

A proxy worker serves dozens of calls at once, and each makes two round trips (``hot_redis``).
Sent one by one, every round trip costs Redis a wake-up, a read and a write (~60 us of its CPU
on the machines of bench/, against ~2 us per command) and the worker two syscalls. Here every
call's commands go on one connection: a call that finds it idle writes at once (a lone call
waits no longer than before); a call that finds replies outstanding appends its commands, and
everything appended in one turn of the event loop leaves in one write. Redis answers in order.
Whoever waits for replies and finds nobody reading reads, for everyone: it hands each call its
replies as they come and, once it has its own, passes the reading on to the next caller still
waiting. A lone call so reads its own replies, as it would on a connection of its own.

A call's commands are contiguous on the wire (a MULTI/EXEC stays whole). If the connection
fails, every call waiting on it fails with ``ConnectionError`` (the proxy answers 503, nothing
unrecorded is answered) and the next call opens a new one. A connection found readable while
nothing is outstanding was closed by Redis (a restart) and is replaced before anything is sent
on it. A reply later than ``timeout`` fails the connection too: its replies can no longer be
matched. Only under gevent (``HotRedis`` keeps a pool of connections otherwise).
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable

import gevent
import gevent.event
import gevent.lock
from gevent import monkey

from proxy.hot_redis import checked, send_all

Connection = Any  # (socket, hiredis.Reader), as HotRedis._connect makes them
_poll = monkey.get_original("select", "poll")  # the kernel's own: a zero timeout never yields


class Multiplexed:
    def __init__(self, connect: Callable[[], Connection], timeout: float) -> None:
        self._connect = connect
        self._timeout = timeout
        self._link: _Link | None = None
        self._opening = gevent.lock.Semaphore()
        self._pid = os.getpid()

    def send(self, data: bytes, count: int) -> "MuxPending":
        """Queue ``count`` packed commands; ``replies()`` of what this returns waits for theirs."""
        link = self._link
        if link is None or not link.usable() or self._pid != os.getpid():
            link = self._open()
        return link.send(data, count)

    def close(self) -> None:
        if self._link is not None:
            self._link.fail(ConnectionError("closed"))
            self._link = None

    def _open(self) -> "_Link":
        with self._opening:  # one connect at a time; the others use what it opened
            link = self._link
            if link is None or not link.usable() or self._pid != os.getpid():
                self._pid = os.getpid()
                sock, reader = self._connect()
                sock.settimeout(self._timeout)  # a reader waiting longer fails the connection
                link = self._link = _Link(sock, reader, self._timeout)
            return link


class _Link:
    """One connection: what waits to be written, the calls waiting for replies (in wire order)."""

    def __init__(self, sock: Any, reader: Any, timeout: float) -> None:
        self.sock, self.reader, self.timeout = sock, reader, timeout
        self.out: list[bytes] = []
        self.waiting: deque[MuxPending] = deque()
        self.writing = self.reading = False
        self.error: BaseException | None = None
        self._idle_check = _poll()
        self._idle_check.register(sock.fileno(), 1)  # POLLIN

    def usable(self) -> bool:
        """Not failed, and not closed by Redis while idle (readable with nothing outstanding:
        the end of the stream, or bytes nobody asked for). One poll, and only when idle."""
        if self.error is not None:
            return False
        if not self.waiting and self._idle_check.poll(0):
            self.fail(ConnectionError("Redis closed the idle connection"))
            return False
        return True

    def send(self, data: bytes, count: int) -> "MuxPending":
        pending = MuxPending(self, count)
        self.waiting.append(pending)  # appended together, never apart: wire order is reply order
        self.out.append(data)
        if not self.writing:
            self.writing = True
            if len(self.waiting) == 1:
                self._write()  # nothing outstanding: at once, in this greenlet
            else:
                gevent.spawn_raw(self._write)  # with whatever else this turn of the loop sends
        return pending

    def _write(self) -> None:
        try:
            while self.out and self.error is None:
                data = b"".join(self.out)
                self.out.clear()
                send_all(self.sock, data)  # may yield: what is appended meanwhile goes next
        except OSError as exc:
            self.fail(exc)
        finally:
            self.writing = False

    def read_until(self, pending: "MuxPending") -> None:
        """Read replies for every waiting call, in order, until ``pending`` has all of its own."""
        self.reading = True
        try:
            while not pending.complete and self.error is None:
                reply = self.reader.gets()
                if reply is False:
                    data = self.sock.recv(65536)  # the socket's timeout bounds the wait
                    if not data:
                        raise ConnectionError("Redis closed the connection")
                    self.reader.feed(data)
                    continue
                if not self.waiting:
                    raise ConnectionError("a reply nobody asked for: the connection is out of step")
                head = self.waiting[0]
                head.replies_in.append(reply)
                if len(head.replies_in) == head.count:
                    self.waiting.popleft()
                    head.complete = True
                    head.wake()
        except BaseException as exc:  # noqa: BLE001 - every waiting call must hear of it
            self.fail(exc if not isinstance(exc, TimeoutError)
                      else TimeoutError(f"no reply from Redis within {self.timeout:g} s"))
            if not isinstance(exc, Exception):
                raise  # (a killed greenlet stays killed)
        finally:
            self.reading = False
            for other in self.waiting:  # the first caller still waiting reads on
                if other.active:
                    other.wake()
                    break

    def fail(self, exc: BaseException) -> None:
        if self.error is not None:
            return
        self.error = exc
        try:
            self.sock.close()
        except OSError:
            pass
        waiting, self.waiting = self.waiting, deque()
        self.out.clear()
        for pending in waiting:
            pending.wake()


class MuxPending:
    """Commands queued or sent on a shared connection; their replies once someone has read them."""

    __slots__ = ("link", "count", "replies_in", "done", "complete", "read", "active")

    def __init__(self, link: _Link, count: int) -> None:
        self.link, self.count = link, count
        self.replies_in: list[Any] = []
        # Set when complete, failed, or this call's turn to read; made only by a caller that has
        # to wait (a lone call reads its replies itself and never needs one).
        self.done: gevent.event.Event | None = None
        self.complete = self.read = False
        self.active = False  # its caller waits in replies()

    def wake(self) -> None:
        if self.done is not None:
            self.done.set()

    def replies(self) -> list[Any]:
        """Every reply, in order; raise the first error reply after reading them all."""
        if self.read:
            raise RuntimeError("replies already read")
        self.read = self.active = True
        link = self.link
        try:
            while not self.complete and link.error is None:
                if not link.reading:
                    link.read_until(self)
                    continue
                if self.done is None:
                    self.done = gevent.event.Event()
                if not self.done.wait(link.timeout):
                    link.fail(TimeoutError(f"no reply from Redis within {link.timeout:g} s"))
                self.done.clear()  # woken to read (the reader is done), or complete, or failed
        finally:
            self.active = False
        if not self.complete:
            raise ConnectionError(f"Redis connection lost: {link.error}")
        return checked(self.replies_in)

    def discard(self) -> None:
        """Give up on the replies: whoever reads next takes them off the connection."""
        self.read = True
