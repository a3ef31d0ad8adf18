"""The evaluation runtime (``evaluator.refresh_runtime``): a second, fresh runtime of the task's
image, started and prepared (``eval_prepare``, else ``prepare``) in a background thread of the
RUN worker *while the agent runs*, so that grading in a clean copy costs no time after the agent.

Hand-over is through the session hash: the handle is stored before the runtime starts (so the
teardown finds it whatever happens next), ``eval_runtime_ready_at`` once prepared, or
``eval_runtime_error``. EVALUATE grades in it and tears both runtimes down. A RUN worker that dies
mid-warm-up leaves a handle without a ready stamp: EVALUATE reports the evaluation as failed
(never grades in the agent's dirty runtime instead) and still tears it down.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.stores.sessions import F, SessionState
from workers import runtimes
from workers.runtimes.base import EVAL_SUFFIX
from workers.stages.common import Deps, log
from workers.stages.prepare import run_prepare

JOIN_GRACE_SECONDS = 30.0


class Warmup:
    """The background start of one session's evaluation runtime."""

    def __init__(self, d: Deps, state: SessionState) -> None:
        self.d, self.state = d, state
        self.thread = threading.Thread(target=self._run, name=f"eval-warmup-{state.session_id}", daemon=True)
        self.deadline = time.time() + state.spec.timeout_seconds  # its own budget, as long as the agent's

    @classmethod
    def start(cls, d: Deps, state: SessionState) -> "Warmup | None":
        if not state.spec.evaluator.refresh_runtime:
            return None
        warmup = cls(d, state)
        warmup.thread.start()
        return warmup

    def _run(self) -> None:
        d, sid, spec = self.d, self.state.session_id, self.state.spec
        try:
            d.stores.sessions.stamp(sid, "eval_runtime_started_at")
            backend = spec.runtime.backend or d.settings.default_runtime_backend
            runtime = runtimes.create(spec.runtime.model_copy(update={"backend": backend}), sid + EVAL_SUFFIX,
                                      runtimes.RuntimeHost.of(d.settings, spec.task_id))
            d.stores.sessions.set(sid, **{F.EVAL_RUNTIME.value: json.dumps(runtime.handle)})
            runtime.start()
            actions = spec.runtime.eval_prepare if spec.runtime.eval_prepare is not None else spec.runtime.prepare
            run_prepare(runtime, actions, deadline=self.deadline, label="eval_prepare",
                        cancelled=lambda: d.stores.sessions.cancel_requested(sid),
                        upload_roots=d.settings.upload_root_list, upload_excluded=d.settings.upload_excluded,
                        upload_max_bytes=d.settings.upload_max_mb * 2**20)
            d.stores.sessions.stamp(sid, "eval_runtime_ready_at")
        except Exception as exc:
            log.warning("run %s: the evaluation runtime could not be made ready: %s", sid, exc)
            d.stores.sessions.set(sid, **{F.EVAL_RUNTIME_ERROR.value: f"{type(exc).__name__}: {exc}"[:2000]})

    def wait(self) -> None:
        """Called when the agent is done: the warm-up normally finished long ago."""
        self.thread.join(max(0.0, self.deadline - time.time()) + JOIN_GRACE_SECONDS)


def eval_runtime_problem(state: SessionState) -> str | None:
    """Why EVALUATE cannot grade in the session's fresh runtime (None: it is ready)."""
    if state.timing.eval_runtime_ready_at:
        return None
    if state.eval_runtime_error:
        return f"the evaluation runtime could not be made ready: {state.eval_runtime_error}"
    if state.eval_runtime:
        return "the evaluation runtime was still being prepared when its RUN worker was lost"
    return "no evaluation runtime was made (the agent never ran)"


def teardown(sid: str, *handles: dict | None) -> None:
    """Stop the session's runtimes in parallel; a failure is logged loudly (the sweeper retries)."""
    live = [runtimes.attach(h) for h in handles if h]
    if not live:
        return

    def stop(runtime: runtimes.Runtime) -> None:
        try:
            runtime.stop()
        except Exception as exc:
            log.error("evaluate %s: runtime teardown failed: %s", sid, exc)

    if len(live) == 1:  # the usual case: no thread to start for it
        stop(live[0])
        return
    with ThreadPoolExecutor(max_workers=len(live)) as pool:
        list(pool.map(stop, live))
