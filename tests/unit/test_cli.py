"""The CLI without a stack (click's CliRunner): --json output parsed, exit codes, errors as one
message. The commands that need a running stack are in tests/e2e/test_cli.py."""

from __future__ import annotations

import json
import stat

import httpx
import pytest
from click.testing import CliRunner

from infra.cli.main import cli
from infra.embedded_redis import free_port
from infra.harness_tools import HARNESS_CLIS


@pytest.fixture
def env(tmp_path):
    """A home of its own, and nothing listening where the API, proxy, engine and Redis would be."""
    dead = f"http://127.0.0.1:{free_port()}"
    return {"POLAR_HOME": str(tmp_path), "POLAR_API_URL": dead, "POLAR_PROXY_URL": dead, "POLAR_UPSTREAM_URL": dead,
            "POLAR_REDIS_URL": None, "REDIS_URL": None, "POLAR_TOOLS_DIR": None, "POLAR_DOCKER_HOST": None,
            "DOCKER_HOST": None}


def polar(env: dict, *args: str):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def fake_cli(tools, name: str, version: str, script: str) -> None:
    """A harness CLI as `polar harnesses install` lays it out: package.json and a command in bin/."""
    package, _, command = HARNESS_CLIS[name]
    meta = tools / "lib" / "node_modules" / package
    meta.mkdir(parents=True)
    (meta / "package.json").write_text(json.dumps({"name": package, "version": version}))
    (tools / "bin").mkdir(exist_ok=True)
    exe = tools / "bin" / command
    exe.write_text(f"#!/bin/sh\n{script}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_help_documents_the_exit_codes(env):
    out = polar(env, "--help")
    assert out.exit_code == 0
    for code in ("0 ", "1 ", "2 ", "130"):
        assert f"  {code}" in out.stdout
    assert "benchmark goal missed" in out.stdout


def test_harnesses_list_json_reports_what_the_tools_folder_holds(env, tmp_path):
    fake_cli(tmp_path / "tools", "codex", "0.171.0", "echo codex-cli 0.171.0")
    out = polar(env, "harnesses", "list", "--json")
    assert out.exit_code == 0, out.output
    rows = {r["harness"]: r for r in json.loads(out.stdout)}
    assert set(rows) == set(HARNESS_CLIS)
    assert rows["codex"]["installed"] == "0.171.0" and rows["codex"]["pinned"] == HARNESS_CLIS["codex"][1]
    assert rows["pi"]["installed"] is None and rows["pi"]["command"] == "pi"


def test_doctor_json_and_exit_1_when_an_installed_cli_is_broken(env, tmp_path):
    tools = tmp_path / "tools"
    fake_cli(tools, "codex", "0.171.0", "echo codex-cli 0.171.0")
    fake_cli(tools, "pi", "0.73.1", "echo 'cannot load its module' >&2; exit 3")
    out = polar(env, "harnesses", "doctor", "--no-smoke", "--json")
    assert out.exit_code == 1, out.output
    report = json.loads(out.stdout)  # stdout holds the JSON only; the verdict goes to stderr
    clis = {c["harness"]: c for c in report["clis"]}
    assert clis["codex"]["ok"] is True and "0.171.0" in clis["codex"]["detail"]
    assert clis["pi"]["ok"] is False and "cannot load its module" in clis["pi"]["detail"]
    assert clis["gemini_cli"]["ok"] is None and clis["gemini_cli"]["installed"] is None
    assert report["problems"] == 1 and report["smoke"] == []
    assert "1 problem(s)" in out.stderr


def test_doctor_without_a_stack_to_smoke_test_against_exits_2(env, tmp_path):
    fake_cli(tmp_path / "tools", "codex", "0.171.0", "echo codex-cli 0.171.0")
    out = polar(env, "harnesses", "doctor", "--json")
    assert out.exit_code == 2 and "cannot reach" in out.stderr and "Traceback" not in out.output


def test_harnesses_install_of_an_unknown_harness_is_a_usage_error(env):
    out = polar(env, "harnesses", "install", "vim")
    assert out.exit_code == 2 and "unknown harness vim" in out.stderr


def test_tools_list_json_and_exit_2_without_tools(env, tmp_path):
    out = polar(env, "tools", "list", "--json")
    assert out.exit_code == 2 and "has no tools yet" in out.stderr
    assert "has no tools yet" in json.loads(out.stdout)["error"]["message"]  # --json: the failure as JSON
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "manifest.json").write_text(json.dumps({"node": "v20.1.0", "packages": ["a@1"],
                                                                   "bins": ["a", "node"]}))
    out = polar(env, "tools", "list", "--json")
    assert out.exit_code == 0
    assert json.loads(out.stdout) == {"folder": str(tmp_path / "tools"), "node": "v20.1.0", "packages": ["a@1"],
                                      "bins": ["a", "node"]}
    human = polar(env, "tools", "list")
    assert "v20.1.0" in human.stdout and "a@1" in human.stdout


def test_runtimes_sweep_json_asks_redis_which_sessions_are_live(env, tmp_path, redis_url):
    root = tmp_path / "runtimes"
    for name in ("sess-left-by-a-lost-stack", "sess-another"):
        (root / name).mkdir(parents=True)
    out = polar({**env, "POLAR_REDIS_URL": redis_url}, "runtimes", "sweep", "--min-age", "0", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)  # Redis knows neither session: both are over
    assert report == {"runtime_root": str(root), "removed": ["sess-another", "sess-left-by-a-lost-stack"]}
    assert not any(root.iterdir())


def test_runtimes_sweep_without_redis_exit_2(env, tmp_path):
    out = polar(env, "runtimes", "sweep")
    assert out.exit_code == 2 and "--stack-gone" in out.stderr
    (tmp_path / "runtimes" / "sess-x").mkdir(parents=True)
    out = polar({**env, "POLAR_REDIS_URL": f"redis://127.0.0.1:{free_port()}"}, "runtimes", "sweep", "--min-age", "0")
    assert out.exit_code == 2 and "cannot reach Redis" in out.stderr, out.output
    assert (tmp_path / "runtimes" / "sess-x").exists()  # nothing removed on a guess


@pytest.mark.parametrize("args", [("status",), ("status", "task-1", "--json"), ("cancel", "task-1"),
                                  ("weights", "status", "--json"), ("weights", "resume", "--force")])
def test_no_running_stack_is_exit_2_with_one_line(env, args):
    out = polar(env, *args)
    assert out.exit_code == 2 and "cannot reach" in out.stderr and "polar up" in out.stderr
    assert "Traceback" not in out.output
    # stdout: nothing, or with --json the failure as one JSON document
    assert json.loads(out.stdout)["error"]["exit_code"] == 2 if "--json" in args else out.stdout == ""


def test_submit_of_a_file_that_is_no_task_is_exit_2(env, tmp_path):
    for name, text in (("broken.json", "{not json"), ("list.json", "[1, 2]"),
                       # (a traceback once: Python's parser takes NaN, and a nesting past its recursion limit)
                       ("nan.json", '{"instruction": "x", "timeout_seconds": NaN}'),
                       ("inf.json", '{"timeout_seconds": -Infinity}'), ("deep.json", "[" * 100_000)):
        (tmp_path / name).write_text(text)
        out = polar(env, "submit", str(tmp_path / name))
        assert out.exit_code == 2 and "not a task payload" in out.stderr, out.output
        assert "Traceback" not in out.output
    out = polar(env, "submit", str(tmp_path / "missing.json"))
    assert out.exit_code == 2 and "does not exist" in out.stderr  # click's own usage error


def test_verify_usage_and_unreadable_file_are_exit_2(env, tmp_path):
    assert polar(env, "verify").exit_code == 2
    (tmp_path / "r.json").write_text(json.dumps({"session_id": 3}))
    out = polar(env, "verify", "--file", str(tmp_path / "r.json"))
    assert out.exit_code == 2 and "not a SessionResult" in out.stderr
    (tmp_path / "cut.json").write_text('{"session_id": "s", "trajectory": {')  # cut short: JSON's own error
    out = polar(env, "verify", "--file", str(tmp_path / "cut.json"))
    assert out.exit_code == 2 and "Expecting property name" in out.stderr and "line 1 column 36" in out.stderr


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_verify_reads_a_results_dir_file_and_checking_nothing_is_no_ok(env, tmp_path, fmt):
    """A POLAR_RESULTS_DIR file was "status: Field required" (exit 2); a status without results
    and a task whose sessions made no model call were "OK" (exit 0) with nothing checked."""
    from pipeline import results_dir
    from pipeline.schemas import SessionResult, TaskStatus, Trajectory
    from pipeline.status import SessionStatus

    result = SessionResult(session_id="ses_a", task_id="t", sample_index=0, status=SessionStatus.ERROR,
                           trajectory=Trajectory(traces=[]))
    path = results_dir.write(tmp_path / "results", result, [], [], fmt=fmt)
    out = polar(env, "verify", "--file", str(path))
    assert out.exit_code == 1 and "nothing to verify" in out.stderr and "1 session" in out.stderr, out.output
    status = tmp_path / "status.json"
    status.write_text(TaskStatus(task_id="t", status="completed", total_sessions=1, counts={}, sessions=[]).model_dump_json())
    out = polar(env, "verify", "--file", str(status))
    assert out.exit_code == 2 and "no session results" in out.stderr, out.output


def test_generate_of_unreadable_instances_is_exit_2(env, tmp_path):
    (tmp_path / "in.jsonl").write_text("{oops\n")
    out = polar(env, "generate", str(tmp_path / "in.jsonl"), "--harness", "pi", "--model", "m",
                "--out", str(tmp_path / "out"), "--json")
    assert out.exit_code == 2 and json.loads(out.stdout)["error"]["exit_code"] == 2, out.output


def test_bench_only_an_unknown_name_is_a_usage_error(env):
    out = polar(env, "bench", "--only", "merge,warp")
    assert out.exit_code == 2 and "unknown benchmark warp" in out.stderr


def test_refusing_an_open_bind_is_exit_2(env):
    out = polar({**env, "POLAR_REDIS_URL": "redis://127.0.0.1:1"}, "api", "--host", "0.0.0.0")
    assert out.exit_code == 2 and "POLAR_API_TOKEN" in out.stderr


@pytest.mark.parametrize("host", ["127.evil.example", "0.0.0.0"])
def test_a_name_that_only_looks_like_loopback_is_an_open_bind(env, host):
    # (a name is not resolved to judge it: 127.evil.example may point anywhere)
    out = polar({**env, "POLAR_REDIS_URL": "redis://127.0.0.1:1"}, "proxy", "--host", host)
    assert out.exit_code == 2 and "POLAR_ADMIN_TOKEN" in out.stderr
    out = polar(env, "model", "serve", "--host", host, "--model-dir", "/nonexistent")
    assert out.exit_code == 2 and "--unauthenticated" in out.stderr


def test_the_model_server_has_no_auth_so_an_open_bind_must_be_asked_for(env):
    out = polar(env, "model", "serve", "--host", "0.0.0.0", "--model-dir", "/nonexistent")
    assert out.exit_code == 2 and "--unauthenticated" in out.stderr


def test_a_model_folder_that_is_not_one_is_refused_before_the_server_starts(env, tmp_path):
    out = polar(env, "model", "serve", "--model-dir", str(tmp_path / "nonexistent"), "--port", "1")
    assert out.exit_code == 2 and "no config.json" in out.stderr and "Traceback" not in out.output


