"""The floor of the proxy's stack: the same gunicorn + gevent worker (``infra/serve.py``'s proxy
profile) and the same upstream client (``proxy/upstream/keepalive.py``), forwarding the request
bytes to the upstream and its bytes back from a bare WSGI function: no framework, session gate,
conversion or capture. (The proxy serves model calls without Flask too, ``proxy/calls.py``.)"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from proxy.upstream.keepalive import KeepAliveTransport

UPSTREAM = os.environ["POLAR_UPSTREAM_URL"].rstrip("/")
_transport = KeepAliveTransport([UPSTREAM], 600.0)


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ["REQUEST_METHOD"] != "POST":  # the benchmark's readiness probe
        start_response("200 OK", [("Content-Length", "0")])
        return [b""]
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    status, data = _transport.request(UPSTREAM, "POST", "/v1/chat/completions", body)
    start_response(f"{status} X", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
