"""RUN: claim the session's runtime from READY and execute the harness within the remaining
budget. A run slot is held for the whole agent session; the worker mostly waits on the agent's
process group, polling for cancellation. Timeout and cancel kill the whole group; whatever the
proxy captured until then still becomes a (partial) trajectory in POSTRUN."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import F, SessionState
from pipeline.stores.stage_runs import Handoff
from workers import harnesses, runtimes
from workers.harnesses import HarnessContext
from workers.stages.common import Deps, Skip, log
from workers.stages.eval_runtime import Warmup
from workers.stages.run_clock import RunClock


def body(d: Deps, state: SessionState, lease: StageLease) -> Handoff:
    sid = state.session_id
    now = time.time()
    start: dict[str, float] = {"run_started_at": now}
    own = agent_timeout(state)
    if own is not None:  # the proxy samples nothing for the agent after it (and after the deadline)
        start[F.CALLS_UNTIL.value] = now + own
    # The claim and, in its round trip (read just ahead of it), the clocks the agent's pause credit
    # counts from: the time the session's calls have waited out pauses, and the proxy's pause clock.
    def clocks(pipe: Any) -> None:
        d.stores.sessions.queue_run_poll(pipe, sid)
        d.stores.proxy_control.queue_pause_clock(pipe)
        pipe.time()

    claimed, (poll_row, clock_row, redis_now) = d.stores.ready.claim_to_reading(sid, SessionStatus.RUNNING, start, clocks)
    if not claimed:
        raise Skip(f"not in READY (status {d.stores.sessions.status(sid)})")
    bases = (d.stores.sessions.parse_run_poll(poll_row, redis_now).parked,
             d.stores.proxy_control.parse_paused_seconds(clock_row, redis_now))
    try:
        outcome, error, exit_code = _run_agent(d, state, lease, start.get(F.CALLS_UNTIL.value), bases)
    except Exception as exc:  # the harness could not even be launched
        outcome, error, exit_code = Outcome.ERROR, f"run: {exc}", None
    log.info("run %s: %s", sid, outcome.value)
    # The outcome (unless a canceller's came first), the move to POSTRUN and POSTRUN's message: one step.
    return Handoff(Stage.POSTRUN, SessionStatus.POSTRUN, (SessionStatus.RUNNING,),
                   {"run_ended_at": time.time(), "agent_exit_code": "" if exit_code is None else exit_code},
                   outcome=outcome, error=error)


def _run_agent(d: Deps, state: SessionState, lease: StageLease, calls_until: float | None,
               bases: tuple[float, float]) -> tuple[Outcome, str | None, int | None]:
    """``bases``: the session's waited time and the proxy's pause clock as RUN started."""
    sid, spec = state.session_id, state.spec
    if state.cancel_requested:  # as read when this stage began, a moment ago
        return Outcome.CANCELLED, "cancelled before the agent ran", None
    remaining = state.remaining()
    if remaining is None or remaining <= 0:
        return Outcome.TIMEOUT, "time budget used up before the agent ran", None
    runtime = runtimes.attach(state.runtime or {})
    env = harnesses.harness_env(runtime.reachable_url(d.settings.proxy_url), spec, state.key or "")
    cmd = harnesses.create(spec.agent.harness or "shell").command(HarnessContext(spec, env))
    own = agent_timeout(state)
    limit = min(remaining, own) if own is not None else remaining
    stopped: list[tuple[Outcome, str]] = []  # why the run stopped the agent itself (a full disk, its call budget)
    # The limit is kept here, not by the runtime: time paused for weight sync moves it. (Made
    # before the warm-up starts: nothing is left to clean up when Redis fails it.)
    clock = RunClock(limit, d.stores.proxy_control.paused_seconds, bases[0],
                     lambda fields: d.stores.sessions.set(sid, **fields),
                     {F.DEADLINE.value: state.deadline, F.CALLS_UNTIL.value: calls_until}, paused_base=bases[1])
    warmup = Warmup.start(d, state)  # the evaluation runtime, made while the agent runs
    try:
        res = runtime.exec(
            cmd.command, cwd=cmd.cwd, env={**env, **cmd.env}, log_name="agent",
            should_cancel=_cancel_check(d, sid, lease, stopped, clock, spec.agent.max_model_calls),
        )
    finally:
        if warmup is not None:
            warmup.wait()
        _end_leftovers(runtime, sid)
        clock.finish()
    if stopped:
        return stopped[0][0], stopped[0][1], None
    # An agent that failed once its budget was over, or once a cancel came, failed because of it
    # (the proxy refuses such a session's calls: the agent exits on the error before it is killed).
    failed = not res.timed_out and not res.cancelled and res.exit_code != 0
    if clock.over or res.timed_out or (failed and time.time() >= clock.calls_end()):
        if limit < remaining:
            return Outcome.TIMEOUT, f"agent exceeded its {own:g}s agent_timeout", None
        return Outcome.TIMEOUT, f"agent exceeded the {spec.timeout_seconds:.0f}s budget", None
    if lease.lost.is_set():  # (this copy's end is refused: the copy that took over says what happened)
        return Outcome.ERROR, "run worker lost its lease", None
    if res.cancelled or (failed and d.stores.sessions.cancel_requested(sid)):
        return Outcome.CANCELLED, "cancelled while the agent ran", None
    if failed and spec.agent.max_model_calls and d.stores.sessions.run_poll(sid).calls_spent:
        return Outcome.TIMEOUT, calls_spent(spec.agent.max_model_calls), None  # it exited on the refusal
    if res.exit_code != 0:
        return Outcome.ERROR, f"agent exited {res.exit_code}: {output_tail(res)}", res.exit_code
    return Outcome.COMPLETED, None, 0


def calls_spent(budget: int) -> str:
    return f"agent used its model-call budget ({budget} calls: agent.max_model_calls)"


def _end_leftovers(runtime: runtimes.Runtime, sid: str) -> None:
    """Kill what the agent left running once it is done (a daemon that would rewrite files while
    the grader runs in this runtime, or keep a port); runtimes without processes of their own to
    end have no ``end_processes``."""
    end = getattr(runtime, "end_processes", None)
    if end is None:
        return
    try:
        end()
    except Exception as exc:  # best effort: the teardown kills them in any case
        log.warning("session %s: could not end what the agent left running: %s", sid, exc)


def agent_timeout(state: SessionState) -> float | None:
    """Polar's ``metadata.agent_timeout``: the agent's own budget in seconds, from RUN's start."""
    value = state.spec.metadata.get("agent_timeout")
    return float(value) if value else None


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def output_tail(res: runtimes.ExecResult, limit: int = 1000) -> str:
    """The end of what the agent printed: stderr, else stdout (some CLIs print errors there)."""
    text = ANSI.sub("", res.stderr).strip() or ANSI.sub("", res.stdout).strip()
    if len(text) <= limit:
        return text or "(no output)"
    tail = text[-limit:]
    start = tail.find("\n")  # whole lines: the first one kept is not cut in the middle
    return "..." + (tail[start:] if 0 <= start < limit // 2 else tail)


def _cancel_check(d: Deps, sid: str, lease: StageLease, stopped: list[tuple[Outcome, str]], clock: RunClock,
                  budget: int | None):
    """Polled by the runtime while the agent runs: the stage lease was lost, the agent's time is
    up (``clock``), a cancel was requested (read from Redis at most every ``cancel_poll_seconds``,
    with the time the session's calls waited out pauses), the proxy refused a call past the
    session's model-call budget, or the disk is running full (the last two say so in ``stopped``)."""
    next_read = [time.monotonic() + d.settings.cancel_poll_seconds]  # the stage's start just read it
    watched = (d.settings.home, d.settings.runtime_root)

    def should_cancel() -> bool:
        if lease.lost.is_set() or clock.over:
            return True
        now = time.monotonic()
        # Read at the poll, and also as the limit is reached: a call that began waiting out a
        # pause since the last read moves the limit (its wait is not charged to the agent).
        if now < next_read[0] and not clock.reached():
            return False
        next_read[0] = now + d.settings.cancel_poll_seconds
        short = disk_shortfall(watched, d.settings.min_free_disk_mb, d.settings.min_free_inodes)
        if short:
            log.error("run %s: %s", sid, short)
            stopped.append((Outcome.ERROR, short))
            return True
        poll = d.stores.sessions.run_poll(sid)
        clock.observe(poll.parked)
        if poll.calls_spent and budget:
            stopped.append((Outcome.TIMEOUT, calls_spent(budget)))
            return True
        return clock.expired() or poll.cancel

    return should_cancel


def disk_shortfall(paths: tuple[Path, ...], min_free_mb: int, min_free_inodes: int = 0) -> str | None:
    """Why a running agent must stop: a filesystem holding ``paths`` has less than ``min_free_mb``
    MB, or fewer than ``min_free_inodes`` files, free for us (statvfs, a few microseconds); None
    when every one has room, or when a check is off (0)."""
    if min_free_mb <= 0 and min_free_inodes <= 0:
        return None
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue  # (not made yet, or gone: nothing to measure)
        free_mb = st.f_bavail * st.f_frsize / 2**20
        if free_mb < min_free_mb:
            return _stopped(f"has {free_mb:.0f} MB free, under POLAR_MIN_FREE_DISK_MB ({min_free_mb})", path)
        if st.f_files and st.f_favail < min_free_inodes:  # (f_files 0: no fixed count, e.g. btrfs)
            return _stopped(f"has room for {st.f_favail} more files (inodes), under POLAR_MIN_FREE_INODES "
                            f"({min_free_inodes})", path)
    return None


def _stopped(shortage: str, path: Path) -> str:
    return (f"stopped: the disk holding {path} {shortage}; the agent was stopped so that Redis, the logs "
            "and the other sessions keep room")


def recover(d: Deps, state: SessionState) -> Stage | None:
    """The previous RUN worker died mid-session. Never start the agent a second time: kill what
    may still run, keep what was captured, and go on to POSTRUN as an error."""
    if state.status not in (SessionStatus.READY, SessionStatus.RUNNING):
        return None
    if state.runtime:
        runtimes.attach(state.runtime).cancel()
    if state.cancel_requested:  # the cancel came first: that is how the session ended
        d.stores.sessions.set_outcome(state.session_id, Outcome.CANCELLED, "cancelled while the agent ran")
    else:
        d.stores.sessions.set_outcome(state.session_id, Outcome.ERROR, "run worker lost")
    d.stores.ready.release(state.session_id)
    d.stores.sessions.transition(state.session_id, SessionStatus.POSTRUN,
                          expected=[SessionStatus.READY, SessionStatus.RUNNING], run_ended_at=time.time())
    return Stage.POSTRUN
