"""The session scripts: the state machine's one write, a model call's admission, a call's
weight-sync wait."""

from __future__ import annotations

from pipeline.stores.lua.script import Lua

# --- sessions --------------------------------------------------------------------------------

# The session state machine's one write, shared by the scripts that move a session: move the hash
# ``key`` to ``target`` if its status is one of ``allowed`` (comma-separated), writing the
# field/value pairs ARGV[first..] with it. Returns {1, previous}; {2, target} when this same write
# (same token) was already applied -- a client retrying after its connection dropped before the
# reply; {0, current-or-''} when refused (nothing written).
_TRANSITION = """
local function transition(key, target, allowed, token, first)
  local cur = redis.call('HGET', key, 'status')
  if not cur then return {0, ''} end
  if cur == target and redis.call('HGET', key, 'transition_token') == token then return {2, cur} end
  local ok = false
  for s in string.gmatch(allowed, '[^,]+') do
    if s == cur then ok = true end
  end
  if not ok then return {0, cur} end
  redis.call('HSET', key, 'status', target, 'transition_token', token, unpack(ARGV, first))
  return {1, cur}
end
"""

# KEYS[1] session hash. ARGV: target status, comma-separated allowed current statuses, a token
# naming this write, then field/value pairs written with the status. Returns as ``transition``.
SESSION_TRANSITION = Lua(
    "session_transition",
    _TRANSITION
    + """
return transition(KEYS[1], ARGV[1], ARGV[2], ARGV[3], 4)
""",
)

# KEYS[1] session hash, KEYS[2] the session's in-flight calls (zset). ARGV[1] the SHA-256 of the
# key the caller presented, ARGV[2] the call's lease expiry, ARGV[3] its id, then the statuses in
# which model calls are accepted. One round trip: check the key and the status and, if active,
# take a sequence number and lease the call in flight (POSTRUN waits for in-flight calls before
# reading the records). Returns {seq, status, token_in}; seq 0 = no session with this key, -1 =
# not accepting calls (status then says why); token_in = the session's agent.token_in ('' when
# off). A session being cancelled, or past its budget ('deadline') or its agent's own
# ('calls_until', agent_timeout), samples nothing more: its agent is being stopped, and an answer
# sampled now (an agent outliving its SIGTERM) would be a turn the budget never allowed. Nor does
# one that has had its 'max_calls' (agent.max_model_calls): the refusal marks 'calls_spent', on
# which RUN stops the agent.
SESSION_BEGIN_CALL = Lua(
    "session_begin_call",
    """
local st = redis.call('HGET', KEYS[1], 'status')
if not st or redis.call('HGET', KEYS[1], 'key_digest') ~= ARGV[1] then return {0, '', ''} end
for i = 4, #ARGV do
  if ARGV[i] == st then
    local f = redis.call('HMGET', KEYS[1], 'cancel', 'deadline', 'calls_until', 'token_in', 'max_calls', 'seq')
    if f[1] == '1' then return {-1, 'being cancelled', ''} end
    if f[5] and tonumber(f[6] or '0') >= tonumber(f[5]) then
      redis.call('HSET', KEYS[1], 'calls_spent', '1')
      return {-1, 'past its model-call budget (' .. f[5] .. ' calls)', ''}
    end
    if f[2] or f[3] then
      local now = redis.call('TIME')
      local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
      if (f[2] and t >= tonumber(f[2])) or (f[3] and t >= tonumber(f[3])) then
        return {-1, 'past its time budget', ''}
      end
    end
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
    redis.call('EXPIRE', KEYS[2], 86400)
    return {seq, st, f[4] or ''}
  end
end
return {-1, st, ''}
""",
)

# KEYS[1] session hash. ARGV[1] +1 (a call of the session starts waiting out a weight-sync pause),
# -1 (it stops) or 0 (it still waits: its proxy refreshes the mark), ARGV[2] how long a mark
# nobody refreshed stays believed. While any waits, ``parked_since`` holds when the first began
# and ``parked_seen`` when a proxy last said one waits; when the last stops, the span is added to
# ``parked_seconds``: how long the session's agent was held up by pauses, which RUN gives back to
# its budget. A mark not refreshed for ARGV[2] s was left by a proxy that died with its calls: its
# span ends at the last refresh (plus ARGV[2], as ``SessionStore.run_poll`` counts it), so it does
# not count every later pause. Nothing for a session that is gone. Returns the count.
SESSION_PARK = Lua(
    "session_park",
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local d, stale = tonumber(ARGV[1]), tonumber(ARGV[2])
local f = redis.call('HMGET', KEYS[1], 'parked', 'parked_since', 'parked_seen')
local n, since, seen = tonumber(f[1] or '0') or 0, tonumber(f[2] or '0') or 0, tonumber(f[3] or '0') or 0
local function close(at)
  if since > 0 and at > since then redis.call('HINCRBYFLOAT', KEYS[1], 'parked_seconds', at - since) end
  redis.call('HDEL', KEYS[1], 'parked_since', 'parked_seen')
  redis.call('HSET', KEYS[1], 'parked', '0')
  n, since = 0, 0
end
if n > 0 and seen > 0 and t - seen > stale then close(seen + stale) end
if d == 0 and n > 0 then
  redis.call('HSET', KEYS[1], 'parked_seen', string.format('%.6f', t))
  return n
end
if d == 0 then d = 1 end  -- a wait whose mark was taken for a dead proxy's: a span again
n = n + d
if d > 0 then
  if n == 1 then redis.call('HSET', KEYS[1], 'parked_since', string.format('%.6f', t)) end
  redis.call('HSET', KEYS[1], 'parked', n, 'parked_seen', string.format('%.6f', t))
elseif n <= 0 then
  close(t)
else
  redis.call('HSET', KEYS[1], 'parked', n)
end
return n
""",
)
