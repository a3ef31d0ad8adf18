"""Several inference endpoints behind one proxy: a session sticks to one endpoint (its KV
cache stays warm across turns) and moves on only when that endpoint cannot be reached.

Affinity is rendezvous hashing over (session, endpoint): stable per session, and removing an
endpoint moves only the sessions that were on it. Only connection failures are retried, on
the next endpoint: a timeout or an error answer may mean the engine did (or is doing) the
work, and sampling twice must not happen silently.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from proxy.errors import UpstreamError, UpstreamRejected, UpstreamTimeout


class UpstreamPool:
    def __init__(self, urls: str | list[str], timeout_seconds: float) -> None:
        self.urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not self.urls:
            raise ValueError("no upstream URL configured")
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_seconds, connect=10.0),
            limits=httpx.Limits(max_connections=4096, max_keepalive_connections=512),
        )

    def order(self, affinity: str) -> list[str]:
        return sorted(self.urls, key=lambda u: hashlib.blake2b(f"{affinity}|{u}".encode(), digest_size=8).digest(),
                      reverse=True)

    def post_json(self, path: str, body: dict[str, Any], *, affinity: str = "") -> tuple[dict[str, Any], str]:
        """POST to the session's endpoint (falling over on connection failure); returns
        the JSON answer and the endpoint that gave it."""
        last: Exception | None = None
        for base in self.order(affinity):
            try:
                resp = self._http.post(f"{base}{path}", json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc
                continue
            except httpx.TimeoutException as exc:
                raise UpstreamTimeout(f"inference server {base} timed out: {exc}") from exc
            except httpx.HTTPError as exc:
                raise UpstreamError(f"inference server {base} failed: {exc}") from exc
            return _json(resp, base), base
        raise UpstreamError(f"cannot reach any inference server ({', '.join(self.urls)}): {last}")

    def get_json(self, path: str) -> dict[str, Any]:
        last: Exception | None = None
        for base in self.urls:
            try:
                return _json(self._http.get(f"{base}{path}", timeout=10.0), base)
            except (httpx.HTTPError, UpstreamError) as exc:
                last = exc
        raise UpstreamError(f"inference server {path} failed: {last}")


def _json(resp: httpx.Response, base: str) -> dict[str, Any]:
    if resp.status_code >= 400:
        message = _error_message(resp)
        if resp.status_code < 500:
            raise UpstreamRejected(message, status=resp.status_code)
        raise UpstreamError(f"inference server {base} error {resp.status_code}: {message}")
    try:
        data = resp.json()
    except ValueError:
        raise UpstreamError(f"inference server {base} returned invalid JSON") from None
    if not isinstance(data, dict):
        raise UpstreamError(f"inference server {base} returned a non-object JSON body")
    return data


def _error_message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:500] or resp.reason_phrase
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(data)[:500]
