"""The READY buffer's scripts."""

from __future__ import annotations

from pipeline.stores.lua.script import Lua
from pipeline.stores.lua.sessions import _TRANSITION

# --- READY buffer ----------------------------------------------------------------------------

# KEYS[1] slots zset. ARGV: session id, capacity, ttl. Frees expired slots, then takes (or
# renews) one if there is room.
READY_RESERVE = Lua(
    "ready_reserve",
    """
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
""",
)

# KEYS[1] slots zset, KEYS[2] session hash, KEYS[3] task hash. ARGV: session id, capacity, slot
# ttl, the task's waiting and running states, then the move's target, allowed statuses, token and
# field/value pairs (``transition``). INIT starts: a READY slot (as READY_RESERVE), the session's
# move to INITIALIZING, the task's PENDING -> RUNNING, in one step. {0} when the buffer is full
# (nothing written); {1, {0, status}} when the move is refused (the slot given back); else
# {1, the move's result}.
INIT_ADMIT = Lua(
    "init_admit",
    _TRANSITION
    + """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return {0}
end
local moved = transition(KEYS[2], ARGV[6], ARGV[7], ARGV[8], 9)
if moved[1] == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {1, moved}
end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
if redis.call('HGET', KEYS[3], 'state') == ARGV[4] then redis.call('HSET', KEYS[3], 'state', ARGV[5]) end
return {1, moved}
""",
)

# KEYS[1] slots zset, KEYS[2] READY list. ARGV: session id, ttl.
READY_PUSH = Lua(
    "ready_push",
    """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
return redis.call('RPUSH', KEYS[2], ARGV[1])
""",
)

# KEYS[1] slots zset, KEYS[2] READY list. ARGV: session id. Exactly one caller gets 1.
READY_CLAIM = Lua(
    "ready_claim",
    """
local n = redis.call('LREM', KEYS[2], 0, ARGV[1])
if n > 0 then redis.call('ZREM', KEYS[1], ARGV[1]) end
return n
""",
)

# KEYS[1] slots zset, KEYS[2] READY list, KEYS[3] session hash. ARGV: session id, then the
# move's target, allowed statuses, token and field/value pairs (``transition``). RUN takes its
# session out of READY and moves it to RUNNING in one step: {0} when it was not in READY (a
# canceller or another worker has it); {1, {0, status}} when the move is refused (nothing taken);
# else {1, the move's result} -- {1, {2, ...}} for a retry of this very claim.
READY_CLAIM_START = Lua(
    "ready_claim_start",
    _TRANSITION
    + """
if not redis.call('LPOS', KEYS[2], ARGV[1]) then
  if redis.call('HGET', KEYS[3], 'status') == ARGV[2] and redis.call('HGET', KEYS[3], 'transition_token') == ARGV[4] then
    return {1, {2, ARGV[2]}}
  end
  return {0}
end
local moved = transition(KEYS[3], ARGV[2], ARGV[3], ARGV[4], 5)
if moved[1] == 0 then return {1, moved} end
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return {1, moved}
""",
)
