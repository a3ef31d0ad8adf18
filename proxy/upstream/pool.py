"""Several inference endpoints behind one proxy: a session sticks to one endpoint (its KV
cache stays warm across turns) and moves on only when that endpoint cannot be reached.

Affinity is rendezvous hashing over (session, endpoint): stable per session, and removing an
endpoint moves only the sessions that were on it. Only connection failures are retried, on
the next endpoint: a timeout or an error answer may mean the engine did (or is doing) the
work, and sampling twice must not happen silently.

HTTP goes through geventhttpclient (a C-parser client built for gevent): under hundreds of
concurrent calls per process it costs a fraction of httpx's CPU and does not degrade with
concurrency (see bench/). The proxy always runs under gevent workers.
"""

from __future__ import annotations

import errno
import hashlib
import socket
from typing import Any

import orjson
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from proxy.errors import UpstreamError, UpstreamRejected, UpstreamTimeout

_UNREACHABLE = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}
_JSON = {"content-type": "application/json"}


class UpstreamPool:
    def __init__(self, urls: str | list[str], timeout_seconds: float, concurrency: int = 1024) -> None:
        self.urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not self.urls:
            raise ValueError("no upstream URL configured")
        self._clients = {u: HTTPClient.from_url(URL(u), concurrency=concurrency, connection_timeout=10.0,
                                                network_timeout=timeout_seconds) for u in self.urls}
        self._prefix = {u: URL(u).path.rstrip("/") for u in self.urls}

    def order(self, affinity: str) -> list[str]:
        return sorted(self.urls, key=lambda u: hashlib.blake2b(f"{affinity}|{u}".encode(), digest_size=8).digest(),
                      reverse=True)

    def post_json(self, path: str, body: dict[str, Any], *, affinity: str = "") -> tuple[dict[str, Any], str]:
        """POST to the session's endpoint (falling over when it cannot be reached); returns the
        JSON answer and the endpoint that gave it."""
        payload = orjson.dumps(body)
        last: Exception | None = None
        for base in self.order(affinity):
            try:
                status, data = self._request(base, "POST", path, payload)
            except _Unreachable as exc:
                last = exc.__cause__
                continue
            return _json(status, data, base), base
        raise UpstreamError(f"cannot reach any inference server ({', '.join(self.urls)}): {last}")

    def get_json(self, path: str) -> dict[str, Any]:
        last: Exception | None = None
        for base in self.urls:
            try:
                status, data = self._request(base, "GET", path, None)
                return _json(status, data, base)
            except (_Unreachable, UpstreamError) as exc:
                last = exc
        raise UpstreamError(f"inference server {path} failed: {last}")

    def _request(self, base: str, method: str, path: str, payload: bytes | None) -> tuple[int, bytes]:
        try:
            resp = self._clients[base].request(method, self._prefix[base] + path, body=payload, headers=_JSON)
            try:
                return resp.status_code, resp.read()
            finally:
                resp.release()
        except (socket.timeout, TimeoutError) as exc:
            raise UpstreamTimeout(f"inference server {base} timed out") from exc
        except OSError as exc:
            if exc.errno in _UNREACHABLE or isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
                raise _Unreachable() from exc
            raise UpstreamError(f"inference server {base} failed: {exc!r}") from exc
        except Exception as exc:  # geventhttpclient's parse errors: the connection broke mid-answer
            raise UpstreamError(f"inference server {base} failed: {exc!r}") from exc


class _Unreachable(Exception):
    """Nothing was sent: safe to try the next endpoint."""


def _json(status: int, data: bytes, base: str) -> dict[str, Any]:
    if status >= 400:
        message = _error_message(data)
        if status < 500:
            raise UpstreamRejected(message, status=status)
        raise UpstreamError(f"inference server {base} error {status}: {message}")
    try:
        parsed = orjson.loads(data)
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
