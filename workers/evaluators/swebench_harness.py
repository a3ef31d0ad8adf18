"""``swebench_harness``: reward 1.0 when the agent's change resolves a SWE-bench instance, judged
by the ``swebench`` package itself (the ``swebench`` extra, pinned): its test spec
(``swebench.harness.utils.make_test_spec``), the eval script that spec renders, its log parsers
and its grading (``swebench.harness.grading.get_eval_report``). Nothing of that is re-implemented
here; this module only moves the patch, the script and the log between runtimes.

Config:
- ``instance``: the instance, as a dataset row or a task of a swebench task repo
  (``swebench.task.repo.load_task_repo``); FAIL_TO_PASS / PASS_TO_PASS as lists or JSON strings.
- ``overrides``: columns laid over ``instance`` (see "Registering a repository" below).
- ``repo_dir`` ("/testbed"), ``timeout_seconds`` (the eval script's; 1800, swebench's default;
  like every step, cut to what is left of ``evaluator.timeout_seconds``), ``exclude_patterns``
  (paths never taken into the patch, on top of ``patch.NOISE``).

Flow: the agent's patch is taken from its runtime (``patch.extract``; the agent's own with
``refresh_runtime``, else the one graded in). An empty patch is reward 0, ``empty_generation``.
It is applied (``patch.apply``) in the runtime graded in -- the agent's runtime is first reset to
the base commit, so it is graded on exactly the patch a fresh one would get -- and a patch that
does not apply is reward 0, ``failed_apply_patch``. Then the eval script runs there under a
timeout, its output is graded, and the script, its output and swebench's report are kept in the
agent's ``artifacts/swebench/`` (copied out by the artifacts keeper before teardown).

Registering a repository: swebench 5 has no repo -> spec tables any more (4.x's
``MAP_REPO_VERSION_TO_SPECS`` and the eval-script generator are gone). Everything needed to grade
is per instance -- ``eval_script``, ``log_parser`` (a name in swebench's ``PARSER_REGISTRY``),
``eval_type`` -- written by a task repo's author and published as dataset columns. So a
repository of our own is "registered" by its instances carrying those columns (ours come from
the task repo in infra/images/swe/); ``overrides`` supplies them for rows that lack them, e.g.
rows exported by older tools.
"""

from __future__ import annotations

import json
import logging
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.errors import EvaluationError
from workers.evaluators import patch
from workers.evaluators.base import EvalContext, EvalResult, positive_seconds
from workers.runtimes import Runtime

ARTIFACTS = "/polar/session/artifacts/swebench"  # a runtime path (upload / download)
ARTIFACTS_IN_SHELL = '"$POLAR_SESSION_DIR/artifacts/swebench"'  # the same folder, as a command sees it
logger = logging.getLogger(__name__)
STEP_SECONDS = 120.0  # patch extraction, reset, application
REQUIRED = ("instance_id", "base_commit", "FAIL_TO_PASS", "PASS_TO_PASS", "eval_script", "log_parser", "eval_type")
TEST_GROUPS = ("FAIL_TO_PASS", "PASS_TO_PASS")


def _swebench() -> Any:
    try:
        import swebench
        from swebench.harness import constants, grading, log_parsers, utils
    except ImportError as exc:
        raise EvaluationError("the swebench_harness evaluator needs the swebench package: "
                              "pip install 'polar-rollout[swebench]'") from exc
    return swebench, constants, grading, log_parsers, utils


