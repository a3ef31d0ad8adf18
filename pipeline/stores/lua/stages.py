"""The stage scripts: leases, and a stage's two ends (the redelivery guard,
workers/stages/common.py)."""

from __future__ import annotations

from pipeline.stores.lua.script import Lua
from pipeline.stores.lua.sessions import _TRANSITION

# --- stage leases ----------------------------------------------------------------------------

# The lease take both scripts below start with (KEYS[1..3], ARGV[1..3] as LEASE_ACQUIRE's): the
# message is no longer sent-and-waiting; false when another live token holds the lease.
_TAKE_LEASE = """
local function take_lease()
  redis.call('ZREM', KEYS[3], ARGV[1])
  local now = redis.call('TIME')
  local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if exp and tonumber(exp) > t and redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return false end
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  return true
end
"""

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] sent zset. ARGV: member, token,
# ttl (ms). The stage's message has arrived (whatever happens next, it is not lost); takes the
# lease if it is free, expired, or already this token's. Returns 1 when held.
LEASE_ACQUIRE = Lua(
    "lease_acquire",
    _TAKE_LEASE
    + """
if not take_lease() then return 0 end
return 1
""",
)

# Same keys and ARGV. Extends the lease while this token holds it; 0 when it was lost.
LEASE_RENEW = Lua(
    "lease_renew",
    """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
return 1
""",
)

# The fence of a stage's copy (LEASE_CONFIRM, STAGE_FINISH): it was taken over when another copy
# holds its lease, or the reaper took the lapsed lease and sent the stage again (the sent record),
# or another copy finished the stage (its done field; '' when the caller marks none). A lease that
# lapsed with nobody taking it over is still its holder's. Returns whether, and the lease's owner.
_TAKEN_OVER = """
local function taken_over(owners, sent, session, member, token, done)
  local owner = redis.call('HGET', owners, member)
  if owner then
    if owner ~= token then return true, owner end
  elseif redis.call('ZSCORE', sent, member) then
    return true, owner
  end
  return done ~= '' and redis.call('HEXISTS', session, done) == 1, owner
end
"""

# KEYS[1..3] as LEASE_ACQUIRE's, KEYS[4] the session hash; ARGV: member, token, ttl (ms), the
# stage's done field, and optionally a session field and a value. Before an act that cannot be
# undone: {1} while this token holds the lease (extended), or when it lapsed with nobody taking it
# over (taken back); {0} when the stage was taken over (_TAKEN_OVER: the rule STAGE_FINISH fences
# by), nothing written. With a field, in the same step the value is kept in it unless one is there
# (the first copy's wins) and {1, the kept value} comes back: EVALUATE commits its grade so before
# tearing the runtimes down, and a copy re-run after a teardown began never grades again.
LEASE_CONFIRM = Lua(
    "lease_confirm",
    _TAKEN_OVER
    + """
if taken_over(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[4]) then return {0} end
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if not ARGV[5] then return {1} end
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('HSETNX', KEYS[4], ARGV[5], ARGV[6]) end
return {1, redis.call('HGET', KEYS[4], ARGV[5]) or ARGV[6]}
""",
)

# KEYS as above; ARGV: member, token. Drops the lease if this token holds it.
LEASE_RELEASE = Lua(
    "lease_release",
    """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
""",
)

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash. ARGV: ttl (ms), then member/token pairs:
# every lease one process holds, renewed in one call. Returns 1/0 per pair (0: lost).
LEASE_RENEW_MANY = Lua(
    "lease_renew_many",
    """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], t, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
""",
)

