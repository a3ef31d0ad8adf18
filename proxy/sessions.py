"""Which session a model call belongs to, and whether it may still call the model.

The id comes from the ``/s/<session_id>`` path prefix, else from the API key (the harness is
given the session id as its key). Nothing is auto-created: an unknown id is an error. The
session hash and its in-flight counter belong to ``pipeline.stores.sessions.SessionStore``;
the gate only sends that store's commands inside the gateway's round trips.
"""

from __future__ import annotations

from typing import Any, Mapping

from pipeline.schemas.task import SESSION_ID
from pipeline.stores.sessions import SessionStore
from proxy.errors import SessionNotActive, SessionNotFound
from proxy.providers.base import Headers


def session_id_from(path_sid: str | None, headers: Headers, args: Mapping[str, str]) -> str | None:
    if path_sid:
        return path_sid
    auth = headers.get("Authorization") or ""
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    for name in ("x-api-key", "x-goog-api-key"):
        value = headers.get(name)
        if value:
            return str(value).strip()
    return args.get("key") or None


class SessionGate:
    """Admits model calls of live sessions. It only *builds* Redis commands; the gateway sends
    them together with the pause gate's, so admission and release cost one round trip each."""

    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions
        sessions.load_begin_call_script()

    def begin_commands(self, sid: str | None) -> list[tuple[Any, ...]]:
        if not sid or not SESSION_ID.match(sid):
            raise SessionNotFound("no session: call /s/<session_id>/v1/... or use the session id as the API key")
        # EVALSHA of a script loaded at start; a Redis that lost it answers NOSCRIPT (``reload``).
        return [(*self.sessions.begin_call_command(), *self.sessions.begin_call_args(sid))]

    def reload(self) -> None:
        self.sessions.load_begin_call_script()

    @staticmethod
    def admitted(sid: str, reply: list[Any]) -> int:
        """The sequence number of the admitted call, or the reason it is refused."""
        seq, status = reply
        if seq == 0:
            raise SessionNotFound(f"unknown session {sid!r}")
        if seq < 0:
            status = status.decode() if isinstance(status, bytes) else status
            raise SessionNotActive(f"session {sid!r} is {status} and no longer accepts model calls")
        return int(seq)

    def check(self, sid: str | None) -> str:
        """A known session (any status): for calls that read but do not sample."""
        if not sid or not SESSION_ID.match(sid) or not self.sessions.exists(sid):
            raise SessionNotFound(f"unknown session {sid!r}")
        return sid

    def end_commands(self, sid: str) -> list[tuple[Any, ...]]:
        return self.sessions.end_call_commands(sid)
