"""EVALUATE: reward the trajectory with the session's evaluator -- in the agent's runtime, or in the
fresh one made while the agent ran (``evaluator.refresh_runtime``, ``eval_runtime.py``) -- then
tear both down and store the terminal ``SessionResult`` for CALLBACK to publish."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from pipeline.errors import EvaluationError
from pipeline.schemas import SessionResult, Trajectory
from pipeline.status import Outcome, SessionStatus, Stage
from pipeline.stores.leases import StageLease
from pipeline.stores.sessions import F, SessionState
from pipeline.stores.stage_runs import Handoff
from workers import evaluators, harnesses, runtimes
from workers.evaluators import EvalContext
from workers.stages import artifacts
from workers.stages.common import BEGIN_READS, Deps, Skip, first_reads, log
from workers.stages.eval_runtime import eval_runtime_problem, teardown


def keep_artifacts(d: Deps, state: SessionState, eval_runtime: dict | None) -> Path | None:
    """Copy the agent's output and the harness's transcripts out before teardown, and what the
    grading left in the evaluation runtime under ``eval/`` (never fails the session: a full disk
    loses the copy, not the result)."""
    if not (d.settings.keep_artifacts and state.runtime and state.runtime.get("root")):
        return None
    dest = artifacts.folder_for(d.settings.home, state.spec.task_id, state.session_id)
    budget = d.settings.artifacts_max_mb * 1024 * 1024
    try:
        harness = harnesses.create(state.spec.agent.harness or "shell")
        kept = artifacts.keep(Path(state.runtime["root"]), dest, getattr(harness, "transcripts", ()),
                              state.key or "", budget)
        if eval_runtime and eval_runtime.get("root") and \
                artifacts.keep(Path(eval_runtime["root"]), dest / "eval", (), state.key or "", budget):
            kept = dest
        return kept
    except Exception as exc:
        log.warning("evaluate %s: keeping artifacts failed: %s", state.session_id, exc)
        return None


def _grade(d: Deps, state: SessionState, outcome: Outcome, trajectory: Trajectory, started: float) -> dict[str, Any]:
    """The session's grade, as committed: reward, evaluation, error and each trace's reward
    (``trajectory``'s traces get theirs)."""
    spec = state.spec
    agent_runtime = runtimes.attach(state.runtime) if state.runtime else None
    refresh = spec.evaluator.refresh_runtime
    runtime = (runtimes.attach(state.eval_runtime) if state.eval_runtime else None) if refresh else agent_runtime
    reward, evaluation, eval_error = None, {"strategy": spec.evaluator.strategy}, None
    if outcome != Outcome.CANCELLED and state.timing.run_started_at is None:
        # The session ended before RUN (its INIT failed or ran out of time): no agent acted, and
        # a grader run on a half-prepared runtime would score the setup, not a policy.
        evaluation["skipped"] = "the agent never ran (the session ended before RUN)"
        return {"reward": None, "evaluation": evaluation, "error": None, "trace_rewards": None}
    try:
        if outcome != Outcome.CANCELLED:
            if refresh and eval_runtime_problem(state):
                raise EvaluationError(eval_runtime_problem(state) or "")
            evaluator = evaluators.create(spec.evaluator.strategy, spec.evaluator.config)
            proxy = runtime.reachable_url(d.settings.proxy_url) if runtime else d.settings.proxy_url
            env = {**harnesses.harness_env(proxy, spec, state.key or ""), **spec.evaluator.env}
            res = evaluator.evaluate(EvalContext(spec, outcome, trajectory, runtime, env,
                                                 agent_runtime=agent_runtime if refresh else None,
                                                 deadline=started + spec.evaluator.timeout_seconds))
            res.apply(trajectory)
            reward = res.outcome_reward
            evaluation.update(res.metadata, outcome_reward=reward, trace_rewards=res.trace_rewards)
    except Exception as exc:
        eval_error = f"evaluation failed: {exc}"
        log.warning("evaluate %s: %s", state.session_id, eval_error)
    return {"reward": reward, "evaluation": evaluation, "error": eval_error,
            "trace_rewards": [t.reward for t in trajectory.traces] if reward is not None else None}


BEGIN_READS[Stage.EVALUATE] = lambda d, pipe, sid: d.stores.outputs.queue_trajectory(pipe, sid)


def body(d: Deps, state: SessionState, lease: StageLease) -> Handoff:
    sid, spec = state.session_id, state.spec
    if state.status != SessionStatus.EVALUATING:
        raise Skip(f"status is {state.status.value}")
    started = state.timing.evaluate_started_at or time.time()  # stamped as the stage began
    # (read with the stage's begin: POSTRUN stored it before sending this stage)
    trajectory = (d.stores.outputs.parse_trajectory(first_reads(d, Stage.EVALUATE, sid, state.read)[0])
                  or Trajectory(error="trajectory missing"))
    # The outcome so far (the first recorded wins); a cancel that came since is the outcome now.
    # (``state`` was read as this stage began: the evaluation runtime's hand-over is in it.)
    outcome, new_error = state.outcome, None
    if outcome is None:
        outcome, new_error = ((Outcome.CANCELLED, "cancelled") if state.cancel_requested
                              else (Outcome.ERROR, "no outcome recorded"))
    grade = state.grade  # committed by a copy whose teardown began before it died or stalled: kept
    if grade is None:
        grade = _grade(d, state, outcome, trajectory, started)
        # The grade and the lease check in one step, before anything is torn down: a copy re-run
        # after this point takes this grade instead of grading a half-deleted runtime, and a
        # copy that stalled past its lease while another took over stops here (LeaseLost).
        grade = json.loads(lease.commit(F.GRADE.value, json.dumps(grade, default=str)))
    if grade["trace_rewards"] is not None and len(grade["trace_rewards"]) == len(trajectory.traces):
        for trace, trace_reward in zip(trajectory.traces, grade["trace_rewards"]):
            trace.reward = trace_reward
    reward, evaluation, eval_error = grade["reward"], grade["evaluation"], grade["error"]
    kept = keep_artifacts(d, state, state.eval_runtime)
    teardown(sid, state.runtime, state.eval_runtime)
    status = outcome.terminal_status()
    error = new_error if new_error is not None else state.error
    if status == SessionStatus.COMPLETED and (trajectory.error or eval_error):
        status, error = SessionStatus.ERROR, trajectory.error or eval_error
    last_call_error = trajectory.metadata.get("last_proxy_error")
    if status != SessionStatus.COMPLETED and last_call_error and last_call_error not in (error or ""):
        error = f"{error or status.value}; last model-API error: {last_call_error}"  # the cause, by name
    trajectory.status = status
    ended = time.time()
    result = SessionResult(
        session_id=sid, task_id=spec.task_id, sample_index=spec.sample_index, status=status,
        reward=reward, trajectory=trajectory, error=error or eval_error, evaluation=evaluation,
        metadata={**spec.metadata, "harness": spec.agent.harness, "model_name": spec.agent.model_name,
                  **({"artifacts_dir": str(kept)} if kept else {})},
        node_id=socket.gethostname(),
    )
    result.timing = state.timing.model_copy(update={"evaluate_started_at": started, "evaluate_ended_at": ended})
    # The result, the end stamp, a new outcome and CALLBACK's message: one step.
    return Handoff(Stage.CALLBACK, fields={"evaluate_ended_at": ended}, outcome=outcome if new_error else None,
                   error=new_error, puts=(d.stores.outputs.result_put(sid, result),))
