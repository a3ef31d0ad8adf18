"""Every Lua script the project runs, registered the same way (``bind``).

A store binds the scripts it needs to its client; the result is redis-py's ``Script``, which
calls EVALSHA and reloads the source when Redis answers NOSCRIPT (after a restart). The proxy's
hot path sends EVALSHA itself inside its one round trip and reloads with ``source`` the same
way. Scripts touch only keys passed in KEYS. Most share a hash tag; the stage scripts
(STAGE_BEGIN, STAGE_FINISH, STAGE_SEND) span a session, the stage leases and a stage queue, so
broker and state live on one Redis (as kombu's Redis transport needs anyway: no Cluster).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

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


def queue(pipe: Any, script: Lua, keys: list[str], args: list[Any]) -> None:
    """Add ``script`` to a pipeline as a bare EVALSHA. (redis-py's ``Script`` would first ask
    whether it is loaded -- a round trip -- and EVAL would send its source every time.) Run the
    pipeline with ``execute``, which loads the scripts and runs it again after a Redis restart."""
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def execute(r: redis.Redis, build: Callable[[Any], None], *, transaction: bool) -> list[Any]:
    """Build a pipeline with ``build`` and run it; when Redis has forgotten the script (NOSCRIPT:
    restarted since), load every script and run the whole pipeline once more. A pipeline holds
    one script at most, so a NOSCRIPT means no script of it ran (a MULTI runs its other commands
    regardless: with two scripts, one could run without the other); its other commands are plain
    writes, safe to apply twice, as its script is (ours recognise their own retry)."""
    for attempt in (1, 2):
        pipe = r.pipeline(transaction=transaction)
        build(pipe)
        scripts = sum(1 for args, _ in pipe.command_stack if args[0] == "EVALSHA")
        if scripts > 1:
            raise ValueError(f"a pipeline run by lua.execute holds one script at most, not {scripts}")
        replies = pipe.execute(raise_on_error=False)
        errors = [x for x in replies if isinstance(x, redis.ResponseError)]
        if not errors:
            return replies
        if attempt == 1 and any(isinstance(x, redis.exceptions.NoScriptError) or str(x).startswith("NOSCRIPT")
                                for x in errors):
            for script in ALL.values():
                r.script_load(script.source)
            continue
        raise errors[0]
    raise AssertionError("unreachable")


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
  redis.call('HSET', key, 'status', target, 'transition_token', token)
  for i = first, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
  return {1, cur}
end
"""

# KEYS[1] session hash. ARGV: target status, comma-separated allowed current statuses, a token
# naming this write, then field/value pairs written with the status. Returns as ``transition``.
SESSION_TRANSITION = Lua("session_transition", _TRANSITION + """
return transition(KEYS[1], ARGV[1], ARGV[2], ARGV[3], 4)
""")

# KEYS[1] session hash, KEYS[2] the session's in-flight calls (zset). ARGV[1] the SHA-256 of the
# key the caller presented, ARGV[2] the call's lease expiry, ARGV[3] its id, then the statuses in
# which model calls are accepted. One round trip: check the key and the status and, if active,
# take a sequence number and lease the call in flight (POSTRUN waits for in-flight calls before
# reading the records). Returns {seq, status, token_in}; seq 0 = no session with this key, -1 =
# not accepting calls (status then says why); token_in = the session's agent.token_in ('' when
# off). A session being cancelled, or past its budget ('deadline') or its agent's own
# ('calls_until', agent_timeout), samples nothing more: its agent is being stopped, and an answer
# sampled now (an agent outliving its SIGTERM) would be a turn the budget never allowed.
SESSION_BEGIN_CALL = Lua("session_begin_call", """
local st = redis.call('HGET', KEYS[1], 'status')
if not st or redis.call('HGET', KEYS[1], 'key_digest') ~= ARGV[1] then return {0, '', ''} end
for i = 4, #ARGV do
  if ARGV[i] == st then
    local f = redis.call('HMGET', KEYS[1], 'cancel', 'deadline', 'calls_until', 'token_in')
    if f[1] == '1' then return {-1, 'being cancelled', ''} end
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
""")

