"""What patch-based graders share: the agent's change taken out of its runtime and, with
``refresh_runtime``, applied in the fresh one -- or the early verdict when there is nothing to
grade (an empty patch: ``empty_generation``) or it does not apply (``failed_apply_patch``)."""

from __future__ import annotations

from typing import Any

from workers.evaluators import patch
from workers.evaluators.base import EvalContext, EvalResult


def patched_runtime(ctx: EvalContext, repo_dir: str, base_commit: str, exclude: list[str],
                    meta: dict[str, Any], step_seconds: float = 120) -> EvalResult | None:
    """Make ``ctx.runtime`` hold the agent's change; None when ready to test, else the verdict."""
    source = ctx.agent_runtime or ctx.runtime
    if source is None or ctx.runtime is None:
        return EvalResult(0.0, metadata={**meta, "error": "no runtime to grade in"})
    try:
        taken = patch.extract(source, repo_dir, base_commit, exclude, timeout=ctx.budget(step_seconds))
    except patch.PatchUnavailable as exc:
        return EvalResult(0.0, metadata={**meta, "patch_error": str(exc)})
    meta.update(patch_files=taken.files, patch_bytes=len(taken.data))
    if taken.dropped:  # what the worker would not grade, and why
        meta["patch_dropped"] = taken.dropped
    if taken.empty:
        return EvalResult(0.0, metadata={**meta, "empty_generation": True})
    if ctx.agent_runtime is not None:  # refresh_runtime: the fresh copy gets the change
        applied = patch.apply(ctx.runtime, taken, repo_dir, timeout=ctx.budget(step_seconds))
        meta.update(patch_applied=applied.ok, apply_method=applied.method)
        if not applied.ok:
            return EvalResult(0.0, metadata={**meta, "failed_apply_patch": True, "apply_log": applied.log[-4000:]})
    return None
