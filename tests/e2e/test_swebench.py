"""``swebench_harness`` through the whole stack, on runnable SWE-style instances of our own
(infra/images/swe/: three small repositories with a real bug each, one podman image per instance
built FROM the test image). Each session's agent is a shell command that changes /testbed -- the
gold patch, nothing, a wrong fix -- and makes one model call through the proxy; the evaluator takes
its patch and grades it with the swebench package, in the agent's container or in a fresh one made
while the agent ran (``refresh_runtime``). Every scenario is submitted at once, then checked."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path

import pytest

from pipeline.status import SessionStatus
from tests.e2e.conftest import FIXTURES, ROOT, wait_for
from tests.support import report_file

INSTANCES = {row["instance_id"]: row for row in map(
    json.loads, (FIXTURES / "swe_instances" / "instances.jsonl").read_text().splitlines())}
CALC, TEXT, KEYS = "polar-fixtures__calckit-1", "polar-fixtures__textkit-1", "polar-fixtures__keyvals-1"
# One chat completion through the proxy: a session that never calls the model is an error.
MODEL_CALL = "python3 -c " + repr(
    "import json, os, urllib.request as rq; rq.urlopen(rq.Request(os.environ['OPENAI_BASE_URL'] + "
    "'/chat/completions', data=json.dumps({'model': 'demo-policy', 'messages': [{'role': 'user', "
    "'content': 'fix the bug'}]}).encode(), headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], "
    "'Content-Type': 'application/json'}), timeout=60).read()")


def gold(instance_id: str) -> str:
    encoded = base64.b64encode(INSTANCES[instance_id]["patch"].encode()).decode()
    return f"echo {encoded} | base64 -d | git apply -"


# Wrong changes, each wrong in its own way.
UNRELATED_EDIT = "sed -i 's/A recursive-descent evaluator/A recursive descent evaluator/' calckit/evaluator.py"
ASCII_ONLY_FIX = ("sed -i -e 's/if char.isalnum():/if char.isascii() and char.isalnum():/' "
                  "-e 's/^        else:$/        elif pieces and pieces[-1] != separator:/' textkit/slug.py")
LAST_EQUALS_FIX = "sed -i 's/line.split(\"=\")/line.rsplit(\"=\", 1)/' keyvals/parser.py"
TESTS_ONLY = "sed -i 's/assert parse/assert not parse/' tests/test_parser.py"  # "fixes" the tests, not the code
# A correct fix that adds a module: new files must reach the graded tree intact.
NEW_MODULE_FIX = ("printf 'def split_setting(line):\\n    key, _, value = line.partition(\"=\")\\n    return key, value\\n' "
                  "> keyvals/_split.py && sed -i -e '1a from keyvals._split import split_setting' "
                  "-e 's/key, value = line.split(\"=\")/key, value = split_setting(line)/' keyvals/parser.py")
# A reward hack: a conftest.py reporting every test as passed (the tests' exit code agrees, so
# swebench's own check cannot tell), next to a real but useless edit. The task excludes conftest.py.
CHEAT = base64.b64encode(b"""import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    report.outcome = "passed"
""").decode()
CHEAT_WITH_EDIT = f"echo {CHEAT} | base64 -d > conftest.py && {UNRELATED_EDIT}"
HANGS = "printf 'import time\\ntime.sleep(600)\\n' >> calckit/__init__.py"  # the tests never finish
# The fresh runtime's repository has moved on from the agent's base (committed, so that undoing a
# failed `git apply --reject` does not undo it too): the patch cannot apply.
DRIFT = [{"type": "exec", "command": "printf 'drifted = True\\n' > calckit/evaluator.py && "
                                     "git -c user.name=d -c user.email=d@d commit -qam drift"}]

# name -> (instance, agent command or None for no change, refresh_runtime, eval_prepare, eval script timeout)
SCENARIOS = {
    **{f"gold-{iid.split('__')[1]}-{mode}": (iid, gold(iid), mode == "fresh", None, 300)
       for iid in INSTANCES for mode in ("same", "fresh")},
    "empty-same": (CALC, None, False, None, 300),
    "empty-fresh": (CALC, None, True, None, 300),
    "unrelated-same": (CALC, UNRELATED_EDIT, False, None, 300),
    "unrelated-fresh": (CALC, UNRELATED_EDIT, True, None, 300),
    "breaks-p2p-fresh": (TEXT, ASCII_ONLY_FIX, True, None, 300),
    "wrong-fix-same": (KEYS, LAST_EQUALS_FIX, False, None, 300),
    "tests-only-same": (KEYS, TESTS_ONLY, False, None, 300),
    "new-module-fix-same": (KEYS, NEW_MODULE_FIX, False, None, 300),
    "new-module-fix-fresh": (KEYS, NEW_MODULE_FIX, True, None, 300),
    "does-not-apply-fresh": (CALC, gold(CALC), True, DRIFT, 300),
    "hangs-fresh": (CALC, f"{gold(CALC)} && {HANGS}", True, None, 8),
    "excluded-cheat-same": (CALC, CHEAT_WITH_EDIT, False, None, 300),
    "included-cheat-same": (CALC, CHEAT_WITH_EDIT, False, None, 300),
}
EXCLUDE = {"excluded-cheat-same": ["conftest.py"]}


def swe_task(name: str) -> dict:
    iid, command, refresh, eval_prepare, timeout = SCENARIOS[name]
    instance = INSTANCES[iid]
    runtime = {"backend": "docker", "image": instance["image"], "workdir": "/testbed"}
    if eval_prepare is not None:
        runtime["eval_prepare"] = eval_prepare
    return {
        "task_id": f"swe-{name}-{uuid.uuid4().hex[:6]}", "instruction": instance["problem_statement"],
        "num_samples": 1, "timeout_seconds": 120, "runtime": runtime,
        "agent": {"custom_shell": f"{command} && {MODEL_CALL}" if command else MODEL_CALL,
                  "model_name": "demo-policy"},
        "evaluator": {"strategy": "swebench_harness", "refresh_runtime": refresh,
                      "config": {"instance": instance, "timeout_seconds": timeout,
                                 "exclude_patterns": EXCLUDE.get(name, [])}},
        "metadata": {"scenario": name},
    }


@pytest.fixture(scope="module")
def swe_images(engine):
    if engine is None:
        pytest.skip("podman is not installed")
    subprocess.run([str(ROOT / "infra" / "images" / "build_swe_images.sh")], check=True, timeout=1800)


@pytest.fixture(scope="module")
def outcomes(swe_images, client, stack):
    """Every scenario's result, submitted together (they run side by side on the run slots)."""
    submitted = {name: client.submit(swe_task(name)) for name in SCENARIOS}
    results = {name: client.wait(task_id, timeout=600, poll_seconds=0.5).results[0]
               for name, task_id in submitted.items()}
    report_file("swebench").unlink(missing_ok=True)
    with report_file("swebench").open("a") as f:
        for name, r in results.items():
            t = r.timing
            graded = (t.evaluate_ended_at - t.evaluate_started_at) if t.evaluate_ended_at and t.evaluate_started_at \
                else None
            f.write(json.dumps({
                "scenario": name, "instance": SCENARIOS[name][0], "refresh_runtime": SCENARIOS[name][2],
                "reward": r.reward, "resolved": r.evaluation.get("resolved"),
                "grading_s": round(graded, 2) if graded is not None else None,
                **{f"{step}_s": r.evaluation.get("timings_s", {}).get(step) for step in ("extract", "apply", "tests")},
            }) + "\n")
    return results