# KEYS[1] session hash. ARGV[1] +1 (a call of the session starts waiting out a weight-sync pause),
# -1 (it stops) or 0 (it still waits: its proxy refreshes the mark), ARGV[2] how long a mark
# nobody refreshed stays believed. While any waits, ``parked_since`` holds when the first began
# and ``parked_seen`` when a proxy last said one waits; when the last stops, the span is added to
# ``parked_seconds``: how long the session's agent was held up by pauses, which RUN gives back to
# its budget. A mark not refreshed for ARGV[2] s was left by a proxy that died with its calls: its
# span ends at the last refresh (plus ARGV[2], as ``SessionStore.run_poll`` counts it), so it does
# not count every later pause. Nothing for a session that is gone. Returns the count.
SESSION_PARK = Lua("session_park", """
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
LEASE_CONFIRM = Lua("lease_confirm", _TAKEN_OVER + """
if taken_over(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[4]) then return {0} end
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if not ARGV[5] then return {1} end
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('HSETNX', KEYS[4], ARGV[5], ARGV[6]) end
return {1, redis.call('HGET', KEYS[4], ARGV[5]) or ARGV[6]}
""")

# KEYS as above; ARGV: member, token. Drops the lease if this token holds it.
LEASE_RELEASE = Lua("lease_release", """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
""")

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash. ARGV: ttl (ms), then member/token pairs:
# every lease one process holds, renewed in one call. Returns 1/0 per pair (0: lost).
LEASE_RENEW_MANY = Lua("lease_renew_many", """
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
""")

# --- a stage's two ends (the redelivery guard, workers/stages/common.py) ----------------------

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] sent zset, KEYS[4] session hash.
# ARGV: member, token, ttl (ms), the stage's started field, then field/value pairs written with
# the mark unless already there (a start stamp: a redelivered copy keeps the first). The stage's message has arrived: it is no longer sent-and-waiting;
# takes the lease (as LEASE_ACQUIRE), then reads the session and marks the stage started. Returns
# {0} when another live worker holds the lease, else {1, the session hash as it was before the
# mark} (an empty list: no such session, nothing written).
STAGE_BEGIN = Lua("stage_begin", """
redis.call('ZREM', KEYS[3], ARGV[1])
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > t and redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return {0} end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local fields = redis.call('HGETALL', KEYS[4])
if #fields > 0 then
  redis.call('HSET', KEYS[4], ARGV[4], '1')
  for i = 5, #ARGV, 2 do redis.call('HSETNX', KEYS[4], ARGV[i], ARGV[i + 1]) end
end
return {1, fields}
""")

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
STAGE_FINISH = Lua("stage_finish", _TRANSITION + _TAKEN_OVER + """
local function drop_staged()
  for i = 9, #KEYS, 2 do redis.call('DEL', KEYS[i]) end
end
local taken, owner = taken_over(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
if taken then
  drop_staged()
  return {-1, ''}
end
local moved = {1, ''}
if ARGV[8] ~= '' then
  moved = transition(KEYS[4], ARGV[8], ARGV[9], ARGV[10], 19)
  if moved[1] == 0 then
    drop_staged()
    return moved
  end
elseif #ARGV > 18 and redis.call('EXISTS', KEYS[4]) == 1 then
  for i = 19, #ARGV, 2 do redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1]) end
end
redis.call('HINCRBY', KEYS[6], ARGV[13], 1)
if ARGV[14] ~= '' then
  redis.call('HINCRBY', KEYS[6], ARGV[14], 1)
  redis.call('HINCRBYFLOAT', KEYS[6], ARGV[15], ARGV[16])
end
if ARGV[11] ~= '' and redis.call('EXISTS', KEYS[4]) == 1 and redis.call('HSETNX', KEYS[4], 'outcome', ARGV[11]) == 1
   and ARGV[12] ~= '' then
  redis.call('HSET', KEYS[4], 'error', ARGV[12])
end
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[4]) == 1 then redis.call('HSET', KEYS[4], ARGV[3], ARGV[4]) end
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
""")

# KEYS[1] sent zset, KEYS[2] the stage's queue list. ARGV: member, now, message. Sends a stage
# message outside a stage's end (the API's cancel, the reaper, early stop).
STAGE_SEND = Lua("stage_send", """
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return redis.call('LPUSH', KEYS[2], ARGV[3])
""")

# KEYS[1] lease expiry zset, KEYS[2] lease owner hash, KEYS[3] seen-expired hash. ARGV: max count,
# grace (ms). Removes and returns up to that many leases (their holders died: each returned to
# exactly one caller) that have stayed expired -- the same expiry, never renewed -- for the grace
# since a pass first saw them so; marks the newly expired ones. Time in Redis jumps past every
# lease's expiry in an outage (or a failover to a host whose clock is ahead): the live holders
# reconnect and renew within the grace, so only the dead are taken. Forgets what was renewed,
# released or taken since it was seen. A grace of 0 takes every expired lease at once.
LEASE_TAKE_EXPIRED = Lua("lease_take_expired", """
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

# KEYS[1] slots zset, KEYS[2] session hash, KEYS[3] task hash. ARGV: session id, capacity, slot
# ttl, the task's waiting and running states, then the move's target, allowed statuses, token and
# field/value pairs (``transition``). INIT starts: a READY slot (as READY_RESERVE), the session's
# move to INITIALIZING, the task's PENDING -> RUNNING, in one step. {0} when the buffer is full
# (nothing written); {1, {0, status}} when the move is refused (the slot given back); else
# {1, the move's result}.
INIT_ADMIT = Lua("init_admit", _TRANSITION + """
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

# KEYS[1] slots zset, KEYS[2] READY list, KEYS[3] session hash. ARGV: session id, then the
# move's target, allowed statuses, token and field/value pairs (``transition``). RUN takes its
# session out of READY and moves it to RUNNING in one step: {0} when it was not in READY (a
# canceller or another worker has it); {1, {0, status}} when the move is refused (nothing taken);
# else {1, the move's result} -- {1, {2, ...}} for a retry of this very claim.
READY_CLAIM_START = Lua("ready_claim_start", _TRANSITION + """
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
""")

# --- callback outbox --------------------------------------------------------------------------

# KEYS[1] outbox hash, KEYS[2] delivery lease, KEYS[3] due zset. ARGV: task id, lease ms, now,
# max attempts. Starts a delivery attempt: {'go', attempt} when this caller may POST now;
# {'done', state} when the delivery has ended (out of attempts: ended now, as failed -- a resend
# by the reaper after a lost attempt must not make one more); {'busy', ''} while another
# attempt holds the lease.
CALLBACK_CLAIM = Lua("callback_claim", """
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return {'done', 'missing'} end
if st == 'delivered' or st == 'failed' or st == 'refused' then return {'done', st} end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return {'busy', ''} end
if tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0') >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[2])
  return {'done', 'failed'}
end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'state', 'delivering')
redis.call('ZADD', KEYS[3], tonumber(ARGV[3]) + tonumber(ARGV[2]) / 1000, ARGV[1])
return {'go', n}
""")

# --- the results stream -----------------------------------------------------------------------

# KEYS[1] the session's published marker, KEYS[2] the stream, KEYS[3] the sessions-by-status
# counters. ARGV: marker ttl, the pending-claim prefix, the session's status, then the entry's
# field/value pairs. Publishes a terminal session once (and counts it once): returns {entry id,
# stream length} when it appended, {the existing id, -1} when the session is already out,
# {'', -1} while a publisher of an older version holds its claim on it.
RESULTS_PUBLISH_ONCE = Lua("results_publish_once", """
local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, #ARGV[2]) == ARGV[2] then return {'', -1} end
  return {cur, -1}
end
local entry = {}
for i = 4, #ARGV do entry[#entry + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[2], '*', unpack(entry))
redis.call('SET', KEYS[1], id, 'EX', ARGV[1])
redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
return {id, redis.call('XLEN', KEYS[2])}
""")

# KEYS[1] the stream. ARGV: group, consumer, entry ids. Resets the idle time of the entries the
# consumer still holds (XCLAIM JUSTID: no delivery counted); one another consumer took stays.
RESULTS_TOUCH = Lua("results_touch", """
local mine = {}
for i = 3, #ARGV do
  local row = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if row and row[2] == ARGV[2] then mine[#mine + 1] = ARGV[i] end
end
if #mine == 0 then return 0 end
mine[#mine + 1] = 'JUSTID'  -- (unpack() expands to all its values only as the last argument)
return #redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(mine))
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


# --- proxy weight sync ------------------------------------------------------------------------

# Pause holders (a hash: holder -> lease expiry, Redis ms) and the flag model calls read. After any
# change, ``settle`` drops lapsed holders and makes the flag (and the hash) expire with the latest
# lease left, or deletes both when none is left: the flag exists exactly while some hold is live,
# so a holder that dies ends its pause when its lease runs out, with nobody to clean up.
# ``settle`` also keeps the pause clock (keys.PROXY_PAUSE_CLOCK): a pause that ended -- now, or
# unseen when its last lease lapsed -- is added to ``total``, and a pause starting sets ``since``.
_PAUSE_SETTLE = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function clock(key, n, latest, now)
  local c = redis.call('HMGET', key, 'since', 'until')
  local since, untl = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  if since > 0 and (n == 0 or untl <= now) then
    local ended = math.min(now, untl)
    if ended > since then redis.call('HINCRBY', key, 'total', ended - since) end
    since = 0
    redis.call('HSET', key, 'since', '0')
  end
  if n > 0 then
    if since == 0 then redis.call('HSET', key, 'since', string.format('%d', now)) end
    redis.call('HSET', key, 'until', string.format('%d', latest))
  end
end
local function settle(holders, flag, clock_key, now)
  local all = redis.call('HGETALL', holders)
  local n, soonest, latest = 0, 0, 0
  for i = 1, #all, 2 do
    local exp = tonumber(all[i + 1])
    if exp and exp > now then
      n = n + 1
      if soonest == 0 or exp < soonest then soonest = exp end
      if exp > latest then latest = exp end
    else
      redis.call('HDEL', holders, all[i])
    end
  end
  if n == 0 then
    redis.call('DEL', flag, holders)
  else
    redis.call('SET', flag, '1')
    redis.call('PEXPIREAT', flag, string.format('%d', latest))
    redis.call('PEXPIREAT', holders, string.format('%d', latest))
  end
  clock(clock_key, n, latest, now)
  return {n, soonest, latest}
end
"""

# KEYS[1] pause holders, KEYS[2] pause flag, KEYS[3] pause clock. ARGV: holder, lease (ms). Holds (or renews: the same
# holder again) the pause until now + lease. Returns {this hold's expiry, holders, soonest, latest}.
PROXY_PAUSE_HOLD = Lua("proxy_pause_hold", _PAUSE_SETTLE + """
local now = now_ms()
local expiry = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', expiry))
local held = settle(KEYS[1], KEYS[2], KEYS[3], now)
return {expiry, held[1], held[2], held[3]}
""")

# KEYS[1] pause holders, KEYS[2] pause flag, KEYS[3] policy version, KEYS[4] proxy calls in flight,
# KEYS[5] pause clock.
# ARGV: holder ('' = the only one), force ('1'), the new policy version ('' = keep), now (the
# proxies' clock, which scores call leases). Ends one hold and sets the version in one step, so no
# call is admitted under the new version while another holder still loads weights. Refused
# (nothing written) unless forced: 'ambiguous' (no holder named, several hold), 'unknown' (the
# holder holds nothing: lapsed or never held), 'inflight' (a version while calls admitted under
# the old one still run), 'backwards' (an integer version below the current integer one: lag
# would go negative; checked here, so two resumes racing cannot both pass it). Returns {verdict, holders, soonest, latest, calls in flight}; 'released'
# on success (force ends every hold). No holder and none held: the flag is just settled.
PROXY_PAUSE_RELEASE = Lua("proxy_pause_release", _PAUSE_SETTLE + """
local now = now_ms()
local held = settle(KEYS[1], KEYS[2], KEYS[5], now)
local holder, force, version = ARGV[1], ARGV[2] == '1', ARGV[3]
if not force then
  if holder == '' and held[1] > 1 then return {'ambiguous', held[1], held[2], held[3], 0} end
  if holder ~= '' and redis.call('HEXISTS', KEYS[1], holder) == 0 then
    return {'unknown', held[1], held[2], held[3], 0}
  end
  if version ~= '' then
    local running = redis.call('ZCOUNT', KEYS[4], '(' .. ARGV[4], '+inf')
    if running > 0 then return {'inflight', held[1], held[2], held[3], running} end
    local current = redis.call('GET', KEYS[3])
    if current and string.match(version, '^%d+$') and string.match(current, '^%d+$')
        and tonumber(version) < tonumber(current) then
      return {'backwards', held[1], held[2], held[3], 0}
    end
  end
end
if version ~= '' then redis.call('SET', KEYS[3], version) end
if force or holder == '' then redis.call('DEL', KEYS[1]) else redis.call('HDEL', KEYS[1], holder) end
local left = settle(KEYS[1], KEYS[2], KEYS[5], now)
return {'released', left[1], left[2], left[3], 0}
""")


ALL = {value.name: value for value in list(globals().values()) if isinstance(value, Lua)}
