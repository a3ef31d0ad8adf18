"""``polar generate``: instances through the pipeline with a fixed (scripted) model, the accepted
trajectories written for a trainer, and a run killed half-way that resumes without redoing
anything. The pi CLI plays one scripted fix (``pi_fix``: ``a - b`` -> ``a + b``): it is right for
the instances whose bug is that, and changes nothing in the others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT
from tests.support import wait_for

# The modules using presets_stack (six harness CLIs, six run slots) share one process: one stack.
pytestmark = pytest.mark.xdist_group("presets-stack")

ADD_BUG = "def add(a, b):\\n    return a - b\\n"
MUL_BUG = "def add(a, b):\\n    return a + b\\n\\n\\ndef mul(a, b):\\n    return a + b\\n"
TESTS = {"add": "from calc import add\\n\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n",
         "mul": "from calc import mul\\n\\n\\ndef test_mul():\\n    assert mul(2, 3) == 6\\n"}


def instance(iid: str, repo: str, source: str, test: str) -> dict:
    setup = (f"git init -q . && git config user.email t@t && git config user.name t && printf '{source}' > calc.py && "
             f"printf '{TESTS[test]}' > test_calc.py && git add -A && git commit -qm base")
    return {"instance_id": iid, "instruction": f"Fix the bug that makes test_{test} fail.", "timeout_seconds": 240,
            "runtime": {"prepare": [{"type": "exec", "command": setup}]},
            "evaluator": {"strategy": "test_on_output", "config": {
                "command": "python -m pytest -p no:cacheprovider -rA test_calc.py",
                "expected_output_json": {f"test_calc.py::test_{test}": "PASSED"}}},
            "metadata": {"repo": repo}}


def test_generate_keeps_exactly_the_accepted_and_resumes_without_redoing(presets_stack, tmp_path):
    lines = [instance("calc-1", "acme/calc", ADD_BUG, "add"), instance("calc-2", "acme/calc", ADD_BUG, "add"),
             instance("mul-1", "acme/mul", MUL_BUG, "mul"), instance("calc-3", "acme/calc", ADD_BUG, "add"),
             instance("mul-2", "acme/mul", MUL_BUG, "mul")]
    path = tmp_path / "instances.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out"
    env = {**os.environ, **presets_stack.settings.to_env()}
    argv = [sys.executable, "-m", "infra.cli.main", "generate", str(path), "--harness", "pi", "--model", "pi_fix",
            "--out", str(out), "--concurrency", "1", "--parquet"]
    first = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    state = out / "state.jsonl"
    wait_for(lambda: state.exists() and len(state.read_text().splitlines()) >= 2, timeout=300, interval=0.2)
    first.send_signal(signal.SIGKILL)  # half-way: two finished, one in flight, two never submitted
    first.wait()
    before = [json.loads(x) for x in state.read_text().splitlines()]
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming: {len(before)} of 5" in done.stdout
    after = [json.loads(x) for x in state.read_text().splitlines()]
    assert after[:len(before)] == before  # what was finished was not touched again
    assert sorted(r["instance_id"] for r in after) == sorted(x["instance_id"] for x in lines)  # each once
    accepted = {r["instance_id"] for r in after if r["accepted"]}
    assert accepted == {"calc-1", "calc-2", "calc-3"}  # exactly those the scripted fix is right for
    rows = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {r["instance_id"] for r in rows} == accepted and len({r["session_id"] for r in rows}) == 3
    for r in rows:
        assert len(r["response_ids"]) == len(r["loss_mask"]) == len(r["response_logprobs"]) > 0
        assert r["reward"] == 1.0 and r["messages"][-1]["role"] == "assistant"
    assert "acme/calc" in done.stdout and "acme/mul" in done.stdout and "total" in done.stdout
    import pyarrow.parquet as pq

    assert pq.read_table(out / "trajectories.parquet").num_rows == len(rows)


def test_generate_on_swebench_instances_keeps_only_the_resolved_one(presets_stack, tmp_path):
    """The local SWE-style instances (infra/images/swe/) in their own images, graded by
    swebench_harness in a fresh runtime; the scripted pi fix (``pi_calckit_fix``: calckit's gold
    patch) resolves calckit and changes nothing in the others."""
    out = tmp_path / "out"
    env = {**os.environ, **presets_stack.settings.to_env()}
    done = subprocess.run([sys.executable, "-m", "infra.cli.main", "generate",
                           str(ROOT / "tests" / "fixtures" / "swe_instances" / "instances.jsonl"), "--harness", "pi",
                           "--model", "pi_calckit_fix", "--out", str(out), "--timeout", "300"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    state = [json.loads(x) for x in (out / "state.jsonl").read_text().splitlines()]
    assert {r["instance_id"] for r in state if r["accepted"]} == {"polar-fixtures__calckit-1"}, state
    assert len(state) == 3 and "total" in done.stdout
    [row] = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert row["repo"] == "polar-fixtures/calckit" and sum(row["loss_mask"]) > 0
