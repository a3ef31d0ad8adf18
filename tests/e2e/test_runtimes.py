"""The example task, unchanged but for its runtime, through the whole stack on every backend
that runs here: ``local``, ``bwrap`` (with and without a network) and ``docker`` through podman
(host network, and no network with the proxy reached over its Unix socket). The agent's model
calls go from inside the runtime through the proxy into the session's records; the evaluator
checks the agent's file where the agent wrote it; nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline.status import SessionStatus, TaskState
from tests.conftest import TEST_IMAGE
from tests.e2e.conftest import ROOT, wait_for
from workers import runtimes
from workers.runtimes import RuntimeHost

VARIANTS = {
    "local": {"backend": "local"},
    "bwrap": {"backend": "bwrap"},
    "bwrap-no-network": {"backend": "bwrap", "allow_internet": False},
    "docker-host-network": {"backend": "docker", "image": TEST_IMAGE, "network": "host"},
    "docker-no-network": {"backend": "docker", "image": TEST_IMAGE, "allow_internet": False},
}


@pytest.fixture
def needs(request, engine):
    def _needs(backend: str) -> None:
        if backend == "docker" and engine is None:
            pytest.skip("podman is not installed")
        if backend == "bwrap":
            request.getfixturevalue("bwrap_available")
    return _needs


def containers_of(stack, task_id: str) -> list[str]:
    from workers.runtimes import docker

    engine = stack.settings.docker_host
    return [c.name for c in docker.client(engine).containers.list(all=True, filters={"label": f"polar.task={task_id}"})]


def leftovers(stack, status) -> list[str]:
    return [s.session_id for s in status.sessions if (stack.settings.runtime_root / s.session_id).exists()]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_example_task_passes_on_every_backend(variant, client, demo_task, stack, needs):
    runtime = VARIANTS[variant]
    needs(runtime["backend"])
    demo_task["runtime"].update(runtime)
    demo_task["num_samples"] = 2
    task_id = client.submit(demo_task)
    status = client.wait(task_id, timeout=240, poll_seconds=0.3)
    assert status.status == TaskState.COMPLETED, [(r.status, r.error) for r in status.results]
    assert [r.reward for r in status.results] == [1.0, 1.0]
    for result in status.results:
        # Every model call the agent made from inside the runtime landed in its session.
        assert result.trajectory.metadata["completions"] >= 2
        assert all(t.response_ids and t.metadata["session_id"] == result.session_id
                   for t in result.trajectory.traces)
    wait_for(lambda: not leftovers(stack, status), timeout=30)
    if runtime["backend"] == "docker":
        wait_for(lambda: not containers_of(stack, task_id), timeout=30)


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_fresh_evaluation_runtime_is_made_while_the_agent_runs(backend, client, demo_task, stack, needs):
    """``evaluator.refresh_runtime``: grading happens in a second runtime, prepared (its own
    ``eval_prepare``) during the agent's run -- clean of what the agent wrote."""
    needs(backend)
    if backend == "docker":
        demo_task["runtime"].update(backend="docker", image=TEST_IMAGE)
    demo_task["runtime"]["eval_prepare"] = [{"type": "exec", "command": "echo fresh > marker.txt"}]
    shell = demo_task["agent"]["custom_shell"]
    shell["command"] = "sleep 3 && " + shell["command"]  # an agent slower than the warm-up
    demo_task["evaluator"] = {"strategy": "command", "refresh_runtime": True, "config": {
        "command": "test ! -e hello.txt && test \"$(cat marker.txt)\" = fresh"}}
    demo_task["num_samples"] = 1
    task_id = client.submit(demo_task)
    status = client.wait(task_id, timeout=240, poll_seconds=0.3)
    result = status.results[0]
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, result.error
    t = result.timing
    # The warm-up overlapped the agent: started after it, ready before it ended.
    assert t.run_started_at <= t.eval_runtime_started_at < t.eval_runtime_ready_at < t.run_ended_at
    assert result.timing.durations_ms["eval_runtime_warmup"] > 0
    wait_for(lambda: not leftovers(stack, status) and not (stack.settings.runtime_root /
                                                            f"{result.session_id}.eval").exists(), timeout=30)
    if backend == "docker":
        wait_for(lambda: not containers_of(stack, task_id), timeout=30)


