"""Just enough of the Redis protocol for the proxy's two round trips per model call, each of which
may be sent before its replies are needed (``send`` -> ``Pending.replies``).

redis-py spends ~160 µs of CPU on a 4-command pipeline under gevent (pool, retries, timeouts,
response callbacks); packing with hiredis and parsing with its reader costs a third of that
(bench/). Everything else in the project uses redis-py. Under gevent (the proxy's workers) every
call of a process shares one connection with its writes batched (``hot_redis_mux``); elsewhere
(tests in one process, threads) each send takes a pooled connection of its own.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any, Protocol, Sequence
from urllib.parse import unquote, urlsplit

import hiredis

Command = Sequence[Any]


class RedisReplyError(Exception):
    pass


class NoScript(RedisReplyError):
    pass


class _Stale(Exception):
    """The connection was closed before any reply: the commands were not processed."""


def send_all(sock: socket.socket, data: bytes) -> None:
    """``sock.sendall`` without gevent's per-call overhead (a getsockopt syscall, a timeout clock,
    a chunking loop): a plain ``send`` rarely leaves anything over for the loop."""
    sent = sock.send(data)
    if sent < len(data):
        view = memoryview(data)
        while sent < len(data):
            sent += sock.send(view[sent:])


class HotRedis:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url
        self.timeout = timeout
        self._idle: list[tuple[socket.socket, hiredis.Reader]] = []
        parts = urlsplit(url)
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port or 6379
        self._path = parts.path
        self._user = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password else None
        db = parts.path.lstrip("/") if parts.scheme in ("redis", "rediss") else ""
        self._db = int(db) if db.isdigit() else 0
        self._shared: Any = None
        if _gevent_sockets():
            from proxy.hot_redis_mux import Multiplexed  # (imported here: it imports this module)

            self._shared = Multiplexed(self._connect, timeout)

    def pipeline(self, commands: Sequence[Command]) -> list[Any]:
        """Send all commands at once, read all replies; raise the first error reply after."""
        return self.send(commands).replies()

    def send(self, commands: Sequence[Command]) -> "Pending":
        """Send all commands at once (on the worker's shared connection under gevent, else on a
        pooled one of their own); ``replies()`` reads them. The caller may work in between (the
        proxy renders its answer while Redis records the call) and must end with ``replies()`` or
        ``discard()``."""
        data = b"".join(hiredis.pack_command(tuple(c)) for c in commands)
        if self._shared is not None:
            return self._shared.send(data, len(commands))
        pooled = bool(self._idle)
        conn = self._idle.pop() if pooled else self._connect()
        try:
            send_all(conn[0], data)
        except (ConnectionError, BrokenPipeError):
            conn[0].close()
            if not pooled:
                raise
            # A pooled connection the server had already closed: nothing was processed.
            conn, pooled = self._connect(), False
            try:
                send_all(conn[0], data)
            except BaseException:
                conn[0].close()
                raise
        except BaseException:
            conn[0].close()
            raise
        return PooledPending(self, conn, data, len(commands), pooled)

    def _done(self, conn: tuple[socket.socket, hiredis.Reader]) -> None:
        self._idle.append(conn)

    def _connect(self) -> tuple[socket.socket, hiredis.Reader]:
        if self._scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        else:
            sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._scheme == "rediss":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self._host)
        conn = (sock, hiredis.Reader(replyError=hiredis.ReplyError))
        setup: list[Command] = []
        if self._password is not None:
            setup.append(("AUTH", self._user, self._password) if self._user else ("AUTH", self._password))
        if self._db:
            setup.append(("SELECT", self._db))
        if setup:
            try:
                send_all(sock, b"".join(hiredis.pack_command(tuple(c)) for c in setup))
                setup_replies = _read(conn, len(setup))
            except _Stale:
                sock.close()
                raise ConnectionError("Redis closed a new connection") from None
            except BaseException:
                sock.close()
                raise
            for reply in setup_replies:
                if isinstance(reply, hiredis.ReplyError):
                    sock.close()
                    raise RedisReplyError(f"Redis refused the connection setup: {reply}")
        return conn


class Pending(Protocol):
    """Commands sent, replies not yet read."""

    def replies(self) -> list[Any]:
        """Every reply, in order; raise the first error reply after reading them all."""

    def discard(self) -> None:
        """Give up on the replies (the commands may or may not have run)."""


class PooledPending:
    """Commands sent on a pooled connection, which is this object's until its replies are read."""

    __slots__ = ("_hot", "_conn", "_data", "_count", "_pooled")

    def __init__(self, hot: HotRedis, conn: tuple[socket.socket, hiredis.Reader], data: bytes, count: int,
                 pooled: bool) -> None:
        self._hot, self._data, self._count, self._pooled = hot, data, count, pooled
        self._conn: tuple[socket.socket, hiredis.Reader] | None = conn

    def replies(self) -> list[Any]:
        """Every reply, in order; raise the first error reply after reading them all."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("replies already read")
        self._conn = None
        while True:
            try:
                replies = _read(conn, self._count)
                break
            except _Stale:
                conn[0].close()
                if not self._pooled:
                    raise ConnectionError("Redis closed a new connection") from None
                # A pooled connection the server had closed before reading a thing (e.g. a Redis
                # restart): nothing was processed (not one reply came back), so resend on a new one.
                conn, self._pooled = self._hot._connect(), False
                try:
                    send_all(conn[0], self._data)
                except BaseException:
                    conn[0].close()
                    raise
            except BaseException:
                conn[0].close()  # state unknown (partial reply, timeout): never reuse it
                raise
        self._hot._done(conn)
        return checked(replies)

    def discard(self) -> None:
        """Give up on the replies (the commands may or may not have run): the connection is closed."""
        if self._conn is not None:
            self._conn[0].close()
            self._conn = None


def checked(replies: list[Any]) -> list[Any]:
    """``replies``, or the first error reply among them raised."""
    for reply in replies:
        if isinstance(reply, hiredis.ReplyError):
            text = str(reply)
            raise (NoScript if text.startswith("NOSCRIPT") else RedisReplyError)(text)
    return replies


def _gevent_sockets() -> bool:
    try:
        from gevent import monkey
    except ImportError:  # pragma: no cover - gevent is a dependency
        return False
    return bool(monkey.is_module_patched("socket"))


def _read(conn: tuple[socket.socket, hiredis.Reader], count: int) -> list[Any]:
    sock, reader = conn
    replies: list[Any] = []
    try:
        while len(replies) < count:
            reply = reader.gets()
            if reply is False:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("Redis closed the connection")
                reader.feed(data)
                continue
            replies.append(reply)
    except (ConnectionError, BrokenPipeError) as exc:
        if not replies and reader.gets() is False:
            raise _Stale() from exc
        raise
    return replies
