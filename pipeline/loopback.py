"""Whether a host names this machine's loopback, from its text alone (pure; no DNS lookup).

One answer for the two places that need it: the API without a token answers only requests whose
Host is loopback (a re-pointed DNS name is not), and the CLI refuses to bind a surface without
its secret anywhere else. ``0.0.0.0`` is not loopback here: bound to, it listens on every
interface. Names are not resolved: ``127.example.com`` may resolve anywhere.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback", "localhost.localdomain"})


def is_loopback_name(host: str) -> bool:
    """``host`` (a name, an address, a bracketed IPv6 address) is ``localhost`` or its kin, a
    ``*.localhost`` name (RFC 6761 keeps them on loopback), or a loopback address."""
    name = host.strip("[]").lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback
