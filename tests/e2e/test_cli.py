"""`polar up` in the foreground, driven by the other CLI commands, then Ctrl-C: nothing is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from infra.embedded_redis import free_port
from tests.e2e.conftest import EXAMPLES, wait_for

ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split()[2] != "Z"
    except OSError:
        return False


def polar(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.cli.main", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_up_submit_status_and_ctrl_c(tmp_path, model_dir):
    env = {**os.environ, "POLAR_HOME": str(tmp_path)}
    for name in ("API", "PROXY", "UPSTREAM"):
        env[f"POLAR_{name}_URL"] = f"http://127.0.0.1:{free_port()}"
    env.pop("POLAR_REDIS_URL", None)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny-qwen2").symlink_to(model_dir)
    up = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "up", "--policy",
                           f"demo-policy={EXAMPLES / 'demo_policy.json'}"], env=env, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        state_file = tmp_path / "up.json"
        wait_for(lambda: state_file.exists() or up.poll() is not None, timeout=120)
        assert up.poll() is None, up.stdout.read()
        state = json.loads(state_file.read_text())
        assert state["api_url"] == env["POLAR_API_URL"] and state["redis_url"].startswith("redis://")
        children = descendants(up.pid)
        assert len(children) >= 8  # redis, model, proxy, api, 5 workers (+ their pools)
        tokens = json.loads((tmp_path / "tokens.json").read_text())
        assert (tmp_path / "tokens.json").stat().st_mode & 0o077 == 0  # owner only
        assert httpx.get(f"{state['api_url']}/rollout/status", timeout=10).status_code == 401
        assert not any(secret in json.dumps(state) for secret in tokens.values())
        # Redis too asks for a password (tokens.json has it, up.json does not), and the folder of
        # its append-only file is the user's alone.
        assert tokens["redis_password"]
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(state["redis_url"]).ping()
        assert (tmp_path / "redis").stat().st_mode & 0o077 == 0

        # The other commands find the running stack through its state file.
        cli_env = {k: v for k, v in env.items() if not k.startswith("POLAR_") or k == "POLAR_HOME"}
        task = json.loads((EXAMPLES / "demo_task.json").read_text())
        task["num_samples"] = 2
        task["runtime"]["prepare"][0]["src"] = str(EXAMPLES / "bash_agent.py")
        task_file = tmp_path / "task.json"
        task_file.write_text(json.dumps(task))
        sub = polar("submit", str(task_file), "--wait", "--timeout", "120", "--json", env=cli_env)
        assert sub.returncode == 0, sub.stdout + sub.stderr
        summary = json.loads(sub.stdout)  # stdout is the JSON alone; the progress bar went to stderr
        task_id = summary["task_id"]
        assert summary["counts"] == {"COMPLETED": 2} and len(summary["sessions"]) == 2
        assert summary["mean_stage_ms"]["run"] > 0 and summary["mean_stage_ms"]["total"] >= summary["mean_stage_ms"]["run"]
        assert task_id in sub.stderr  # the bar's final state
        late = polar("submit", str(task_file), "--wait", "--timeout", "0.01", "--json", env=cli_env)
        assert late.returncode == 1 and "not finished after" in late.stderr
        late_summary = json.loads(late.stdout)  # a timed-out wait still says which task, and how far it got
        assert late_summary["timed_out"] is True and late_summary["total_sessions"] == 2
        assert polar("cancel", late_summary["task_id"], env=cli_env).returncode == 0
        human = polar("status", task_id, env=cli_env)
        assert "COMPLETED" in human.stdout and "mean time per stage" in human.stdout
        st = polar("status", task_id, "--json", env=cli_env)
        assert json.loads(st.stdout)["counts"] == {"COMPLETED": 2}
        pipe = polar("status", "--json", env=cli_env)
        assert json.loads(pipe.stdout)["ready"]["capacity"] > 0
        ver = polar("verify", "--task", task_id, "--model", "demo-policy", "--json", env=cli_env)
        assert ver.returncode == 0, ver.stdout + ver.stderr
        reports = json.loads(ver.stdout)
        assert len(reports) == 2 and all(rep["ok"] and rep["traces"] for rep in reports)
        assert "traces scored" in ver.stderr
        sweep = polar("runtimes", "sweep", "--json", env=cli_env)  # Redis found through up.json
        assert sweep.returncode == 0 and json.loads(sweep.stdout)["removed"] == [], sweep.stderr
        # Weight sync from the command line, with the admin token `polar up` stored.
        held = polar("weights", "pause", "--holder", "ops", "--lease", "60", "--drain", "5", "--json", env=cli_env)
        assert held.returncode == 0, held.stdout + held.stderr
        assert json.loads(held.stdout)["holder"] == "ops" and json.loads(held.stdout)["drained"] is True
        shown = json.loads(polar("weights", "status", "--json", env=cli_env).stdout)
        assert shown["paused"] is True and shown["holders"] == 1
        assert "paused by 1 holder" in polar("weights", "status", env=cli_env).stdout
        resumed = polar("weights", "resume", "--version", "3", "--json", env=cli_env)  # the lone holder's
        assert resumed.returncode == 0 and json.loads(resumed.stdout)["policy_version"] == "3", resumed.stderr
        assert json.loads(resumed.stdout)["paused"] is False
        gone_hold = polar("weights", "resume", "--holder", "ops", env=cli_env)  # already given back
        assert gone_hold.returncode == 1 and "pause_not_held" in gone_hold.stderr, gone_hold.stderr
        polar("weights", "pause", "--holder", "ops", "--drain", "1", env=cli_env)
        back = polar("weights", "resume", "--version", "2", env=cli_env)
        assert back.returncode == 1 and "policy_version_backwards" in back.stderr, back.stderr
        forced = polar("weights", "resume", "--version", "2", "--force", "--json", env=cli_env)
        assert forced.returncode == 0 and json.loads(forced.stdout)["policy_version"] == "2"
        # A payload the API refuses: exit 2, its field errors listed, no traceback.
        bad = polar("submit", str(EXAMPLES / "demo_policy.json"), env=cli_env)
        assert bad.returncode == 2 and "\n  instruction: " in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.count("instruction: ") == 1, bad.stderr  # listed once, not summed up in the head too
        gone = polar("status", "no-such-task", env=cli_env)
        assert gone.returncode == 2 and "404" in gone.stderr
        # A second stack on this home (`polar up`, `polar demo`) is refused before it touches
        # anything: it appended to the same Redis file, deleted up.json and, stopping, killed this
        # stack's agents. A stack elsewhere on this stack's ports is refused too (its health checks
        # were answered by this stack's servers).
        before = state_file.read_text()
        other_ports = {f"POLAR_{n}_URL": f"http://127.0.0.1:{free_port()}" for n in ("API", "PROXY", "UPSTREAM")}
        second = polar("up", env={**env, **other_ports}, timeout=90)
        assert second.returncode == 2 and "is in use by a running stack" in second.stderr, second.stdout + second.stderr
        assert f"pid {up.pid}" in second.stderr
        again = polar("demo", "--samples", "1", env=cli_env, timeout=90)
        assert again.returncode == 2 and "is in use by a running stack" in again.stderr, again.stdout + again.stderr
        elsewhere = polar("up", env={**env, "POLAR_HOME": str(tmp_path / "elsewhere")}, timeout=90)
        assert elsewhere.returncode == 2 and "is taken" in elsewhere.stderr, elsewhere.stdout + elsewhere.stderr
        assert state_file.read_text() == before and up.poll() is None
        assert httpx.get(f"{state['api_url']}/health", timeout=10).status_code == 200
    finally:
        up.send_signal(signal.SIGINT)
        try:
            out, _ = up.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # where it hangs: every thread's stack (SIGUSR1), then the output
            up.send_signal(signal.SIGUSR1)
            time.sleep(2)
            up.kill()
            out, _ = up.communicate()
            pytest.fail(f"polar up did not stop within 60 s of Ctrl-C:\n{out[-6000:]}")
    assert up.returncode == 0, out
    assert "stopping" in out and not any(secret in out for secret in tokens.values())  # never printed
    logs = [p for p in Path(state["logs"]).rglob("*") if p.is_file()]
    assert logs and not any(secret in p.read_text(errors="replace") for p in logs for secret in tokens.values())
    # A clean stop writes no traceback: each gunicorn worker gets SIGINT (its group's) and SIGQUIT
    # (its master's) and used to print the second exit as a SystemExit traceback.
    servers = [p for p in logs if p.name in ("api.log", "proxy.log", "model.log")]
    assert {p.name for p in servers} >= {"api.log", "proxy.log"}
    for log in servers:
        assert "Traceback" not in log.read_text(errors="replace"), f"{log.name}:\n{log.read_text()[-3000:]}"
    assert "all ready" in out  # the start-up progress bar's final state (stderr is not a terminal here)
    wait_for(lambda: not any(alive(p) for p in children), timeout=10)
    assert not (tmp_path / "up.json").exists()
    for url in (state["api_url"], env["POLAR_PROXY_URL"]):
        try:
            httpx.get(f"{url}/health", timeout=1)
            raise AssertionError(f"{url} still answers")
        except httpx.HTTPError:
            pass
