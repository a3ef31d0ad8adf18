"""Several inference endpoints behind one proxy: a session sticks to one endpoint (its KV
cache stays warm across turns) and moves on only when that endpoint cannot be reached.

Affinity is rendezvous hashing over (session, endpoint): stable per session, and removing an
endpoint moves only the sessions that were on it. Only connection failures are retried, on
the next endpoint: a timeout or an error answer may mean the engine did (or is doing) the
work, and sampling twice must not happen silently. When no endpoint accepts a connection (an
engine restarting), the call waits for one, with back-off, up to ``wait_seconds``; between its
waits it runs the hook ``between_engine_waits`` set for it (the gateway's: step out of a weight-sync
pause), a hold that does not count against the wait. Bytes move through an ``UpstreamTransport``
(``transport.py``): ``keepalive.py``'s HTTP/1.1 client in production, a WSGI app in-process in tests.
"""

from __future__ import annotations

import hashlib
import time
from contextvars import ContextVar
from typing import Any, Callable

import orjson

from pipeline.codec import json_bytes
from proxy.errors import UpstreamError, UpstreamRejected
from proxy.upstream.ids_text import parse_answer
from proxy.upstream.keepalive import KeepAliveTransport
from proxy.upstream.transport import Unreachable, UpstreamTransport, reachable

# Per call: a ContextVar is the greenlet's own under gevent (the thread's otherwise).
_BETWEEN_WAITS: ContextVar[Callable[[], None] | None] = ContextVar("between_engine_waits", default=None)


class between_engine_waits:  # noqa: N801 - used as a function: ``with between_engine_waits(hook):``
    """Run ``hook`` between this call's waits for an unreachable engine, while in the block. (A
    class, not a generator: it runs on every call, and costs under half of ``@contextmanager``'s.)"""

    __slots__ = ("hook", "token")

    def __init__(self, hook: Callable[[], None]) -> None:
        self.hook = hook

    def __enter__(self) -> None:
        self.token = _BETWEEN_WAITS.set(self.hook)

    def __exit__(self, *exc: object) -> None:
        _BETWEEN_WAITS.reset(self.token)


class UpstreamPool:
    def __init__(self, urls: str | list[str], timeout_seconds: float,
                 transport: UpstreamTransport | None = None, wait_seconds: float = 0.0) -> None:
        self.urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not self.urls:
            raise ValueError("no upstream URL configured")
        self.transport = transport or KeepAliveTransport(self.urls, timeout_seconds)
        self.wait_seconds = wait_seconds

    def reachable(self) -> bool:
        """Whether any endpoint accepts connections (one is enough to serve)."""
        return any(reachable(self.transport, u) for u in self.urls)

    def order(self, affinity: str) -> list[str]:
        if len(self.urls) == 1:
            return self.urls
        return sorted(self.urls, key=lambda u: hashlib.blake2b(f"{affinity}|{u}".encode(), digest_size=8).digest(),
                      reverse=True)

    def post_json(self, path: str, body: dict[str, Any], *, affinity: str = "",
                  ids_text: str | None = None) -> tuple[dict[str, Any], str]:
        """POST to the session's endpoint (falling over when it cannot be reached); returns the
        JSON answer and the endpoint that gave it. ``ids_text``: a top-level key of the answer
        whose token ids stay JSON text (``ids_text.IdsText``) instead of being parsed."""
        payload = json_bytes(body)
        last: BaseException | None = None
        deadline, pause = time.monotonic() + self.wait_seconds, 0.25
        while True:
            for base in self.order(affinity):
                try:
                    status, data = self.transport.request(base, "POST", path, payload)
                except Unreachable as exc:
                    last = exc.__cause__
                    continue
                return _json(status, data, base, ids_text), base
            if time.monotonic() + pause > deadline:
                break
            time.sleep(pause)  # (a greenlet's sleep under gevent; a client that leaves ends it: client_watch)
            pause = min(2 * pause, 2.0)
            hook = _BETWEEN_WAITS.get()
            if hook is not None:
                held = time.monotonic()
                hook()
                deadline += time.monotonic() - held
        waited = f" (waited {self.wait_seconds:g}s for one)" if self.wait_seconds else ""
        raise UpstreamError(f"cannot reach any inference server ({', '.join(self.urls)}){waited}: {last}")

    def get_json(self, path: str, *, endpoint: str | None = None) -> dict[str, Any]:
        """GET from the first endpoint that answers (or from ``endpoint`` only)."""
        last: Exception | None = None
        for base in [endpoint] if endpoint else self.urls:
            try:
                status, data = self.transport.request(base, "GET", path, None)
                return _json(status, data, base)
            except (Unreachable, UpstreamError) as exc:
                last = exc
        raise UpstreamError(f"inference server {path} failed: {last}")


def _json(status: int, data: bytes, base: str, ids_text: str | None = None) -> dict[str, Any]:
    if status >= 400:
        message = _error_message(data)
        if status < 500:
            raise UpstreamRejected(message, status=status, upstream_url=base)
        raise UpstreamError(f"inference server {base} error {status}: {message}")
    try:
        parsed = parse_answer(data, ids_text)
    except orjson.JSONDecodeError:
        raise UpstreamError(f"inference server {base} returned invalid JSON") from None
    if not isinstance(parsed, dict):
        raise UpstreamError(f"inference server {base} returned a non-object JSON body")
    return parsed


def _error_message(data: bytes) -> str:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data[:500].decode("utf-8", "replace") or "error"
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(parsed, dict) and parsed.get("message"):
        return str(parsed["message"])
    return str(parsed)[:500]