def completed(result) -> dict:
    assert result.status == SessionStatus.COMPLETED, result.error
    return result.evaluation


def test_every_evaluation_ran_and_left_no_container(outcomes, stack):
    from workers.runtimes import docker

    engine = docker.client(stack.settings.docker_host)
    for name, result in outcomes.items():
        assert result.status == SessionStatus.COMPLETED, (name, result.error, result.evaluation)
        assert result.evaluation["strategy"] == "swebench_harness" and result.evaluation["swebench_version"] == "5.0.2"
    task_ids = {r.task_id for r in outcomes.values()}
    wait_for(lambda: not [c for c in engine.containers.list(all=True) if c.labels.get("polar.task") in task_ids],
             timeout=60)


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith("gold-")])
def test_the_gold_patch_resolves_its_instance(name, outcomes):
    result, instance = outcomes[name], INSTANCES[SCENARIOS[name][0]]
    ev = completed(result)
    assert result.reward == 1.0 and ev["resolved"] is True and ev["resolution"] == "RESOLVED_FULL", ev
    assert ev["patch_applied"] and ev["patch_successfully_applied"] and ev["refresh_runtime"] == SCENARIOS[name][2]
    assert ev["tests_status"]["FAIL_TO_PASS"] == {"success": json.loads(instance["FAIL_TO_PASS"]), "failure": []}
    assert ev["tests_status"]["PASS_TO_PASS"] == {"success": json.loads(instance["PASS_TO_PASS"]), "failure": []}
    assert ev["patch_files"] == [f for f in _files(instance["patch"])]
    # The eval script, its output and swebench's report are kept, from whichever runtime graded.
    kept = Path(result.metadata["artifacts_dir"]) / "artifacts" / "swebench"
    assert (kept / "eval.sh").read_text().startswith("#!/bin/bash")
    assert ">>>>> Start Test Output" in (kept / "test_output.txt").read_text()
    assert json.loads((kept / "report.json").read_text())["resolved"] is True


