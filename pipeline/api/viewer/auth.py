"""The viewer's login cookie.

A browser cannot add ``Authorization`` to a page navigation, so ``POST /viewer/session`` trades
the API token for a cookie: ``v1.<expiry>.<HMAC-SHA256(api token, expiry)>``. The cookie never
holds the token (an HMAC is not reversible), dies with its expiry or when the token is rotated,
and is ``HttpOnly`` (scripts cannot read it), ``SameSite=Strict`` (no other site's page can make
the browser send it) and scoped to ``Path=/viewer/api``. It is accepted only by the viewer's GET
data routes: nothing that submits, cancels or changes state takes it, so there is no CSRF
surface; those keep requiring the bearer header.
"""

from __future__ import annotations

import hashlib
import hmac
import re

COOKIE = "polar_viewer"
COOKIE_PATH = "/viewer/api"
LIFETIME_SECONDS = 8 * 3600
_VALUE = re.compile(r"^v1\.(\d{1,12})\.([0-9a-f]{64})$")


def _mac(token: str, expires: int) -> str:
    return hmac.new(token.encode(), f"polar-viewer-cookie|v1|{expires}".encode(), hashlib.sha256).hexdigest()


def cookie_value(token: str, now: float) -> tuple[str, int]:
    """(the cookie's value, its lifetime in seconds)."""
    expires = int(now) + LIFETIME_SECONDS
    return f"v1.{expires}.{_mac(token, expires)}", LIFETIME_SECONDS


def cookie_valid(value: str | None, token: str, now: float) -> bool:
    m = _VALUE.match(value or "")
    if m is None or int(m[1]) <= now:
        return False
    return hmac.compare_digest(m[2], _mac(token, int(m[1])))
