"""Every Redis key the project uses, in one place.

Session keys carry the session id as a Redis-Cluster hash tag (``{sid}``) so that every key of
one session lives in one slot and a Lua script may touch several of them. The READY buffer's
keys share the ``{ready}`` tag for the same reason. Nothing else in the code base builds a key
by hand.
"""

from __future__ import annotations

PREFIX = "polar"

# --- sessions --------------------------------------------------------------------------------


def session(sid: str) -> str:
    """Hash: status, task id, spec, timings, outcome, runtime handle, stage markers."""
    return f"{PREFIX}:sess:{{{sid}}}"


def session_completions(sid: str) -> str:
    """List of msgpack CompletionRecord blobs, in arrival order (written by the proxy)."""
    return f"{PREFIX}:sess:{{{sid}}}:completions"


def session_errors(sid: str) -> str:
    """List of msgpack records of failed upstream calls (never mixed with completions)."""
    return f"{PREFIX}:sess:{{{sid}}}:errors"


def session_turns(sid: str) -> str:
    """Hash: the session's recorded turns a later call may continue (``agent.token_in``; field
    ``<history key>|<completion id>``, value an entry of proxy/splice.py; written by the proxy)."""
    return f"{PREFIX}:sess:{{{sid}}}:turns"


def session_calls(sid: str) -> str:
    """Sorted set of the session's model calls in progress (member = call id, score = lease
    expiry, renewed by the proxy that holds the call), so POSTRUN can wait for stragglers."""
    return f"{PREFIX}:sess:{{{sid}}}:calls"


def session_trajectory(sid: str) -> str:
    """Trajectory blob (docs/result-blobs.md) built by POSTRUN, rewarded by EVALUATE."""
    return f"{PREFIX}:sess:{{{sid}}}:trajectory"


def session_result(sid: str) -> str:
    """SessionResult blob (docs/result-blobs.md), the terminal record (kept for polling after publication)."""
    return f"{PREFIX}:sess:{{{sid}}}:result"


def session_published(sid: str) -> str:
    """Results-stream entry id once the session's result has been published."""
    return f"{PREFIX}:sess:{{{sid}}}:published"


def session_responses(sid: str) -> str:
    """Stored Responses-API objects for previous_response_id (proxy)."""
    return f"{PREFIX}:sess:{{{sid}}}:responses"


def session_response_items(sid: str) -> str:
    """Input and output items of the stored Responses-API objects, by item id (proxy)."""
    return f"{PREFIX}:sess:{{{sid}}}:response-items"


# --- tasks -----------------------------------------------------------------------------------


def task(tid: str) -> str:
    """Hash: request JSON, state, counts, timestamps, callback delivery."""
    return f"{PREFIX}:task:{{{tid}}}"


def task_sessions(tid: str) -> str:
    """List of the task's session ids, in sample order."""
    return f"{PREFIX}:task:{{{tid}}}:sessions"


def task_finished(tid: str) -> str:
    """Set of session ids whose result has been counted (makes aggregation idempotent)."""
    return f"{PREFIX}:task:{{{tid}}}:finished"


def task_usable(tid: str) -> str:
    """Set of session ids that ended usable for training (early_stop_min_usable_sessions)."""
    return f"{PREFIX}:task:{{{tid}}}:usable"


def task_callback(tid: str) -> str:
    """Hash: the delivery of the task's result to its callback_url (the outbox record)."""
    return f"{PREFIX}:task:{{{tid}}}:callback"


def task_callback_lease(tid: str) -> str:
    """Held (with a TTL) by the process POSTing the task result right now."""
    return f"{PREFIX}:task:{{{tid}}}:callback-lease"


TASKS_INDEX = f"{PREFIX}:tasks"  # sorted set: task id -> submit time (trimmed to the task TTL)
REAPER_LOCK = f"{PREFIX}:reaper"  # one reaper pass at a time across all workers
CALLBACKS_DUE = f"{PREFIX}:callbacks:due"  # zset: task id -> when its callback delivery is due


def prune_lock(host: str) -> str:
    """One worker of a host prunes its old artifacts and results files per interval."""
    return f"{PREFIX}:prune:{host}"

# --- stage leases ----------------------------------------------------------------------------
# One entry per (stage, session) a worker is running, in one slot ({leases}) so a script updates
# both atomically: expiry (score = lease expiry, server time) and owner (the holder's token). The
# reaper reads the expired ones: O(lost stages), however many sessions are live.


def lease_member(stage: str, sid: str) -> str:
    return f"{stage}:{sid}"


LEASE_EXPIRY = f"{PREFIX}:{{leases}}:expiry"
LEASE_OWNER = f"{PREFIX}:{{leases}}:owner"
# Stage messages sent and not started yet (score = when sent). Starting a stage removes its
# entry; one that stays while its queue is empty was lost (an API that died between storing a
# task and dispatching it, a worker killed right after fetching a message) and is sent again.
LEASE_SENT = f"{PREFIX}:{{leases}}:sent"
# Expired leases a reaper pass has seen, not taken yet: member -> "<its expiry>:<when first seen
# expired>" (Redis ms). A lease is taken only once seen expired for a grace: after a Redis outage
# every lease looks expired at once, and their live holders renew them within the grace.
LEASE_SEEN_EXPIRED = f"{PREFIX}:{{leases}}:seen_expired"

