"""Which session a model call belongs to, and whether it may still call the model.

The caller presents its session's secret key: in the ``/s/<key>`` path prefix, else as its API
key (``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key``, ``?key=``). The key names
the public session id it belongs to (``pipeline/credentials.py``); the call is admitted only if
the key's digest is the one stored for that session and the session is live. Nothing is
auto-created, and a public session id is never accepted as a key. The session hash and its
in-flight counter belong to ``pipeline.stores.sessions.SessionStore``; the gate only sends that
store's commands inside the gateway's round trips.
"""

from __future__ import annotations

from typing import Any, Mapping

from pipeline.credentials import session_of_key
from pipeline.schemas import TokenIn
from pipeline.stores.sessions import ACCEPTS_CALLS, SessionStore
from proxy.errors import SessionNotActive, SessionNotFound
from proxy.providers.base import Headers

NO_KEY = "no session key: call /s/<session key>/v1/... or send the session key as the API key"


def presented_key(path_key: str | None, headers: Headers, args: Mapping[str, str]) -> str | None:
    if path_key:
        return path_key
    auth = headers.get("Authorization") or ""
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    for name in ("x-api-key", "x-goog-api-key"):
        value = headers.get(name)
        if value:
            return str(value).strip()
    return args.get("key") or None


def session_for(key: str | None) -> str:
    """The public session id a well-formed key names (its validity is checked in Redis)."""
    sid = session_of_key(key)
    if sid is None:
        raise SessionNotFound(NO_KEY if not key else "this is not a session key (a session id is not a key)")
    return sid


class SessionGate:
    """Admits model calls of live sessions. It only *builds* Redis commands; the gateway sends
    them together with the pause gate's, so admission and release cost one round trip each."""

    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions
        sessions.load_begin_call_script()

    def begin_command(self, sid: str, key: str, call_id: str, expiry: float) -> tuple[Any, ...]:
        """The admission command of a call (``sid`` from ``session_for(key)``): EVALSHA of a
        script loaded at start; a Redis that lost it answers NOSCRIPT (``reload``)."""
        return (*self.sessions.begin_call_command(), *self.sessions.begin_call_args(sid, key, call_id, expiry))

    def reload(self) -> None:
        self.sessions.load_begin_call_script()

    @staticmethod
    def admitted(sid: str, reply: list[Any]) -> tuple[int, TokenIn]:
        """The sequence number of the admitted call and its session's token-in mode, or the
        reason it is refused."""
        seq, status, *rest = reply
        if seq == 0:
            raise SessionNotFound(f"no session {sid} with this key")
        if seq < 0:
            status = status.decode() if isinstance(status, bytes) else status
            raise SessionNotActive(f"session {sid} is {status} and no longer accepts model calls")
        mode = rest[0].decode() if rest and isinstance(rest[0], bytes) else (rest[0] if rest else "")
        return int(seq), TokenIn(mode) if mode else TokenIn.OFF

    def check(self, key: str | None) -> str:
        """The session of a live session's key: for calls that read but do not sample (stored
        responses, token counts). An ended session's key opens nothing (its copies in artifacts
        are redacted, but a key is dead once its session ends)."""
        sid = session_for(key)
        status = self.sessions.key_status(sid, key or "")
        if status is None:
            raise SessionNotFound(f"no session {sid} with this key")
        if status not in ACCEPTS_CALLS:
            raise SessionNotActive(f"session {sid} is {status.value} and no longer accepts calls")
        return sid

