"""The local runtime: isolated HOME and env, process-group kills on timeout and cancel."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.schemas import RuntimeSpec
from tests.support import wait_for
from workers import runtimes


@pytest.fixture
def rt(tmp_path):
    runtime = runtimes.create(RuntimeSpec(env={"FROM_SPEC": "1"}), "sess-1", tmp_path)
    runtime.start()
    yield runtime
    runtime.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_env_is_isolated_and_injected(rt, monkeypatch):
    monkeypatch.setenv("WORKER_SECRET", "leak")
    res = rt.exec('echo "$HOME|$FROM_SPEC|$EXTRA|${WORKER_SECRET:-none}|$PWD"', env={"EXTRA": "x"})
    home, spec, extra, secret, pwd = res.stdout.strip().split("|")
    assert res.ok and home.endswith("sess-1/home") and spec == "1" and extra == "x"
    assert secret == "none"
    assert pwd.endswith("sess-1/workspace")


def test_timeout_kills_the_whole_process_group(rt, tmp_path):
    pidfile = tmp_path / "child.pid"
    res = rt.exec(f"sleep 300 & echo $! > {pidfile}; sleep 300", timeout=0.5)
    assert res.timed_out and res.exit_code is None
    child = int(pidfile.read_text())
    wait_for(lambda: not alive(child), timeout=5)


def test_cancel_from_another_process_kills_the_command(rt, tmp_path):
    handle = rt.handle
    code = ("import sys, time; from workers import runtimes; time.sleep(0.5); "
            f"runtimes.attach({handle!r}).cancel()")
    canceller = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2])
    res = rt.exec("sleep 300", timeout=60)
    canceller.wait(timeout=30)
    assert res.cancelled and not res.timed_out


def test_should_cancel_callback_is_polled(rt):
    t0 = time.monotonic()
    res = rt.exec("sleep 300", should_cancel=lambda: time.monotonic() - t0 > 0.3)
    assert res.cancelled


def test_nonzero_exit_and_streams(rt):
    res = rt.exec("echo out; echo err >&2; exit 3")
    assert res.exit_code == 3 and res.stdout.strip() == "out" and res.stderr.strip() == "err"


def test_upload_download_and_session_paths(rt, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("payload")
    rt.upload(str(src), "/polar/session/agent/in.txt")
    rt.upload(str(src), "rel/in.txt")
    assert rt.exec("cat ../agent/in.txt rel/in.txt").stdout == "payloadpayload"
    rt.download("rel/in.txt", str(tmp_path / "out.txt"))
    assert (tmp_path / "out.txt").read_text() == "payload"


def test_stop_removes_everything(tmp_path):
    runtime = runtimes.create(RuntimeSpec(), "sess-2", tmp_path)
    runtime.start()
    runtime.stop()
    runtime.stop()  # twice is fine
    assert not (tmp_path / "sess-2").exists()


def test_unknown_backend_is_a_clear_error(tmp_path):
    with pytest.raises(runtimes.RuntimeBackendError, match="not available"):
        runtimes.BACKENDS.resolve("nope")


def test_a_daemon_that_left_the_process_group_dies_with_the_session(rt, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    res = rt.exec(f"setsid bash -c 'echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; exec sleep 300' "
                  f"< /dev/null > /dev/null 2>&1 & until [ -e {pidfile} ]; do sleep 0.01; done", timeout=30)
    assert res.exit_code == 0
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=5)
    daemon = int(pidfile.read_text())
    assert alive(daemon)  # it survived its command's process group
    rt.stop()
    wait_for(lambda: not alive(daemon), timeout=5)


def test_a_daemon_that_keeps_re_executing_itself_dies_with_the_session(tmp_path):
    """A process inside execve shows an empty environment for a moment; the teardown's sweep
    took that as another's process, so one exec'ing just then outlived its session (a CI run
    caught ``exec sleep``). One that re-executes itself in a loop is mid-exec ~40 % of the time:
    sixteen sessions, one such daemon each, all must die (the old sweep let 1-3 of ten live)."""
    loop = tmp_path / "again.sh"
    loop.write_text('#!/bin/sh\nexec "$0"\n')
    loop.chmod(0o755)
    daemons = []
    try:
        for i in range(16):
            runtime = runtimes.create(RuntimeSpec(), f"loop-{i}", tmp_path)
            runtime.start()
            pidfile = tmp_path / f"loop-{i}.pid"
            res = runtime.exec(f"setsid sh -c 'echo $$ > {pidfile}; exec {loop}' < /dev/null > /dev/null 2>&1 & "
                               f"until [ -s {pidfile} ]; do sleep 0.01; done", timeout=30)
            assert res.exit_code == 0
            daemons.append(int(pidfile.read_text()))
            assert alive(daemons[-1])
            runtime.stop()
        time.sleep(0.2)  # (a survivor keeps exec'ing: it stays alive)
        assert [pid for pid in daemons if alive(pid)] == []
    finally:
        for pid in daemons:  # a failed run leaves nothing looping
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_stacks_shutdown_sweep_kills_only_the_sessions_own_groups_and_removes_nothing(tmp_path):
    """``polar up``'s shutdown kills the process groups sessions recorded in ``.pids``: a session
    that made ``.pids`` a link to a host folder, or wrote another process's pid there, had that
    folder's files deleted and the process killed."""
    from infra.stack import kill_runtime_processes

    host = runtimes.RuntimeHost(root=tmp_path / "sessions")
    mine = runtimes.create(RuntimeSpec(backend="local"), "sess-mine", host)
    other = runtimes.create(RuntimeSpec(backend="local"), "sess-other", host)
    mine.start()
    other.start()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep_me.conf").write_text("x")
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    agent = subprocess.Popen(["sleep", "60"], start_new_session=True,
                             env={**os.environ, "POLAR_SESSION_DIR": str(mine.root)})
    try:
        (mine.root / ".pids" / str(agent.pid)).touch()  # what the runtime records for its command
        (mine.root / ".pids" / str(bystander.pid)).touch()  # forged by the session
        shutil.rmtree(other.root / ".pids")
        (other.root / ".pids").symlink_to(victim)  # a link out
        (victim / str(bystander.pid)).write_text("")
        assert kill_runtime_processes(host.root) == 1
        assert agent.wait(timeout=10) == -9 and bystander.poll() is None
        assert sorted(p.name for p in victim.iterdir()) == sorted(["keep_me.conf", str(bystander.pid)])
    finally:
        for p in (bystander, agent):
            p.kill()
            p.wait()
        mine.stop()
        other.stop()


