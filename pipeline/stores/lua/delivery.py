"""The callback outbox's and the results stream's scripts."""

from __future__ import annotations

from pipeline.stores.lua.script import Lua

# --- callback outbox --------------------------------------------------------------------------

# KEYS[1] outbox hash, KEYS[2] delivery lease, KEYS[3] due zset. ARGV: task id, lease ms, now,
# max attempts. Starts a delivery attempt: {'go', attempt} when this caller may POST now;
# {'done', state} when the delivery has ended (out of attempts: ended now, as failed -- a resend
# by the reaper after a lost attempt must not make one more); {'busy', ''} while another
# attempt holds the lease.
CALLBACK_CLAIM = Lua(
    "callback_claim",
    """
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
""",
)

# --- the results stream -----------------------------------------------------------------------

# KEYS[1] the session's published marker, KEYS[2] the stream, KEYS[3] the sessions-by-status
# counters. ARGV: marker ttl, the pending-claim prefix, the session's status, then the entry's
# field/value pairs. Publishes a terminal session once (and counts it once): returns {entry id,
# stream length} when it appended, {the existing id, -1} when the session is already out,
# {'', -1} while a publisher of an older version holds its claim on it.
RESULTS_PUBLISH_ONCE = Lua(
    "results_publish_once",
    """
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
""",
)

# KEYS[1] the stream. ARGV: group, consumer, entry ids. Resets the idle time of the entries the
# consumer still holds (XCLAIM JUSTID: no delivery counted); one another consumer took stays.
RESULTS_TOUCH = Lua(
    "results_touch",
    """
local mine = {}
for i = 3, #ARGV do
  local row = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if row and row[2] == ARGV[2] then mine[#mine + 1] = ARGV[i] end
end
if #mine == 0 then return 0 end
mine[#mine + 1] = 'JUSTID'  -- (unpack() expands to all its values only as the last argument)
return #redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(mine))
""",
)