def test_a_build_folder_that_cannot_be_made_is_one_message(env, tmp_path):
    (tmp_path / "file").write_text("x")
    out = polar(env, "model", "build", "--out", str(tmp_path / "file" / "model"))
    assert out.exit_code == 2 and "file" in out.stderr and "Traceback" not in out.output
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "data.bin").write_text("keep")
    out = polar(env, "model", "build", "--out", str(tmp_path / "theirs"))
    assert out.exit_code == 2 and "refusing to replace" in out.stderr
    assert (tmp_path / "theirs" / "data.bin").read_text() == "keep"


@pytest.mark.parametrize("argv", [("status", ""), ("cancel", " "), ("verify", "--task", "")])
def test_an_empty_id_is_a_usage_error_naming_it(env, argv):
    out = polar(env, *argv)
    assert out.exit_code == 2 and "an id cannot be empty" in out.stderr


def test_the_proxy_socket_folder_must_be_this_users_own(tmp_path):
    """Under /tmp (a POLAR_HOME path too long for a Unix socket) another user could make the
    folder first and swap the socket for their own."""
    import os

    from infra.stack import proxy_socket_path

    home = tmp_path / ("h" * 100)
    path = proxy_socket_path(home)  # too long under the home: its own folder under /tmp
    assert path.parent.stat().st_uid == os.getuid() and path.parent.name.startswith("polar-proxy-")
    os.rmdir(path.parent)
    path.parent.symlink_to(tmp_path)  # someone else's (a link is never ours)
    try:
        with pytest.raises(RuntimeError, match="not a folder of this user's"):
            proxy_socket_path(home)
    finally:
        path.parent.unlink()


def test_following_a_task_says_on_stderr_when_the_api_is_away(capsys):
    """Without a terminal there is no live bar: a `submit --wait` whose stack had gone polled on
    in silence. Now one line says so (and --timeout still bounds the wait)."""
    from infra.cli.render import follow
    from pipeline.client import RolloutClient

    client = RolloutClient(f"http://127.0.0.1:{free_port()}", api_token="x")  # nothing listens there
    with pytest.raises(httpx.TransportError):
        follow(client, "t-1", timeout=1.0, poll_seconds=0.2)
    err = capsys.readouterr().err
    assert err.count("the API is unavailable (ConnectError); polling on") == 1, err


