"""The swebench_harness evaluator's own parts, without runtimes: the instance it accepts, the test
spec swebench makes of it, and the verdict drawn from swebench's report on real pytest output of a
fixture instance (run here on its repository; the markers wrapped around it as the eval script's
`set -x` trace prints them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workers.evaluators import swebench_harness as sh

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = {row["instance_id"]: row for row in map(
    json.loads, (ROOT / "tests" / "fixtures" / "swe_instances" / "instances.jsonl").read_text().splitlines())}
CALC = INSTANCES["polar-fixtures__calckit-1"]


def test_an_instance_without_what_swebench_grades_from_is_refused_naming_it():
    row = {k: v for k, v in CALC.items() if k not in ("eval_script", "log_parser", "eval_type")}
    with pytest.raises(TypeError, match="eval_script, log_parser, eval_type.*overrides"):
        sh.merged_instance(row)
    merged = sh.merged_instance(row, {k: CALC[k] for k in ("eval_script", "log_parser", "eval_type")})
    assert merged["eval_script"] == CALC["eval_script"]


@pytest.mark.parametrize("change, message", [
    ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS is neither"),
    ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS must be a list of test names"),
    ({"image_assets": {"test_patch": [{"path": "a.png"}]}}, "image_assets"),
])
def test_malformed_columns_are_refused(change, message):
    with pytest.raises(TypeError, match=message):
        sh.merged_instance({**CALC, **change})


@pytest.mark.parametrize("change, message", [
    ({"log_parser": "parse_log_nothing"}, "log_parser 'parse_log_nothing'"),
    ({"eval_type": "sometimes"}, "eval_type 'sometimes'"),
])
def test_a_parser_or_eval_type_swebench_lacks_fails_at_construction(change, message):
    with pytest.raises(TypeError, match=message):
        sh.SwebenchHarnessEvaluator(instance={**CALC, **change})


@pytest.mark.parametrize("instance_id", sorted(INSTANCES))
def test_swebench_makes_a_test_spec_of_every_fixture_instance(instance_id):
    row = INSTANCES[instance_id]
    spec = sh.SwebenchHarnessEvaluator(instance=row).spec
    assert spec.FAIL_TO_PASS == json.loads(row["FAIL_TO_PASS"]) and spec.PASS_TO_PASS == json.loads(row["PASS_TO_PASS"])
    script = spec.eval_script
    assert script.startswith("#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\n")
    assert "conda activate testbed" in script and row["test_patch"] in script
    # swebench's own addition: the tests' exit status, recorded after the end marker
    assert script.index("SWEBENCH_TEST_EXIT_CODE=$?") < script.index(">>>>> End Test Output") < script.index(
        ">>>>> Test Exit Code")


def pytest_log(tmp_path: Path, patches: list[str], files: list[str]) -> Path:
    """What the eval script's output looks like around a real pytest run of calckit's tests."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "infra" / "images" / "swe" / "tasks" / CALC["instance_id"] / "repo", repo)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for text in patches:
        subprocess.run(["git", "apply", "-"], cwd=repo, input=text, text=True, check=True)
    run = subprocess.run([sys.executable, "-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider",
                          *files], cwd=repo, capture_output=True, text=True)
    log = tmp_path / "test_output.txt"
    log.write_text(f"+ : '>>>>> Start Test Output'\n{run.stdout}{run.stderr}+ SWEBENCH_TEST_EXIT_CODE={run.returncode}\n"
                   f"+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: {run.returncode}\n")
    return log


def grade(log: Path, patch: str = "diff") -> tuple[float, dict]:
    from swebench.harness.grading import get_eval_report, get_resolution_status

    spec = sh.test_spec(CALC)
    report = get_eval_report(spec, {"instance_id": CALC["instance_id"], "model_name_or_path": "t",
                                    "model_patch": patch}, str(log), include_tests_status=True)[CALC["instance_id"]]
    return sh.verdict(report, get_resolution_status(report["tests_status"]) if "tests_status" in report else None)


def test_the_gold_fix_is_resolved(tmp_path):
    reward, meta = grade(pytest_log(tmp_path, [CALC["test_patch"], CALC["patch"]], ["tests/test_evaluator.py"]))
    assert reward == 1.0 and meta["resolved"] and meta["resolution"] == "RESOLVED_FULL"
    assert meta["tests_status"]["FAIL_TO_PASS"] == {"success": json.loads(CALC["FAIL_TO_PASS"]), "failure": []}


def test_the_base_commit_is_not_resolved_and_says_which_tests_fail(tmp_path):
    reward, meta = grade(pytest_log(tmp_path, [CALC["test_patch"]], ["tests/test_evaluator.py"]))
    assert reward == 0.0 and not meta["resolved"] and meta["resolution"] == "RESOLVED_NO"
    assert meta["tests_status"]["FAIL_TO_PASS"]["failure"] == json.loads(CALC["FAIL_TO_PASS"])
    assert meta["tests_status"]["PASS_TO_PASS"]["failure"] == [] and meta["patch_successfully_applied"]


def test_passing_lines_printed_by_a_failing_run_are_not_believed(tmp_path):
    """A patch could print PASSED lines itself; swebench checks them against the tests' exit code."""
    log = pytest_log(tmp_path, [CALC["test_patch"], CALC["patch"]], ["tests/test_evaluator.py"])
    log.write_text(log.read_text().replace("Exit Code: 0", "Exit Code: 1"))
    reward, meta = grade(log)
    assert reward == 0.0 and meta["patch_successfully_applied"] is False and meta["resolution"] is None
    assert meta["tests_status"]["FAIL_TO_PASS"] == {"success": [], "failure": []}


def test_a_log_without_the_markers_is_not_a_test_run(tmp_path):
    log = tmp_path / "test_output.txt"
    log.write_text("+ source /opt/miniconda3/bin/activate\nconda (shim): no environment testbed\n")
    reward, meta = grade(log)
    assert reward == 0.0 and meta == {**meta, "resolved": False, "patch_successfully_applied": False}
