"""Production's upstream transport: HTTP/1.1 with keep-alive over the process's (gevent) sockets.

The proxy makes one kind of exchange with an engine: a JSON POST (or GET) answered by a JSON body
with a Content-Length (vLLM and SGLang) or chunked (behind some gateways). geventhttpclient spent
~120 us of CPU on each (header objects, per-header parser callbacks, a select() on every pooled
socket); this client sends the request in one write and parses the answer with bytes methods, at a
third of that (bench/proxy_profile.py), as ``hot_redis`` does for Redis.

Connections are pooled per endpoint without a cap (gunicorn's worker_connections bounds the
calls of a worker). A pooled connection is reused only if the server has not closed it (a
non-blocking peek: one syscall) and it has been idle less than ``IDLE_SECONDS``: servers close
idle keep-alive connections after a few seconds (uvicorn: 5 s), and a POST sent on one the server
is closing can neither succeed nor be retried safely. Nothing is retried: a request that may have
reached the engine must not be sampled twice (see ``pool``).
"""

from __future__ import annotations

import errno
import socket
import ssl
import time
from urllib.parse import urlsplit

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.hot_redis import send_all
from proxy.upstream.transport import Unreachable

IDLE_SECONDS = 4.0
CONNECT_SECONDS = 10.0
MAX_HEAD_BYTES = 64 * 1024
_UNREACHABLE = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}


class _Broken(Exception):
    """The answer broke off or is not HTTP."""


class _Conn:
    __slots__ = ("sock", "buf", "used")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""  # bytes received beyond the last parsed item
        self.used = time.monotonic()

    def fill(self, size: int = 65536) -> None:
        data = self.sock.recv(size)
        if not data:
            raise _Broken("the inference server closed the connection mid-answer")
        self.buf += data

    def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.fill(min(max(65536, n - len(self.buf)), 4 << 20))
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self, limit: int = MAX_HEAD_BYTES) -> bytes:
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                out, self.buf = self.buf[:end], self.buf[end + 2:]
                return out
            if len(self.buf) > limit:
                raise _Broken("over-long line in the answer")
            self.fill()


class Endpoint:
    def __init__(self, url: str, timeout_seconds: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream URL must be http(s)://host[:port][/prefix]: {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = parts.scheme == "https"
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout_seconds
        self._head = f"Host: {parts.netloc}\r\nAccept: application/json\r\n".encode("latin-1")
        self._idle: list[_Conn] = []

    def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        conn = self._checkout()
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._head
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        try:
            send_all(conn.sock, head + b"\r\n" + body if body is not None else head + b"\r\n")
            status, data, reuse = self._response(conn, method)
        except (socket.timeout, TimeoutError) as exc:
            conn.sock.close()
            raise UpstreamTimeout(f"inference server {self.url} timed out") from exc
        except (OSError, _Broken, ValueError) as exc:  # ValueError: a malformed number in the head
            conn.sock.close()
            raise UpstreamError(f"inference server {self.url} failed: {exc!r}") from exc
        except BaseException:
            conn.sock.close()  # e.g. the greenlet was killed mid-answer: the connection's state is unknown
            raise
        if reuse and not conn.buf:
            conn.used = time.monotonic()
            self._idle.append(conn)
        else:
            conn.sock.close()
        return status, data

    def reachable(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=1.0).close()
            return True
        except OSError:
            return False

    def _checkout(self) -> _Conn:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.used < IDLE_SECONDS and self._open(conn.sock):
                return conn
            conn.sock.close()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_SECONDS)
        except (socket.timeout, TimeoutError) as exc:
            raise UpstreamTimeout(f"inference server {self.url} did not accept a connection in time") from exc
        except OSError as exc:
            if exc.errno in _UNREACHABLE or isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
                raise Unreachable() from exc
            raise UpstreamError(f"inference server {self.url} failed: {exc!r}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.timeout)
        if self.tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return _Conn(sock)

    def _open(self, sock: socket.socket) -> bool:
        """Whether the server still holds an idle connection open (nothing to read, no EOF)."""
        if self.tls:
            return True  # TLS sockets cannot peek; the idle limit alone decides
        sock.settimeout(0.0)  # gevent's sockets wait out EAGAIN unless their timeout is 0
        try:
            sock.recv(1, socket.MSG_PEEK)  # b"": closed; any byte: out of step; both unusable
            return False
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            sock.settimeout(self.timeout)

    @staticmethod
    def _response(conn: _Conn, method: str) -> tuple[int, bytes, bool]:
        """(status, body, whether the connection may be reused)."""
        while True:
            status_line = conn.line()
            version, _, rest = status_line.partition(b" ")
            if not version.startswith(b"HTTP/1."):
                raise _Broken(f"not an HTTP answer: {status_line[:80]!r}")
            status = int(rest[:3])
            headers: dict[bytes, bytes] = {}
            while True:
                line = conn.line()
                if not line:
                    break
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            if status >= 200 or status == 101:
                break  # 1xx interim answers (100 Continue) come before the real one
        reuse = (headers.get(b"connection", b"").lower() != b"close"
                 if version == b"HTTP/1.1" else headers.get(b"connection", b"").lower() == b"keep-alive")
        if method == "HEAD" or status in (204, 304):
            return status, b"", reuse
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            parts: list[bytes] = []
            while True:
                size = int(conn.line().split(b";", 1)[0], 16)
                if size == 0:
                    while conn.line():  # trailers, up to the blank line
                        pass
                    return status, b"".join(parts), reuse
                parts.append(conn.take(size))
                if conn.take(2) != b"\r\n":
                    raise _Broken("malformed chunk")
        length = headers.get(b"content-length")
        if length is not None:
            return status, conn.take(int(length)), reuse
        while True:  # no length: the body runs to the end of the connection
            try:
                conn.fill()
            except _Broken:
                return status, conn.buf, False


class KeepAliveTransport:
    def __init__(self, urls: list[str], timeout_seconds: float) -> None:
        self._endpoints = {u: Endpoint(u, timeout_seconds) for u in urls}

    def reachable(self, base: str) -> bool:
        return self._endpoints[base].reachable()

    def request(self, base: str, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        return self._endpoints[base].request(method, path, body)