def merged_instance(instance: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The instance to grade: ``overrides`` laid over it, checked for what swebench grades from.
    Raises TypeError (a bad config) naming what is wrong."""
    if not isinstance(instance, dict):
        raise TypeError("'instance' must be a SWE-bench instance (a JSON object)")
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError("'overrides' must be an object of instance columns")
    # ``image`` only names swebench's own container; here the task's runtime is graded in.
    merged = {"image": "", **instance, **(overrides or {})}
    missing = [k for k in REQUIRED if merged.get(k) in (None, "")]
    if missing:
        raise TypeError(f"the instance lacks {', '.join(missing)} (swebench 5 grades from the instance's own "
                        "eval_script, log_parser and eval_type: give them in 'overrides' if its row has none)")
    for key in TEST_GROUPS:
        tests = merged[key]
        try:
            tests = json.loads(tests) if isinstance(tests, str) else tests
        except ValueError:
            raise TypeError(f"{key} is neither a list nor a JSON list") from None
        if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
            raise TypeError(f"{key} must be a list of test names")
    if merged.get("image_assets"):
        # Binary files a text patch cannot carry: swebench's docker harness stages them; this
        # evaluator does not, and grading without them would be wrong rather than unsupported.
        raise TypeError("instances with image_assets are not supported by swebench_harness")
    return merged


def test_spec(instance: dict[str, Any]) -> Any:
    """swebench's TestSpec of a merged instance (its eval script records the tests' exit code)."""
    _, constants, _, log_parsers, utils = _swebench()
    if instance["log_parser"] not in log_parsers.PARSER_REGISTRY:
        raise TypeError(f"log_parser {instance['log_parser']!r} is not one of swebench's parsers")
    if instance["eval_type"] not in {t.value for t in constants.EvalType}:
        raise TypeError(f"eval_type {instance['eval_type']!r} is not one of "
                        f"{', '.join(t.value for t in constants.EvalType)}")
    return utils.make_test_spec(instance)


def verdict(report: dict[str, Any], resolution: str | None) -> tuple[float, dict[str, Any]]:
    """Reward and metadata from swebench's per-instance report (``get_eval_report``'s value)."""
    tests = report.get("tests_status") or {}
    meta: dict[str, Any] = {
        "resolved": bool(report.get("resolved")),
        # swebench's name for "the log shows the tests ran after the patch" (its harness applies
        # the patch itself; here that is ``patch_applied``)
        "patch_successfully_applied": bool(report.get("patch_successfully_applied")),
        "resolution": resolution,
        "tests_status": {group: {"success": list(tests.get(group, {}).get("success", [])),
                                 "failure": list(tests.get(group, {}).get("failure", []))}
                         for group in TEST_GROUPS},
    }
    if report.get("infra_failure_reason"):
        meta.update(infra_failure=bool(report.get("infra_failure")), infra_failure_reason=report["infra_failure_reason"])
    return (1.0 if meta["resolved"] else 0.0), meta


class SwebenchHarnessEvaluator:
    name = "swebench_harness"

    def __init__(self, instance: dict[str, Any], overrides: dict[str, Any] | None = None, repo_dir: str = "/testbed",
                 timeout_seconds: float = 1800, exclude_patterns: list[str] | None = None) -> None:
        self.instance = merged_instance(instance, overrides)
        self.spec = test_spec(self.instance)  # a bad instance fails here, not after the agent's run
        if not isinstance(repo_dir, str) or not repo_dir:
            raise TypeError("'repo_dir' must be a path")
        self.repo_dir, self.timeout = repo_dir, positive_seconds(timeout_seconds)
        self.exclude = patch.exclude_list(exclude_patterns)
        self.instance_id = str(self.instance["instance_id"])
        self.base_commit = patch.check_commit(self.instance["base_commit"])

    def evaluate(self, ctx: EvalContext) -> EvalResult:
        if ctx.runtime is None:
            raise EvaluationError("the swebench_harness evaluator needs a runtime")
        swebench = _swebench()[0]
        runtime, agent = ctx.runtime, ctx.agent_runtime or ctx.runtime
        timings: dict[str, float] = {}
        meta: dict[str, Any] = {"instance_id": self.instance_id, "swebench_version": swebench.__version__,
                                "refresh_runtime": ctx.agent_runtime is not None, "timings_s": timings}
        with tempfile.TemporaryDirectory(prefix="polar-swebench-") as tmp:
            folder = Path(tmp)
            try:
                return self._grade(ctx, runtime, agent, folder, meta, timings)
            finally:
                self._keep(agent, folder)

    def _grade(self, ctx: EvalContext, runtime: Runtime, agent: Runtime, folder: Path, meta: dict[str, Any],
               timings: dict[str, float]) -> EvalResult:
        mark = time.monotonic()
        try:
            taken = patch.extract(agent, self.repo_dir, self.base_commit, self.exclude,
                                  timeout=ctx.budget(STEP_SECONDS))
        except patch.PatchUnavailable as exc:
            return EvalResult(0.0, metadata={**meta, "resolved": False, "patch_error": str(exc)})
        meta.update(patch_files=taken.files, patch_bytes=len(taken.data))
        if taken.dropped:  # what the worker would not grade, and why
            meta["patch_dropped"] = taken.dropped
        timings["extract"] = _since(mark)
        if taken.empty:
            return EvalResult(0.0, metadata={**meta, "resolved": False, "empty_generation": True})

        mark = time.monotonic()
        if runtime is agent:
            self._reset(ctx, runtime)
        applied = patch.apply(runtime, taken, self.repo_dir, timeout=ctx.budget(STEP_SECONDS))
        timings["apply"] = _since(mark)
        meta.update(patch_applied=applied.ok, apply_method=applied.method)
        if not applied.ok:
            return EvalResult(0.0, metadata={**meta, "resolved": False, "failed_apply_patch": True,
                                             "apply_log": applied.log[-4000:]})

        _, constants, grading, _, _ = _swebench()
        mark = time.monotonic()
        script = folder / "eval.sh"
        script.write_text(self.spec.eval_script)
        runtime.upload(str(script), f"{ARTIFACTS}/eval.sh")
        log_name, limit = constants.LOG_TEST_OUTPUT, ctx.budget(self.timeout)
        # One file for both streams, in order: the markers reach it through `set -x` (stderr),
        # the tests' lines through stdout, as in swebench's own harness.
        res = runtime.exec(f"bash {ARTIFACTS_IN_SHELL}/eval.sh > {ARTIFACTS_IN_SHELL}/{log_name} 2>&1",
                           env=ctx.env, timeout=limit, log_name="swebench-eval")
        timings["tests"] = _since(mark)
        if res.cancelled:
            raise EvaluationError("the evaluation was cancelled")
        log = folder / log_name
        try:
            runtime.download(f"{ARTIFACTS}/{log_name}", str(log))
        except FileNotFoundError:
            raise EvaluationError(f"the eval script left no output (exit {res.exit_code}): {res.stderr[-500:]}") from None
        if res.timed_out:  # as swebench's own harness does: noted in the log, not resolved
            with open(log, "a") as f:
                f.write(f"\n\nTimeout error: {limit:g} seconds exceeded.")
            return EvalResult(0.0, metadata={**meta, "resolved": False, "timed_out": True,
                                             "test_output_tail": _tail(log)})

        mark = time.monotonic()
        prediction = {"instance_id": self.instance_id, "model_name_or_path": "polar", "model_patch": taken.text}
        report = grading.get_eval_report(self.spec, prediction, str(log), include_tests_status=True)[self.instance_id]
        (folder / constants.LOG_REPORT).write_text(json.dumps(report, indent=2))
        tests = report.get("tests_status")
        reward, graded = verdict(report, grading.get_resolution_status(tests) if tests else None)
        timings["grade"] = _since(mark)
        if not graded["patch_successfully_applied"]:
            graded["test_output_tail"] = _tail(log)
        return EvalResult(reward, metadata={**meta, **graded})

    def _reset(self, ctx: EvalContext, runtime: Runtime) -> None:
        """The agent's tree back to the base commit (its commits, edits and untracked files gone;
        ignored build outputs kept, as an image has them), so that the patch is all that is graded."""
        repo, base = shlex.quote(self.repo_dir), shlex.quote(self.base_commit)
        res = runtime.exec(f"cd {repo} && git reset -q --hard {base} && git clean -fdq",
                           timeout=ctx.budget(STEP_SECONDS), log_name="swebench-reset")
        if not res.ok:
            raise EvaluationError(f"resetting {self.repo_dir} to {self.base_commit} failed: {res.stderr[-500:]}")

    def _keep(self, agent: Runtime, folder: Path) -> None:
        """The script, the test output and the report into the agent's artifacts folder (with
        refresh_runtime they were made in the fresh runtime, which the keeper does not copy)."""
        for f in sorted(folder.iterdir()):
            try:
                agent.upload(str(f), f"{ARTIFACTS}/{f.name}")
            except Exception as exc:  # the grade stands without its copy
                logger.warning("swebench_harness: keeping %s failed: %s", f.name, exc)


def _since(mark: float) -> float:
    return round(time.monotonic() - mark, 3)


def _tail(path: Path, size: int = 4000) -> str:
    return path.read_text(errors="replace")[-size:]
