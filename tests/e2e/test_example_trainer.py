"""examples/trainer.py against the stack: groups closed, advantages computed, and the weight swap
(pause, drain, resume with the next policy version) between steps -- the sessions of step 1 are
stamped with the version the swap set."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.e2e.conftest import ROOT


def test_the_example_trainer_runs_steps_with_a_weight_swap_between_them(stack):
    env = {**os.environ, **stack.settings.to_env()}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "trainer.py"), "--steps", "2", "--tasks", "2",
                          "--group-size", "2", "--json", "--timeout", "300"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["step"] for r in rows] == [0, 1] and [r["policy_version"] for r in rows] == [0, 1]
    for r in rows:
        assert r["groups"] == 2 and r["sessions"] == 4 and r["usable"] == 4 and r["stale_dropped"] == 0
        assert r["reward_mean"] == 1.0 and r["trainable_tokens"] > 0 and r["advantages"] == r["traces"] >= 4
        assert r["swap_drained"] is True


def test_without_a_stack_the_example_trainer_says_so_in_one_line(tmp_path):
    from infra.embedded_redis import free_port

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    dead = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLAR_")}
    env.update(POLAR_HOME=str(home), POLAR_API_URL=dead, POLAR_PROXY_URL=dead)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "trainer.py"), "--steps", "1"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cannot reach" in out.stderr and "Traceback" not in out.stderr