# --- metrics (pipeline/stores/stage_metrics.py: fixed field sets, bounded) ---------------------

STAGE_METRICS = f"{PREFIX}:metrics:stages"  # hash: "<stage>|<result>", "<stage>|le|<bucket>", "<stage>|sum"
SESSION_METRICS = f"{PREFIX}:metrics:sessions"  # hash: terminal status -> sessions published

# --- READY buffer ----------------------------------------------------------------------------

READY_LIST = f"{PREFIX}:{{ready}}:list"  # session ids whose runtime is initialised, FIFO
READY_SLOTS = f"{PREFIX}:{{ready}}:slots"  # zset member=sid score=lease expiry (INIT + READY)

# --- results ---------------------------------------------------------------------------------

RESULTS_STREAM = f"{PREFIX}:results"
# Entries a consumer group gave up on (undecodable, or delivered POLAR_RESULTS_MAX_DELIVERIES
# times without an ack), copied here with the group and reason before being acked off the stream.
RESULTS_DEAD_LETTER = f"{PREFIX}:results:dead"
# Counters of the producer's trim: how often a trim was held back because a group still needed
# entries past the cap, and how many entries that kept beyond it (at the last trim).
RESULTS_TRIM_HELD = f"{PREFIX}:results:trim-held"
RESULTS_BACKLOG = f"{PREFIX}:results:backlog"


def results_handed(group: str) -> str:
    """Hash: entry id -> times handed to the group's trainer without an ack (``max_deliveries``
    counts these, not reads: an entry read ahead is not yet delivered). Deleted at the ack."""
    return f"{PREFIX}:results:handed:{group}"


def results_alive(group: str, consumer: str) -> str:
    """String with a TTL (the consumer's own ``claim_idle_ms``), renewed by a live results
    iterator: other consumers of the group claim nothing from a consumer while it exists, whatever
    their own ``claim_idle_ms``. Deleted when the iterator closes."""
    return f"{PREFIX}:results:alive:{group}:{consumer}"


def results_missed(group: str) -> str:
    """Hash written once, when the results iterator created consumer group ``group`` on a stream
    already trimmed: ``entries`` it can never read (removed before it existed; "?" when the server
    cannot tell, Redis < 7), ``first_kept`` (the oldest entry it starts from), ``max_deleted``,
    ``at``. Deleted with nothing else: the group's history."""
    return f"{PREFIX}:results:missed:{group}"


def results_closed_tasks(group: str) -> str:
    """Sorted set: task ids whose GRPO group a consumer group's ``iter_groups`` has yielded (score =
    the task's ``created_at``, or when it was closed where that is unknown), so a session of that
    task arriving after a consumer restart is dropped, not made a second group, while a later task
    submitted under the same id (once the first expired) is not. Trimmed to its TTL at every close."""
    return f"{PREFIX}:results:closed:{group}"


def results_lost(group: str, task_id: str) -> str:
    """Set: the sessions of ``task_id`` whose entries ``group`` dead-lettered before its GRPO group
    closed (``iter_groups`` closes the group without them, also after a restart). Expires with
    the closed-task marks; deleted when the group closes."""
    return f"{PREFIX}:results:lost:{group}:{task_id}"


def results_delivered(group: str) -> str:
    """Sorted set: session ids a consumer group has acked (score = ack time), so de-duplication
    of a twice-published session survives a consumer restart. Trimmed to its TTL at every ack."""
    return f"{PREFIX}:results:delivered:{group}"


def task_result_paths(tid: str) -> str:
    """Hash: session id -> its file in the results directory (written by CALLBACK)."""
    return f"{PREFIX}:task:{{{tid}}}:result-paths"

# --- proxy -----------------------------------------------------------------------------------

# The flag model calls read (one GET on the hot path): it exists exactly while some pause holder's
# lease is unexpired, kept so by the PROXY_PAUSE_* scripts, which expire it at the latest lease --
# a trainer that dies while paused stops holding the fleet once its lease runs out.
PROXY_PAUSED = f"{PREFIX}:proxy:paused"
PROXY_PAUSE_HOLDERS = f"{PREFIX}:proxy:pause-holders"  # hash: holder id -> lease expiry (Redis ms)
# Hash: how long inference has been paused in all (``total``, Redis ms) and the pause going on
# (``since``: its start, 0 when none; ``until``: its latest lease). RUN credits an agent the time
# its calls waited out pauses, never more than this clock grew meanwhile.
PROXY_PAUSE_CLOCK = f"{PREFIX}:proxy:pause-clock"
PROXY_CALLS = f"{PREFIX}:proxy:calls"  # zset: upstream calls in progress, all proxies (score = lease expiry)
PROXY_POLICY_VERSION = f"{PREFIX}:proxy:policy-version"  # stamped on every record
