"""HTTP to the inference server: one pooled client per process, errors mapped to the proxy tree."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.errors import UpstreamError, UpstreamRejected, UpstreamTimeout


class UpstreamClient:
    def __init__(self, base_url: str, timeout_seconds: float) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_seconds, connect=10.0),
            limits=httpx.Limits(max_connections=2048, max_keepalive_connections=256),
        )

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            resp = self._http.post(url, json=body)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"inference server timed out: {exc}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach the inference server at {self.base_url}: {exc}") from exc
        if resp.status_code >= 400:
            message = _error_message(resp)
            if resp.status_code < 500:
                raise UpstreamRejected(message, status=resp.status_code)
            raise UpstreamError(f"inference server error {resp.status_code}: {message}")
        try:
            data = resp.json()
        except ValueError:
            raise UpstreamError("inference server returned invalid JSON") from None
        if not isinstance(data, dict):
            raise UpstreamError("inference server returned a non-object JSON body")
        return data

    def get_json(self, path: str) -> dict[str, Any]:
        try:
            resp = self._http.get(f"{self.base_url}{path}", timeout=10.0)
            resp.raise_for_status()
            return resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise UpstreamError(f"inference server {path} failed: {exc}") from exc


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
