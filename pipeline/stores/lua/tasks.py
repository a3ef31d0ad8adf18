"""The task record's scripts."""

from __future__ import annotations

from pipeline.stores.lua.script import Lua

# --- tasks -----------------------------------------------------------------------------------

# KEYS[1] task hash. ARGV: from-states (comma-separated), to-state. Returns 1 when moved.
TASK_STATE_CAS = Lua(
    "task_state_cas",
    """
local s = redis.call('HGET', KEYS[1], 'state')
if not s then return 0 end
for f in string.gmatch(ARGV[1], '[^,]+') do
  if s == f then redis.call('HSET', KEYS[1], 'state', ARGV[2]) return 1 end
end
return 0
""",
)

# KEYS[1] task hash. ARGV: cancelling, completed, cancelled, now. Idempotent: the first call
# decides completed/cancelled and stamps the end; later calls return that decision.
TASK_FINISH = Lua(
    "task_finish",
    """
local s = redis.call('HGET', KEYS[1], 'state')
if s == ARGV[2] or s == ARGV[3] then return s end
local f = (s == ARGV[1]) and ARGV[3] or ARGV[2]
redis.call('HSET', KEYS[1], 'state', f)
redis.call('HSETNX', KEYS[1], 'finished_at', ARGV[4])
return f
""",
)
