"""The callback POST itself: to the addresses the callback policy judged, within one deadline
for the whole exchange.

httpx's timeouts bound each read and write, not the request: a receiver that answered a byte
every ten seconds held a POST (and a callback worker's thread) for as long as it liked, and the
reaper, seeing the lease lapse, sent another attempt beside it, until every thread of the
CALLBACK stage was held and no session's result was published. Here every read, write and
connect is given what is left of CALLBACK_TIMEOUT_SECONDS, so the POST ends by then, answered or
not (``httpx.ReadTimeout``: an attempt that failed, retried later).
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx

# As webhook senders do (GitHub waits 10 s): a receiver acknowledges, then does its work.
CALLBACK_TIMEOUT_SECONDS = 10.0


def post_pinned(url: str, addresses: list[str], *, content: bytes, headers: dict[str, str],
                deadline_seconds: float = CALLBACK_TIMEOUT_SECONDS) -> httpx.Response:
    """POST to the addresses the policy judged, not to whatever the name resolves to a moment
    later (DNS rebinding: a name that answered with a public address for the check, then with
    this service's own). The URL's host stays in the Host header and, over TLS, in SNI and the
    certificate check; the addresses are tried in order while they refuse the connection. All
    of it ends within ``deadline_seconds``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    pinnable = [a for a in addresses if "%" not in a]  # (a zoned IPv6 address cannot be a URL host as is)
    if not pinnable or host.strip("[]") in pinnable or _via_proxy(parts.scheme, host):
        pinnable = [""]  # an IP literal, nothing resolved, or an HTTP proxy resolving it: the URL as it is
    userinfo = parts.netloc.rpartition("@")[0]
    last: httpx.ConnectError | httpx.ConnectTimeout | None = None
    deadline = time.monotonic() + deadline_seconds
    with httpx.Client(timeout=deadline_seconds) as client:
        _hold_to(client, deadline)
        for address in pinnable:
            target, sent = url, headers
            if address:
                netloc = (f"[{address}]" if ":" in address else address) + (f":{parts.port}" if parts.port else "")
                target = urlunsplit(parts._replace(netloc=f"{userinfo}@{netloc}" if userinfo else netloc))
                sent = {**headers, "host": parts.netloc.rpartition("@")[2]}
            try:
                return client.post(target, content=content, headers=sent,
                                   extensions={"sni_hostname": host} if parts.scheme == "https" and address else {})
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # (as the resolver's next address would be)
                last = exc
    assert last is not None
    raise last


def _via_proxy(scheme: str, host: str) -> bool:
    """Whether the environment sends this URL through an HTTP proxy (httpx reads the same
    variables): the proxy resolves the name then, and a pinned address would break its TLS."""
    proxies = urllib.request.getproxies_environment()
    return bool(proxies.get(scheme) or proxies.get("all")) and not urllib.request.proxy_bypass_environment(host)


def _hold_to(client: httpx.Client, deadline: float) -> None:
    """Every connection pool of ``client`` (the direct one, and an environment proxy's) opens its
    connections through a backend that holds them to ``deadline``. (httpx takes no network
    backend: it is set on httpcore's pools, ``_network_backend`` since httpcore 0.17.)"""
    for transport in [client._transport, *client._mounts.values()]:
        pool = getattr(transport, "_pool", None)
        if pool is not None:
            pool._network_backend = _DeadlineBackend(pool._network_backend, deadline)


def _left(deadline: float, timeout: float | None) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("no answer within the POST's deadline")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self.inner, self.deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _left(self.deadline, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _left(self.deadline, timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, _left(self.deadline, timeout)),
                               self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: Any, deadline: float) -> None:
        self.inner, self.deadline = inner, deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self.inner.connect_tcp(host, port, _left(self.deadline, timeout), local_address, socket_options)
        return _DeadlineStream(stream, self.deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.inner.connect_unix_socket(path, _left(self.deadline, timeout), socket_options),
                               self.deadline)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)
