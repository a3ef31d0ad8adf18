"""Where a task's ``callback_url`` may point (pure). A payload must not turn the callback POST
into a request against this service's own control surfaces (the API, the proxy's admin
endpoints, the engine, Flower); with ``POLAR_CALLBACK_ALLOWED_HOSTS`` set, only those hosts are
allowed.

Hosts are compared as the resolver reads them: ``127.1``, ``2130706433``, ``0x7f.0.0.1``,
``[::ffff:127.0.0.1]`` and ``0.0.0.0`` all reach this machine's loopback, so they are all
"loopback". At delivery the callback stage also hands in what the name resolves to
(``resolved``): a name that resolves to this machine's loopback is judged as loopback, and the
POST is then sent to those judged addresses, not to a second lookup (``workers/stages/callback.py``:
a name cannot answer the check with one address and the connection with another).
``POLAR_CALLBACK_ALLOWED_HOSTS`` is the strict setting. Link-local addresses (a cloud's metadata
service at 169.254.169.254) are refused unless that setting lists them.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Iterable
from urllib.parse import urlsplit

from pipeline.loopback import is_loopback_name
from pipeline.settings import Settings

LOOPBACK = "loopback"


def canonical_host(host: str) -> str:
    """``host`` as a resolver reads it: an IP address in its one normal form, ``loopback`` for any
    address of this machine's loopback (or the unspecified address, which reaches it too), else
    the lower-cased name."""
    host = host.strip("[]").lower().rstrip(".")
    if is_loopback_name(host):  # (the loopback names; the other forms of its addresses follow)
        return LOOPBACK
    address = _ip(host)
    if address is None:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return LOOPBACK if address.is_loopback or address.is_unspecified else str(address)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host):
        try:  # the forms inet_aton (and so the resolver) accepts: 2130706433, 127.1, 0177.0.0.1, 0x7f.1
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def port_of(url: str) -> int | None:
    """The port ``url`` reaches (its scheme's default when it names none); None when invalid."""
    parts = urlsplit(url)
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def _host_port(url: str) -> tuple[str, int | None]:
    return canonical_host(urlsplit(url).hostname or ""), port_of(url)


def own_urls(settings: Settings) -> tuple[str, ...]:
    """This service's own endpoints: API, proxy, every engine endpoint, Flower."""
    engines = [u.strip() for u in settings.upstream_url.split(",") if u.strip()]
    return (settings.api_url, settings.proxy_url, *engines, *([settings.flower_url] if settings.flower_url else []))


def refusal(url: str, settings: Settings, *, resolved: Iterable[str] = (),
            own_resolved: Iterable[tuple[str, int | None]] = (), delivering: bool = False) -> str | None:
    """Why ``url`` may not receive callbacks, or None when it may. At submission a templated URL
    (``{...}``, as in Polar's examples) is accepted unjudged; at delivery (``delivering``) nothing
    fills it in, so it is refused. ``resolved``: the addresses the URL's host resolves to, and
    ``own_resolved``: (address, port) of this service's own endpoints as resolved (at delivery:
    in compose or Kubernetes an own endpoint has a name, a service IP and a pod IP)."""
    if "{" in url:
        return "callback_url is a template nothing filled in" if delivering else None
    host, port = _host_port(url)
    if port is None:
        return "callback_url has an invalid port"
    allowed = [h.strip().lower() for h in settings.callback_allowed_hosts.split(",") if h.strip()]
    if allowed and (urlsplit(url).hostname or "") not in allowed and host not in allowed:
        return f"callback_url host is not in POLAR_CALLBACK_ALLOWED_HOSTS ({', '.join(allowed)})"
    targets = {(host, port)} | {(canonical_host(a), port) for a in resolved}
    own = {_host_port(u) for u in own_urls(settings)} | {(canonical_host(a), p) for a, p in own_resolved}
    if targets & own:
        return "callback_url points at this service's own endpoints"
    if not allowed and any(_link_local(h) for h, _ in targets):
        # 169.254.169.254 and its kind: a cloud's metadata service (instance credentials), never a receiver
        return "callback_url points at a link-local address (a cloud metadata service?); list it in " \
               "POLAR_CALLBACK_ALLOWED_HOSTS if it is really the receiver"
    return None


# Clouds' metadata services outside the link-local range (AWS's IPv6 one, Alibaba's).
METADATA_ADDRESSES = {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")}


def _link_local(host: str) -> bool:
    address = _ip(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and (address.is_link_local or address in METADATA_ADDRESSES)
