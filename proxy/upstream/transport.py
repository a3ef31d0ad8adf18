"""How the endpoint pool reaches an inference server: one method, ``request``.

``KeepAliveTransport`` (``keepalive.py``) is production's: HTTP/1.1 keep-alive on gevent sockets.
``WSGITransport`` calls a WSGI app in-process, so the proxy can be tested against a scripted
engine (``infra/fake_upstream.py``, the reference server) without sockets or processes.

Errors: ``Unreachable`` when nothing was sent (the pool may try the next endpoint),
``UpstreamTimeout``, or ``UpstreamError`` when the answer broke off.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Callable, Iterable, Protocol
from urllib.parse import urlsplit

from proxy.errors import UpstreamError


class Unreachable(Exception):
    """Nothing was sent: safe to try the next endpoint."""


class UpstreamTransport(Protocol):
    def request(self, base: str, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        """Send one request to the endpoint at ``base``; returns (status, body)."""


def reachable(transport: UpstreamTransport, base: str) -> bool:
    """Whether the endpoint accepts connections now (health checks; transports without a probe
    count as reachable)."""
    probe = getattr(transport, "reachable", None)
    return bool(probe(base)) if probe is not None else True


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WSGITransport:
    """Every endpoint URL is served by ``app`` in this process (``apps`` maps URL -> app to give
    endpoints different behaviour; a URL mapped to None is unreachable)."""

    def __init__(self, app: WSGIApp | None = None, apps: dict[str, WSGIApp | None] | None = None) -> None:
        self.app = app
        self.apps = {u.rstrip("/"): a for u, a in (apps or {}).items()}
        self.calls: list[tuple[str, str, str]] = []

    def reachable(self, base: str) -> bool:
        return self.apps.get(base, self.app) is not None

    def request(self, base: str, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        app = self.apps.get(base, self.app)
        self.calls.append((base, method, path))
        if app is None:
            raise Unreachable() from ConnectionRefusedError(f"{base} is unreachable (WSGITransport)")
        parts = urlsplit(base)
        status: list[int] = []

        def start_response(line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            status.append(int(line.split(" ", 1)[0]))

        environ = {
            "REQUEST_METHOD": method, "PATH_INFO": parts.path.rstrip("/") + path, "QUERY_STRING": "",
            "SERVER_NAME": parts.hostname or "upstream", "SERVER_PORT": str(parts.port or 80),
            "SERVER_PROTOCOL": "HTTP/1.1", "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body or b"")), "wsgi.input": io.BytesIO(body or b""),
            "wsgi.errors": sys.stderr, "wsgi.url_scheme": parts.scheme or "http", "wsgi.version": (1, 0),
            "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        try:
            chunks = app(environ, start_response)
            data = b"".join(chunks)
        except Exception as exc:  # the engine broke off: as a dropped connection would
            raise UpstreamError(f"inference server {base} failed: {exc!r}") from exc
        return status[0], data