def test_a_failed_warm_up_fails_the_evaluation_not_the_stack(client, demo_task, stack):
    demo_task["runtime"]["eval_prepare"] = [{"type": "exec", "command": "exit 7"}]
    demo_task["evaluator"] = {"strategy": "command", "refresh_runtime": True, "config": {"command": "true"}}
    demo_task["num_samples"] = 1
    status = client.wait(client.submit(demo_task), timeout=240, poll_seconds=0.3)
    result = status.results[0]
    assert result.status == SessionStatus.ERROR and result.reward is None
    assert "evaluation runtime could not be made ready" in result.error and "eval_prepare[0] exited 7" in result.error
    assert result.trajectory.traces  # what the agent did is still there for the trainer


def test_an_image_the_host_lacks_is_a_clear_session_error(client, demo_task, stack, needs):
    needs("docker")
    demo_task["runtime"].update(backend="docker", image="localhost/polar-no-such-image:1")
    demo_task["num_samples"] = 1
    status = client.wait(client.submit(demo_task), timeout=120, poll_seconds=0.3)
    assert status.results[0].status == SessionStatus.ERROR
    assert "localhost/polar-no-such-image:1" in status.results[0].error
    assert "never pull" in status.results[0].error  # refused at create: no download was tried


def test_an_image_whose_container_exits_at_once_is_a_clear_session_error(client, demo_task, stack, needs, tmp_path):
    """The runtime's container idles on the image's ``sleep infinity``; an image where that ends
    at once left the session's error at the engine's words for the next command ("container
    state improper", or a 409 "is stopped"), saying nothing of the image or its exit."""
    needs("docker")
    image = "localhost/polar-test-exits-at-once:1"
    (tmp_path / "Containerfile").write_text(
        f"FROM {TEST_IMAGE}\nRUN printf '#!/bin/sh\\nexit 3\\n' > /usr/local/bin/sleep && chmod +x /usr/local/bin/sleep\n")
    subprocess.run(["podman", "build", "--network", "none", "-q", "-t", image, str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    try:
        demo_task["runtime"].update(backend="docker", image=image)
        demo_task["num_samples"] = 1
        status = client.wait(client.submit(demo_task), timeout=120, poll_seconds=0.3)
        [result] = status.results
        assert result.status == SessionStatus.ERROR
        assert "exited right after its start (exit 3)" in result.error and image in result.error, result.error
        wait_for(lambda: not containers_of(stack, demo_task["task_id"]) and not leftovers(stack, status), timeout=30)
    finally:
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True, timeout=120)


@pytest.mark.parametrize("network", ["host", "none"])
def test_an_image_whose_user_is_not_root_runs_the_example_task(network, client, demo_task, stack, needs, tmp_path):
    """Many images run as a user of their own (``USER agent``). Every command runs as that user,
    and the session folder, made by the worker, was root's: INIT failed at its first write
    ("init: cannot create /polar/session/agent in polar-sess-..."). The folder is handed to the
    image's user (and back at teardown); the relay to the proxy's socket runs as root."""
    needs("docker")
    image = "localhost/polar-test-user:1"
    (tmp_path / "Containerfile").write_text(f"FROM {TEST_IMAGE}\nRUN useradd -m -u 1000 agent\nUSER agent\n")
    subprocess.run(["podman", "build", "--network", "none", "-q", "-t", image, str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    try:
        demo_task["runtime"].update(backend="docker", image=image, allow_internet=network == "host",
                                    **({"network": "host"} if network == "host" else {}))
        demo_task["runtime"]["prepare"].append({"type": "exec", "command": "id -un > whoami.txt"})
        demo_task["evaluator"]["config"]["command"] += " && test \"$(cat whoami.txt)\" = agent"
        demo_task["num_samples"] = 1
        status = client.wait(client.submit(demo_task), timeout=240, poll_seconds=0.3)
        [result] = status.results
        assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, result.error
        wait_for(lambda: not containers_of(stack, demo_task["task_id"]) and not leftovers(stack, status), timeout=30)
        assert not list(stack.settings.runtime_root.glob(f"{result.session_id}.*"))  # no marker left beside it
    finally:
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True, timeout=120)


def test_an_agent_over_its_containers_memory_limit_is_said_to_be_killed_for_it(client, demo_task, stack, needs):
    """The kernel kills the agent (not the container) at ``memory_mb``: the session's error said
    only "agent exited 137: (no output)"; it now names the memory limit."""
    needs("docker")
    demo_task["runtime"].update(backend="docker", image=TEST_IMAGE, memory_mb=128)
    demo_task["agent"]["custom_shell"] = {"command": "python3 -c 'b = [bytearray(16 * 2**20) for _ in range(64)]'"}
    demo_task["num_samples"] = 1
    status = client.wait(client.submit(demo_task), timeout=120, poll_seconds=0.3)
    [result] = status.results
    assert result.status == SessionStatus.ERROR
    assert "agent exited 137" in result.error and "memory limit (memory_mb=128)" in result.error, result.error
    wait_for(lambda: not containers_of(stack, demo_task["task_id"]), timeout=30)


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_polar_runtimes_sweep_removes_what_a_lost_stack_left(backend, stack, needs):
    """A runtime whose session Redis does not know (its stack was lost) is removed by the CLI."""
    needs(backend)
    host = RuntimeHost.of(stack.settings, task_id="orphans")
    spec = {"backend": backend, **({"image": TEST_IMAGE} if backend == "docker" else {})}
    from pipeline.schemas import RuntimeSpec

    orphan = runtimes.create(RuntimeSpec(**spec), "sess-orphan-of-a-lost-stack", host)
    orphan.start()
    env = {**stack.settings.to_env(), "PATH": os.environ["PATH"]}
    done = subprocess.run([sys.executable, "-m", "infra.cli.main", "runtimes", "sweep", "--min-age", "0"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "removed sess-orphan-of-a-lost-stack" in done.stdout
    assert not (stack.settings.runtime_root / "sess-orphan-of-a-lost-stack").exists()
    if backend == "docker":
        assert "removed polar-sess-orphan-of-a-lost-stack" in done.stdout
        assert not containers_of(stack, "orphans")


@pytest.mark.parametrize("network", ["host", "none"])
def test_a_node_cli_from_the_hosts_tools_folder_runs_in_an_image_without_node(network, client, demo_task, stack,
                                                                            needs, tmp_path):
    """Harness CLIs are installed once on the host (``polar tools install``) and mounted read-only
    at /polar/tools: the test image has no node, the CLI still runs there and its model call
    lands in the session's records -- over the host network and with no network at all."""
    needs("docker")
    import shutil

    if not shutil.which("npm"):
        pytest.skip("npm is not installed")
    from infra.harness_tools import install

    subprocess.run(["npm", "pack", str(ROOT / "tests" / "fixtures" / "polar-hello-cli"), "--pack-destination",
                    str(tmp_path)], check=True, capture_output=True)
    install(stack.settings.tools_path, [str(next(tmp_path.glob("*.tgz")))])
    demo_task["runtime"] = {"backend": "docker", "image": TEST_IMAGE, "network": network}
    demo_task["agent"]["custom_shell"] = {
        "command": "test ! -e /usr/bin/node && polar-hello && command -v node > node-path.txt"}
    demo_task["evaluator"]["config"]["command"] = (
        "test \"$(cat hello.txt)\" = 'hello world' && test \"$(cat node-path.txt)\" = /polar/tools/bin/node")
    demo_task["num_samples"] = 1
    status = client.wait(client.submit(demo_task), timeout=240, poll_seconds=0.3)
    result = status.results[0]
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, result.error
    assert result.trajectory.metadata["completions"] == 1  # the CLI's one call, captured by the proxy
    assert result.trajectory.traces[0].response_ids
