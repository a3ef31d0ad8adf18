"""The container engine's API going away under a stack (its service stopped, a crashed daemon)
or hanging (a stopped or wedged daemon): a docker session that INIT starts then ends ERROR at
once, the error naming the engine, nothing of it is left on the worker's host, and the rest of
the stack keeps recovering lost stages. Its own stack and its own podman service (the other e2e
tests share one that must not stop)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import docker
import pytest

from infra.stack import Stack, StackConfig
from pipeline.client import RolloutClient
from pipeline.settings import Settings
from pipeline.status import SessionStatus
from tests.conftest import TEST_IMAGE, _require_tool
from tests.e2e.conftest import EXAMPLES, FIXTURES, sleepy_task, wait_for


class Engine:
    def __init__(self, sock) -> None:
        self.sock, self.proc = sock, None

    def start(self) -> None:
        self.sock.unlink(missing_ok=True)
        self.proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{self.sock}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.sock.parent)
        deadline = time.monotonic() + 30
        while not self.sock.exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "podman system service did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def engine_and_stack(tmp_path_factory, model_dir, engine):
    if engine is None:
        _require_tool("podman")
    own = Engine(tmp_path_factory.mktemp("own-podman") / "podman.sock")
    own.start()
    settings = Settings(home=tmp_path_factory.mktemp("engine-loss-home"), stage_lease_seconds=6,
                        reaper_interval_seconds=2, docker_host=f"unix://{own.sock}", docker_call_timeout_seconds=5)
    config = StackConfig(settings=settings, model_dir=model_dir, policies={"demo-policy": str(EXAMPLES / "demo_policy.json"),
                                                              "sleepy-policy": str(FIXTURES / "sleepy_policy.json")})
    try:
        with Stack(config) as stack:
            yield own, stack
    finally:
        own.stop()


def test_an_engine_gone_before_init_is_named_and_leaves_no_folder(engine_and_stack, demo_task):
    own, stack = engine_and_stack
    client = RolloutClient.from_settings(stack.settings)
    demo_task["runtime"].update(backend="docker", image=TEST_IMAGE)
    demo_task["num_samples"] = 1
    # A first session: the INIT worker has talked to the engine (its client is made and kept).
    first = client.wait(client.submit(demo_task), timeout=240, poll_seconds=0.3)
    assert first.results[0].status == SessionStatus.COMPLETED, first.results[0].error
    own.stop()
    try:
        demo_task["task_id"] += "-b"
        started = time.monotonic()
        status = client.wait(client.submit(demo_task), timeout=120, poll_seconds=0.2)
        [result] = status.results
        assert result.status == SessionStatus.ERROR
        assert time.monotonic() - started < 30
        # The cause by name (it was "init: ('Connection aborted.', FileNotFoundError(2, ...))").
        assert "cannot reach the container engine" in result.error and str(own.sock) in result.error, result.error
        # Torn down though the engine is away: the session's folder goes with the session, not
        # half a minute later with the sweeper.
        wait_for(lambda: not (stack.settings.runtime_root / result.session_id).exists(), timeout=5)
    finally:
        own.start()


def test_a_hung_engine_at_init_ends_the_session_after_a_control_wait(engine_and_stack, demo_task):
    """The engine hung before INIT makes the container: the create waited the client's 120 s, and
    the teardown's remove 120 s more. Both now wait ``docker_call_timeout_seconds`` (5 s here),
    and the error says the engine did not answer."""
    own, stack = engine_and_stack
    client = RolloutClient.from_settings(stack.settings)
    demo_task["runtime"].update(backend="docker", image=TEST_IMAGE)
    demo_task.update(num_samples=1, task_id=demo_task["task_id"] + "-hung-init")
    os.kill(own.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        status = client.wait(client.submit(demo_task), timeout=300, poll_seconds=0.3)
        took = time.monotonic() - started
        [result] = status.results
        assert result.status == SessionStatus.ERROR
        assert "did not answer within 5s" in result.error and str(own.sock) in result.error, result.error
        assert took < 45, f"the session ended {took:.0f}s after it was submitted"
        assert not (stack.settings.runtime_root / result.session_id).exists()
    finally:
        os.kill(own.proc.pid, signal.SIGCONT)
    _swept(stack, result.session_id)


def _swept(stack: Stack, sid: str) -> None:
    """Once the engine answers again, the sweeper removes what a hung engine kept (a container
    it made after the create gave up waiting, or one the teardown could not remove)."""
    from workers.runtimes import docker_engine

    def gone() -> bool:
        try:
            listed = docker_engine.session_containers(stack.settings.docker_host, stack.settings.runtime_root)
        except docker.errors.APIError as exc:
            # A create the hung engine half-made can stay in podman's store broken, and then every
            # listing fails naming it ("getting container from store <id>: container not known");
            # only a forced removal clears it (later tests list the same store).
            broken = re.search(r'container from store "([0-9a-f]{12,64})": container not known', str(exc))
            if broken is None:
                raise
            docker_engine.remove_container(stack.settings.docker_host, broken.group(1))
            return False
        return not [c for c in listed if c[1] == sid]
    wait_for(gone, timeout=90)
    time.sleep(3)  # a create the engine took before it hung may be made only now (after our list)
    wait_for(gone, timeout=90)


def test_a_hung_engine_does_not_hold_up_recovering_a_lost_worker(engine_and_stack):
    """Every worker's reaper thread swept the host's containers before each pass, through a
    client that waits 120 s: with the engine hung, a RUN worker killed under a *local* session
    was recovered only after that wait. The sweep now comes after the pass and waits 10 s."""
    own, stack = engine_and_stack
    client = RolloutClient.from_settings(stack.settings)
    task_id = client.submit(sleepy_task(timeout_seconds=300))  # the local runtime: no engine needed
    sid = client.status(task_id).sessions[0].session_id
    wait_for(lambda: (stack.settings.runtime_root / sid / "workspace" / "started.txt").exists(), timeout=60)
    os.kill(own.proc.pid, signal.SIGSTOP)
    try:
        killed = time.monotonic()
        stack.kill("worker-run")
        # lease (6 s) + the reaper's grace (6 s) + a pass (2 s) + a sweep's wait (10 s) + the stages
        status = client.wait(task_id, timeout=60, poll_seconds=0.3)
        [result] = status.results
        assert result.status == SessionStatus.ERROR and "run worker lost" in result.error, result.error
        assert time.monotonic() - killed < 50
    finally:
        os.kill(own.proc.pid, signal.SIGCONT)


def test_a_hung_engine_mid_run_ends_a_docker_session_soon_after_its_budget(engine_and_stack):
    """The engine hung (SIGSTOP) while a docker session's agent runs: at its budget RUN kills the
    agent, ends what it left, and EVALUATE tears the container down -- each a call to the engine.
    They all waited the engine client's 120 s (a 20 s session took over 500 s, holding its run
    slot). Control calls now wait ``docker_call_timeout_seconds`` (5 s here), and a runtime that
    saw the engine not answer asks it nothing more."""
    own, stack = engine_and_stack
    client = RolloutClient.from_settings(stack.settings)
    task = sleepy_task(timeout_seconds=20)
    task["runtime"].update(backend="docker", image=TEST_IMAGE)
    task_id = client.submit(task)
    sid = client.status(task_id).sessions[0].session_id
    folder = stack.settings.runtime_root / sid
    wait_for(lambda: (folder / "workspace" / "started.txt").exists(), timeout=120)
    os.kill(own.proc.pid, signal.SIGSTOP)
    try:
        hung = time.monotonic()
        status = client.wait(task_id, timeout=240, poll_seconds=0.5)
        took = time.monotonic() - hung
        [result] = status.results
        assert result.status == SessionStatus.TIMEOUT, result.error
        # What was left of the budget (< 20 s) + the agent's kill (5 s) + the teardown's remove
        # (5 s) + the stages; it was 20 + 4 x 120 s.
        assert took < 75, f"the session ended {took:.0f}s after the engine hung"
        assert not folder.exists()  # the folder goes with the session, the engine away or not
    finally:
        os.kill(own.proc.pid, signal.SIGCONT)
    _swept(stack, sid)