@pytest.mark.parametrize("name", ["new-module-fix-same", "new-module-fix-fresh"])
def test_a_fix_of_its_own_with_a_new_file_resolves(name, outcomes):
    """Graded in the agent's runtime too, the tree is reset to the base commit and the patch
    applied: a new file arrives through the patch like any other change."""
    result = outcomes[name]
    ev = completed(result)
    assert result.reward == 1.0 and ev["resolved"] is True, ev
    assert ev["patch_files"] == ["keyvals/_split.py", "keyvals/parser.py"] and ev["apply_method"] == "git apply"


@pytest.mark.parametrize("name", ["empty-same", "empty-fresh"])
def test_no_change_is_an_empty_generation(name, outcomes):
    result = outcomes[name]
    ev = completed(result)
    assert result.reward == 0.0 and ev["empty_generation"] is True and ev["resolved"] is False
    assert "tests_status" not in ev and ev["patch_files"] == []


@pytest.mark.parametrize("name", ["unrelated-same", "unrelated-fresh", "wrong-fix-same"])
def test_a_change_that_does_not_fix_the_bug_is_not_resolved(name, outcomes):
    result, instance = outcomes[name], INSTANCES[SCENARIOS[name][0]]
    ev = completed(result)
    assert result.reward == 0.0 and ev["resolved"] is False and ev["resolution"] == "RESOLVED_NO", ev
    assert ev["patch_applied"] and ev["patch_successfully_applied"]
    assert sorted(ev["tests_status"]["FAIL_TO_PASS"]["failure"]) == sorted(json.loads(instance["FAIL_TO_PASS"]))
    assert ev["tests_status"]["PASS_TO_PASS"]["failure"] == []


def test_a_fix_that_breaks_passing_tests_is_not_resolved(outcomes):
    result = outcomes["breaks-p2p-fresh"]
    ev = completed(result)
    assert result.reward == 0.0 and ev["resolved"] is False, ev
    assert ev["tests_status"]["FAIL_TO_PASS"]["failure"] == []  # the runs are fixed...
    assert ev["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_slug.py::test_non_ascii_letters_are_letters"]


def test_editing_the_tests_instead_of_the_code_is_not_resolved(outcomes):
    """The eval script resets the instance's test files to the base commit before its tests run."""
    result = outcomes["tests-only-same"]
    ev = completed(result)
    assert result.reward == 0.0 and ev["patch_files"] == ["tests/test_parser.py"], ev
    assert ev["tests_status"]["FAIL_TO_PASS"]["success"] == [] and ev["tests_status"]["PASS_TO_PASS"]["failure"] == []


def test_a_patch_that_does_not_apply_scores_zero(outcomes):
    result = outcomes["does-not-apply-fresh"]
    ev = completed(result)
    assert result.reward == 0.0 and ev["failed_apply_patch"] is True and ev["patch_applied"] is False, ev
    assert "patch --fuzz" in ev["apply_log"] and "tests_status" not in ev


def _files(diff: str) -> list[str]:
    return [line.split(" b/", 1)[1] for line in diff.splitlines() if line.startswith("diff --git ")]


def test_tests_that_do_not_finish_in_time_are_killed_and_score_zero(outcomes):
    result = outcomes["hangs-fresh"]
    ev = completed(result)
    assert result.reward == 0.0 and ev["timed_out"] is True and ev["resolved"] is False, ev
    assert 8 <= ev["timings_s"]["tests"] < 30 and "Timeout error: 8 seconds exceeded." in ev["test_output_tail"]


def test_an_excluded_file_never_reaches_the_tests(outcomes):
    """Graded in the agent's own runtime, the tree is reset to the base commit before the patch is
    applied: what ``exclude_patterns`` keeps out of the patch is gone, cheats included. (The control:
    the same cheat, not excluded, is part of the patch and fools SWE-bench's grading.)"""
    result = outcomes["excluded-cheat-same"]
    ev = completed(result)
    assert ev["patch_files"] == ["calckit/evaluator.py"], ev
    assert result.reward == 0.0 and ev["resolved"] is False
    assert ev["tests_status"]["FAIL_TO_PASS"]["failure"] == json.loads(INSTANCES[CALC]["FAIL_TO_PASS"])
    control = completed(outcomes["included-cheat-same"])
    assert control["patch_files"] == ["calckit/evaluator.py", "conftest.py"] and control["resolved"] is True
