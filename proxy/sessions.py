"""Which session a model call belongs to, and whether it may still call the model.

The id comes from the ``/s/<session_id>`` path prefix, else from the API key (the harness is
given the session id as its key). Nothing is auto-created: an unknown id is an error.
"""

from __future__ import annotations

from typing import Mapping

import redis

from pipeline import keys
from pipeline.schemas.task import SESSION_ID
from pipeline.status import SessionStatus
from proxy.errors import SessionNotActive, SessionNotFound

# Model calls are accepted while the session's runtime is up and the agent may run.
ACTIVE = (SessionStatus.INITIALIZING, SessionStatus.READY, SessionStatus.RUNNING)

# One round trip: check the status and, if active, take a sequence number and count the call
# as in flight (POSTRUN waits for in-flight calls before reading the records).
_BEGIN = """
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {0, ''} end
for i = 1, #ARGV do
  if ARGV[i] == st then
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('INCR', KEYS[2])
    redis.call('EXPIRE', KEYS[2], 86400)
    return {seq, st}
  end
end
return {-1, st}
"""


def session_id_from(path_sid: str | None, headers: Mapping[str, str], args: Mapping[str, str]) -> str | None:
    if path_sid:
        return path_sid
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    for name in ("x-api-key", "x-goog-api-key"):
        if headers.get(name):
            return headers[name].strip()
    return args.get("key") or None


class SessionGate:
    """Admits model calls of live sessions. It only *builds* Redis commands; the gateway sends
    them together with the pause gate's, so admission and release cost one round trip each."""

    def __init__(self, r: redis.Redis, records_ttl: int) -> None:
        self._r = r
        self.records_ttl = records_ttl
        self._sha = r.script_load(_BEGIN)
        self._active = [s.value for s in ACTIVE]

    def begin_commands(self, sid: str | None) -> list[tuple]:
        if not sid or not SESSION_ID.match(sid):
            raise SessionNotFound("no session: call /s/<session_id>/v1/... or use the session id as the API key")
        # EVALSHA of a script loaded at start; a Redis that lost it answers NOSCRIPT (``reload``).
        return [("EVALSHA", self._sha, 2, keys.session(sid), keys.session_inflight(sid), *self._active)]

    def reload(self) -> None:
        self._sha = self._r.script_load(_BEGIN)

    @staticmethod
    def admitted(sid: str, reply: list) -> int:
        """The sequence number of the admitted call, or the reason it is refused."""
        seq, status = reply
        if seq == 0:
            raise SessionNotFound(f"unknown session {sid!r}")
        if seq < 0:
            status = status.decode() if isinstance(status, bytes) else status
            raise SessionNotActive(f"session {sid!r} is {status} and no longer accepts model calls")
        return int(seq)

    def check(self, sid: str | None) -> None:
        """A known session (any status): for calls that read but do not sample."""
        if not sid or not SESSION_ID.match(sid) or not self._r.exists(keys.session(sid)):
            raise SessionNotFound(f"unknown session {sid!r}")

    def end_commands(self, sid: str, record_key: str | None = None, record: bytes | None = None) -> list[tuple]:
        cmds: list[tuple] = []
        if record_key and record is not None:
            cmds.append(("RPUSH", record_key, record))
            cmds.append(("EXPIRE", record_key, self.records_ttl))  # a session that never ends cannot leak
        cmds.append(("DECR", keys.session_inflight(sid)))
        return cmds
