"""Session keys and token checks (pure).

A session has a public id (``sess-<32 hex>``: in statuses, results, Flower, logs) and a secret
key (``sk-polar-<32 hex>-<48 hex>``: 192 random bits after the id part) that exists only in the
session's runtime, as the base-URL path and every API key the harness is given. The proxy
accepts a model call only with the key of a live session: it reads the public id out of the key,
then compares the key's SHA-256 digest with the one stored for that session (one round trip).
The public id alone is never a credential.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
import uuid

SESSION_ID = re.compile(r"^sess-[0-9a-f]{32}$")
_KEY = re.compile(r"^sk-polar-(?P<id>[0-9a-f]{32})-(?P<secret>[0-9a-f]{48})$")


def new_session_id() -> str:
    return f"sess-{uuid.uuid4().hex}"


def new_session_key(session_id: str) -> str:
    return f"sk-polar-{session_id.removeprefix('sess-')}-{secrets.token_hex(24)}"


def session_of_key(key: str | None) -> str | None:
    """The public session id a key claims to belong to (None: not a session key)."""
    m = _KEY.match(key or "")
    return f"sess-{m['id']}" if m else None


@functools.lru_cache(maxsize=4096)  # the proxy checks the same few session keys on every call
def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same_secret(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented secret with the configured one."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, timestamp + "." + body): what a callback receiver
    recomputes to check that a POST came from this service and was not replayed later."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()