# --- a stage's two ends (the redelivery guard, workers/stages/common.py) ----------------------

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] sent zset, KEYS[4] session hash.
# ARGV: member, token, ttl (ms), the stage's started field, then field/value pairs written with
# the mark unless already there (a start stamp: a redelivered copy keeps the first). The stage's message has arrived: it is no longer sent-and-waiting;
# takes the lease (as LEASE_ACQUIRE), then reads the session and marks the stage started. Returns
# {0} when another live worker holds the lease, else {1, the session hash as it was before the
# mark} (an empty list: no such session, nothing written).
STAGE_BEGIN = Lua(
    "stage_begin",
    _TAKE_LEASE
    + """
if not take_lease() then return {0} end
local fields = redis.call('HGETALL', KEYS[4])
if #fields > 0 then
  redis.call('HSET', KEYS[4], ARGV[4], '1')
  for i = 5, #ARGV, 2 do redis.call('HSETNX', KEYS[4], ARGV[i], ARGV[i + 1]) end
end
return {1, fields}
""",
)

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] sent zset, KEYS[4] session hash,
# KEYS[5] the next stage's queue list, KEYS[6] the stage counters, KEYS[7] READY slots, KEYS[8]
# the READY list. ARGV: [1] lease member, [2] token, [3] done field ('' for none), [4] its value,
# [5] the next stage's member ('' for none), [6] now, [7] its message, [8] a status to move the
# session to ('' for none), [9] the statuses it may move from, [10] the move's token, [11] an
# outcome to record if none is yet ('' for none), [12] its error, [13] the run's counter field,
# [14] its duration bucket's field ('' for none), [15] the duration sum's field, [16] the
# duration, [17] a session id to park in READY ('' for none: only INIT's end does), [18] its
# slot's time to live in seconds, then field/value pairs written with the move (or on their own,
# when there is no move). The stage ends in one step: the session moved (if asked; when refused,
# nothing at all is written and {0, current status} comes back), the outcome recorded (the first
# one wins), the stage marked done (only on a session that still exists), the next stage's
# message recorded as sent and pushed onto its queue, the session parked in READY, the lease
# released if this token still holds it. KEYS[9..]: pairs of a staged key (the stage's output,
# written on the same MULTI just before) and its real name: renamed into place, or deleted when
# the end is refused.
# Fencing: a copy whose stage was taken over (_TAKEN_OVER) writes nothing at all and gets {-1, ''}
# -- no READY entry either (it was a plain write queued before the script, and a stalled INIT
# copy left one behind that held a slot until its time to live).
# Returns {1, previous status or ''}.
STAGE_FINISH = Lua(
    "stage_finish",
    _TRANSITION
    + _TAKEN_OVER
    + """
local function drop_staged()
  for i = 9, #KEYS, 2 do redis.call('DEL', KEYS[i]) end
end
local taken, owner = taken_over(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
if taken then
  drop_staged()
  return {-1, ''}
end
local moved = {1, ''}
local exists = nil  -- whether the session hash exists, once asked (a move found it)
local function session_exists()
  if exists == nil then exists = redis.call('EXISTS', KEYS[4]) == 1 end
  return exists
end
local writes = {}  -- the session's fields written after the move, in one HSET
if ARGV[8] ~= '' then
  moved = transition(KEYS[4], ARGV[8], ARGV[9], ARGV[10], 19)
  if moved[1] == 0 then
    drop_staged()
    return moved
  end
  exists = true
elseif #ARGV > 18 and session_exists() then
  for i = 19, #ARGV do writes[#writes + 1] = ARGV[i] end
end
redis.call('HINCRBY', KEYS[6], ARGV[13], 1)
if ARGV[14] ~= '' then
  redis.call('HINCRBY', KEYS[6], ARGV[14], 1)
  redis.call('HINCRBYFLOAT', KEYS[6], ARGV[15], ARGV[16])
end
if ARGV[11] ~= '' and session_exists() and redis.call('HSETNX', KEYS[4], 'outcome', ARGV[11]) == 1
   and ARGV[12] ~= '' then
  writes[#writes + 1] = 'error'
  writes[#writes + 1] = ARGV[12]
end
if ARGV[3] ~= '' and session_exists() then
  writes[#writes + 1] = ARGV[3]
  writes[#writes + 1] = ARGV[4]
end
if #writes > 0 then redis.call('HSET', KEYS[4], unpack(writes)) end
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[6], ARGV[5])
  redis.call('LPUSH', KEYS[5], ARGV[7])
end
if ARGV[17] ~= '' then
  local now = redis.call('TIME')
  redis.call('ZADD', KEYS[7], tonumber(now[1]) + tonumber(now[2]) / 1e6 + tonumber(ARGV[18]), ARGV[17])
  redis.call('LREM', KEYS[8], 0, ARGV[17])
  redis.call('RPUSH', KEYS[8], ARGV[17])
end
for i = 9, #KEYS, 2 do redis.call('RENAME', KEYS[i], KEYS[i + 1]) end
if owner == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return {1, moved[2]}
""",
)

# KEYS[1] sent zset, KEYS[2] the stage's queue list. ARGV: member, now, message. Sends a stage
# message outside a stage's end (the API's cancel, the reaper, early stop).
STAGE_SEND = Lua(
    "stage_send",
    """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return redis.call('LPUSH', KEYS[2], ARGV[3])
""",
)

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] seen-expired hash. ARGV: max count,
# grace (ms). Removes and returns up to that many leases (their holders died: each returned to
# exactly one caller) that have stayed expired -- the same expiry, never renewed -- for the grace
# since a pass first saw them so; marks the newly expired ones. Time in Redis jumps past every
# lease's expiry in an outage (or a failover to a host whose clock is ahead): the live holders
# reconnect and renew within the grace, so only the dead are taken. Forgets what was renewed,
# released or taken since it was seen. A grace of 0 takes every expired lease at once.
LEASE_TAKE_EXPIRED = Lua(
    "lease_take_expired",
    """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local grace = tonumber(ARGV[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local taken = {}
for i = 1, #gone, 2 do
  local m, exp = gone[i], gone[i + 1]
  local seen = redis.call('HGET', KEYS[3], m)
  local stamp, at = nil, nil
  if seen then
    local sep = string.find(seen, ':', 1, true)
    stamp, at = string.sub(seen, 1, sep - 1), tonumber(string.sub(seen, sep + 1))
  end
  if grace <= 0 or (stamp == exp and t - at >= grace) then
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
    redis.call('HDEL', KEYS[3], m)
    taken[#taken + 1] = m
  elseif stamp ~= exp then
    redis.call('HSET', KEYS[3], m, exp .. ':' .. t)
  end
end
if redis.call('HLEN', KEYS[3]) > #gone / 2 - #taken then  -- entries of leases no longer expired
  local entries = redis.call('HGETALL', KEYS[3])
  for i = 1, #entries, 2 do
    local score = redis.call('ZSCORE', KEYS[1], entries[i])
    if not score or tonumber(score) > t then redis.call('HDEL', KEYS[3], entries[i]) end
  end
end
return taken
""",
)