def test_up_with_an_unreachable_redis_url_says_so_at_once(tmp_path):
    """It started every service, waited 120 s for them, and blamed the API and the proxy."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "POLAR_HOME": str(tmp_path), "POLAR_REDIS_URL": f"redis://:s3cret@127.0.0.1:{free_port()}/0",
           **{f"POLAR_{n}_URL": f"http://127.0.0.1:{free_port()}" for n in ("API", "PROXY", "UPSTREAM")}}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "up", "--no-model"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "cannot reach POLAR_REDIS_URL" in out.stderr, out.stdout + out.stderr
    assert "s3cret" not in out.stdout + out.stderr and time.monotonic() - t0 < 30


@pytest.mark.parametrize("args", [
    ("submit", "x.json", "--timeout", "-1"), ("submit", "x.json", "--timeout", "nan"),
    ("submit", "x.json", "--timeout", "0"), ("verify", "--task", "t", "--tolerance", "-1"),
    ("runtimes", "sweep", "--min-age", "-5"), ("demo", "--samples", "0"), ("demo", "--timeout", "inf"),
])
def test_out_of_range_numbers_are_usage_errors_before_anything_runs(env, tmp_path, args):
    """They were taken: a negative or NaN timeout (a wait that ends at once, or never), a
    negative tolerance, a demo of 0 samples that started the whole stack first."""
    (tmp_path / "x.json").write_text("{}")
    out = polar(env, *[str(tmp_path / a) if a == "x.json" else a for a in args])
    assert out.exit_code == 2, out.output
    assert "must be a finite number" in out.stderr or "not in the range x>=1" in out.stderr, out.output


def test_a_polar_home_that_cannot_be_a_folder_is_one_line(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "file").write_text("x")
    env = {**os.environ, "POLAR_HOME": str(tmp_path / "file")}
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "up"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "cannot hold this stack's files: it is not a folder" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_up_checks_its_policy_files_before_starting_anything(env, tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    for item in (f"x={tmp_path / 'missing.json'}", f"x={tmp_path / 'bad.json'}", "=a.json"):
        out = polar({**env, "POLAR_HOME": str(tmp_path / "home")}, "up", "--policy", item)
        assert out.exit_code == 2 and "--policy" in out.stderr, out.output
        assert not (tmp_path / "home").exists()  # refused before the stack touched anything


def test_sweeping_as_if_the_stack_were_gone_is_refused_while_it_runs(env, tmp_path):
    """--stack-gone killed a live stack's agents: the stack's home lock says it is not gone."""
    from infra.home_lock import claim_home, release

    home = tmp_path / "home"
    home.mkdir()
    held = claim_home(home)
    try:
        out = polar({**env, "POLAR_HOME": str(home)}, "runtimes", "sweep", "--stack-gone", "--min-age", "0")
        assert out.exit_code == 2 and "in use by a running stack" in out.stderr, out.output
    finally:
        release(held)
    out = polar({**env, "POLAR_HOME": str(home)}, "runtimes", "sweep", "--stack-gone", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["removed"] == [], out.output


def test_task_tables_print_ids_and_agent_errors_as_text_not_rich_markup(capsys):
    """An agent whose stderr tail held "[/red]" (a traceback, a log line) made `polar status` and
    `polar submit --wait` die with rich's MarkupError traceback; "[blink]" in a task id vanished.
    Found by submitting such a task to a running `polar up` and asking `polar status` for it."""
    from infra.cli.render import print_pipeline, print_task
    from pipeline.schemas import TaskStatus

    error = "agent exited 3: list[int] [/red] [bold]x"
    st = TaskStatus.model_validate({
        "task_id": "t[blink]x", "status": "completed", "total_sessions": 1, "finished_sessions": 1,
        "counts": {"ERROR": 1}, "sessions": [{"session_id": "sess-" + "0" * 24 + "[/b]x", "status": "ERROR",
                                              "error": error}]})
    print_task(st)
    print_pipeline({"tasks": {"[/x]": 1}, "queues": {}, "workers": {"run@[/h]": ["[/q]"]}})
    out = capsys.readouterr().out
    assert all(part in out for part in ("t[blink]x", "list[int]", "[/red]", "[bold]x", "[/b]x")), out
    assert "run@[/h]" in out and "[/q]" in out


@pytest.mark.parametrize("args", [("status", "t-1", "--json"), ("weights", "status", "--json"),
                                  ("submit", "x.json", "--json", "--timeout", "nan")])
def test_a_failing_json_command_prints_its_error_as_json_on_stdout(env, tmp_path, args):
    """With --json a failure left stdout empty (the message on stderr only): `polar status X
    --json | jq` had nothing to read and an API refusal's field errors were not machine-readable.
    Found by running `polar status nope --json` against a running stack."""
    (tmp_path / "x.json").write_text("{}")
    out = polar(env, *[str(tmp_path / a) if a == "x.json" else a for a in args])
    assert out.exit_code == 2, out.output
    error = json.loads(out.stdout)["error"]
    assert error["exit_code"] == 2 and error["message"] and error["message"] in out.stderr


def test_json_error_carries_the_apis_status_and_field_errors(capsys):
    import click

    from infra.cli.errors import translate
    from infra.cli.output import emit_json_error, reset_emitted
    from pipeline.client import RolloutError

    reset_emitted()  # (as every command starts: another test's command may have printed JSON)

    refusal = RolloutError(400, {"error": {"type": "invalid_request", "message": "m",
                                           "fields": [{"field": "num_samples", "message": "too small"}]}})
    mapped = translate(refusal)
    assert isinstance(mapped, click.ClickException)
    try:
        raise mapped from refusal
    except click.ClickException as exc:
        emit_json_error(exc)
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["status"] == 400 and error["fields"] == [{"field": "num_samples", "message": "too small"}]
