"""Every Lua script the project runs, registered the same way (``bind``).

A store binds the scripts it needs to its client; the result is redis-py's ``Script``, which
calls EVALSHA and reloads the source when Redis answers NOSCRIPT (after a restart). The proxy's
hot path sends EVALSHA itself inside its one round trip and reloads with ``source`` the same
way. Scripts touch only keys passed in KEYS and sharing a hash tag (Redis Cluster).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import redis
from redis.commands.core import Script


@dataclass(frozen=True)
class Lua:
    name: str
    source: str

    @cached_property  # the proxy sends it on every call
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()


def bind(r: redis.Redis, script: Lua) -> Script:
    return r.register_script(script.source)


# --- sessions --------------------------------------------------------------------------------

# KEYS[1] session hash. ARGV: target status, comma-separated allowed current statuses, a token
# naming this write, then field/value pairs written with the status. Returns {1, previous},
# {2, target} when this same write (same token) was already applied -- a client retrying after
# its connection dropped before the reply -- or {0, current-or-''} when refused.
SESSION_TRANSITION = Lua("session_transition", """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return {0, ''} end
if cur == ARGV[1] and redis.call('HGET', KEYS[1], 'transition_token') == ARGV[3] then return {2, cur} end
local ok = false
for s in string.gmatch(ARGV[2], '[^,]+') do
  if s == cur then ok = true end
end
if not ok then return {0, cur} end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'transition_token', ARGV[3])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return {1, cur}
""")

# KEYS[1] session hash, KEYS[2] the session's in-flight calls (zset). ARGV[1] the SHA-256 of the
# key the caller presented, ARGV[2] the call's lease expiry, ARGV[3] its id, then the statuses in
# which model calls are accepted. One round trip: check the key and the status and, if active,
# take a sequence number and lease the call in flight (POSTRUN waits for in-flight calls before
# reading the records). Returns {seq, status}; seq 0 = no session with this key, -1 = not
# accepting calls.
SESSION_BEGIN_CALL = Lua("session_begin_call", """
local st = redis.call('HGET', KEYS[1], 'status')
if not st or redis.call('HGET', KEYS[1], 'key_digest') ~= ARGV[1] then return {0, ''} end
for i = 4, #ARGV do
  if ARGV[i] == st then
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
    redis.call('EXPIRE', KEYS[2], 86400)
    return {seq, st}
  end
end
return {-1, st}
""")

# --- stage leases ----------------------------------------------------------------------------

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] sent zset. ARGV: member, token,
# ttl (ms). The stage's message has arrived (whatever happens next, it is not lost); takes the
# lease if it is free, expired, or already this token's. Returns 1 when held.
LEASE_ACQUIRE = Lua("lease_acquire", """
redis.call('ZREM', KEYS[3], ARGV[1])
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > t and redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
""")

# Same keys and ARGV. Extends the lease while this token holds it; 0 when it was lost.
LEASE_RENEW = Lua("lease_renew", """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
return 1
""")

# KEYS as above; ARGV: member, token. Drops the lease if this token holds it.
LEASE_RELEASE = Lua("lease_release", """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
""")

# KEYS as above; ARGV: max count. Removes and returns up to that many expired leases (their
# holders died): each is returned to exactly one caller.
LEASE_TAKE_EXPIRED = Lua("lease_take_expired", """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
end
return gone
""")

# --- READY buffer ----------------------------------------------------------------------------

# KEYS[1] slots zset. ARGV: session id, capacity, ttl. Frees expired slots, then takes (or
# renews) one if there is room.
READY_RESERVE = Lua("ready_reserve", """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
  return 1
end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
  return 1
end
return 0
""")

# KEYS[1] slots zset, KEYS[2] READY list. ARGV: session id, ttl.
READY_PUSH = Lua("ready_push", """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
return redis.call('RPUSH', KEYS[2], ARGV[1])
""")

# KEYS[1] slots zset, KEYS[2] READY list. ARGV: session id. Exactly one caller gets 1.
READY_CLAIM = Lua("ready_claim", """
local n = redis.call('LREM', KEYS[2], 0, ARGV[1])
if n > 0 then redis.call('ZREM', KEYS[1], ARGV[1]) end
return n
""")

# --- callback outbox --------------------------------------------------------------------------

# KEYS[1] outbox hash, KEYS[2] delivery lease, KEYS[3] due zset. ARGV: task id, lease ms, now.
# Starts a delivery attempt: {'go', attempt} when this caller may POST now; {'done', state}
# when the delivery has ended; {'busy', ''} while another attempt holds the lease.
CALLBACK_CLAIM = Lua("callback_claim", """
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return {'done', 'missing'} end
if st == 'delivered' or st == 'failed' or st == 'refused' then return {'done', st} end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return {'busy', ''} end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'state', 'delivering')
redis.call('ZADD', KEYS[3], tonumber(ARGV[3]) + tonumber(ARGV[2]) / 1000, ARGV[1])
return {'go', n}
""")

# --- tasks -----------------------------------------------------------------------------------

# KEYS[1] task hash. ARGV: from-states (comma-separated), to-state. Returns 1 when moved.
TASK_STATE_CAS = Lua("task_state_cas", """
local s = redis.call('HGET', KEYS[1], 'state')
if not s then return 0 end
for f in string.gmatch(ARGV[1], '[^,]+') do
  if s == f then redis.call('HSET', KEYS[1], 'state', ARGV[2]) return 1 end
end
return 0
""")

# KEYS[1] task hash. ARGV: cancelling, completed, cancelled, now. Idempotent: the first call
# decides completed/cancelled and stamps the end; later calls return that decision.
TASK_FINISH = Lua("task_finish", """
local s = redis.call('HGET', KEYS[1], 'state')
if s == ARGV[2] or s == ARGV[3] then return s end
local f = (s == ARGV[1]) and ARGV[3] or ARGV[2]
redis.call('HSET', KEYS[1], 'state', f)
redis.call('HSETNX', KEYS[1], 'finished_at', ARGV[4])
return f
""")
