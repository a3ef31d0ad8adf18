"""The proxy's weight-sync pause: holds, leases and the pause clock."""

from __future__ import annotations

from pipeline.stores.lua.script import Lua

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
PROXY_PAUSE_HOLD = Lua(
    "proxy_pause_hold",
    _PAUSE_SETTLE
    + """
local now = now_ms()
local expiry = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', expiry))
local held = settle(KEYS[1], KEYS[2], KEYS[3], now)
return {expiry, held[1], held[2], held[3]}
""",
)

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
PROXY_PAUSE_RELEASE = Lua(
    "proxy_pause_release",
    _PAUSE_SETTLE
    + """
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
""",
)