def test_a_sweep_goes_on_past_what_a_teardown_removes_under_it(tmp_path):
    """A session's teardown removes its folder and its markers while a sweep may be running: the
    sweep listed a marker, and its lstat raised FileNotFoundError -- the whole pass failed ("reaper
    pass failed" with a traceback every few seconds under load), so nothing after it was swept.
    Found by a soak's worker logs. The race is made here by the status lookup, which runs between
    the listing and the next entry, removing the next entries as a teardown would."""
    from workers.runtimes.base import CANCEL_SUFFIX
    from workers.runtimes.sweeper import sweep_local

    root = tmp_path / "sessions"
    root.mkdir()
    for name in ("sess-a", "sess-c"):
        (root / name).mkdir()
    (root / f"sess-b{CANCEL_SUFFIX}").touch()  # listed after sess-a, gone before its turn
    (root / "sess-b").mkdir()

    def status_of(session_id):
        if session_id == "sess-a":  # meanwhile, sess-b's own teardown ends
            shutil.rmtree(root / "sess-b", ignore_errors=True)
            (root / f"sess-b{CANCEL_SUFFIX}").unlink(missing_ok=True)
        return None  # over: every folder is the sweep's

    assert sweep_local(root, status_of, min_age=0) == ["sess-a", "sess-c"]
    assert sorted(p.name for p in root.iterdir()) == []
