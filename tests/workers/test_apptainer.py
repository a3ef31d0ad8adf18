"""The apptainer backend without an apptainer binary (none exists for these machines): the
command lines it would run, the overlay layout, and the errors a user meets. The real runs are
the contract tests (tests/workers/test_runtime_contract.py), which include apptainer wherever
it is on PATH."""

from __future__ import annotations

import shutil

import pytest

from pipeline.errors import PathRefused, RuntimeStartError
from pipeline.schemas import RuntimeSpec
from workers import runtimes
from workers.runtimes import RuntimeHost
from workers.runtimes.apptainer import ApptainerRuntime


def make(tmp_path, **fields) -> ApptainerRuntime:
    spec = RuntimeSpec(backend="apptainer", **{"image": "docker://python:3.12", **fields})
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    sock_dir = tmp_path / "proxy"
    sock_dir.mkdir(exist_ok=True)
    host = RuntimeHost(root=tmp_path / "sessions", tools_dir=tools, proxy_socket=sock_dir / "proxy.sock")
    rt = runtimes.create(spec, "sess-app", host)
    assert isinstance(rt, ApptainerRuntime)
    return rt


def test_instance_start_binds_the_session_overlay_and_tools(tmp_path):
    rt = make(tmp_path, cpus=2, memory_mb=4096)
    argv = rt.start_argv("/opt/apptainer")
    root = tmp_path / "sessions" / "sess-app"
    assert argv[:3] == ["/opt/apptainer", "instance", "start"]
    assert argv[argv.index("--overlay") + 1] == str(root / "overlay")  # writable layer in the session directory
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert binds == [f"{root}:/polar/session", f"{tmp_path / 'tools'}:/polar/tools:ro"]
    assert argv[argv.index("--cpus") + 1] == "2.0" and argv[argv.index("--memory") + 1] == "4096M"
    assert "--net" not in argv and "--nv" not in argv  # internet allowed, no GPUs asked for
    assert argv[-2:] == ["docker://python:3.12", rt.instance]


def test_the_tools_go_in_front_of_the_containers_own_path(tmp_path):
    env = make(tmp_path).base_env()
    assert env["APPTAINERENV_PREPEND_PATH"] == "/polar/tools/bin"  # apptainer keeps the host's PATH out
    assert env["HOME"] == "/polar/session/home" and env["POLAR_SESSION_DIR"] == "/polar/session"
    # No tools installed on this host: nothing bound, nothing prepended.
    host = RuntimeHost(root=tmp_path / "sessions", tools_dir=tmp_path / "not-installed")
    bare = runtimes.create(RuntimeSpec(backend="apptainer", image="docker://python:3.12"), "sess-bare", host)
    assert "APPTAINERENV_PREPEND_PATH" not in bare.base_env()
    assert not [a for a in bare.start_argv() if a.endswith(":/polar/tools:ro")]


def test_no_internet_means_no_network_but_the_proxy_socket_folder(tmp_path):
    rt = make(tmp_path, allow_internet=False)
    argv = rt.start_argv()
    assert argv[argv.index("--net"):argv.index("--net") + 3] == ["--net", "--network", "none"]
    assert f"{tmp_path / 'proxy'}:/polar/proxy:ro" in argv
    assert rt.reachable_url("http://127.0.0.1:8001/v1") == "http://127.0.0.1:18091/v1"


def test_gpus_add_nv(tmp_path):
    assert "--nv" in make(tmp_path, gpus=1).start_argv()


@pytest.mark.parametrize("image", ["docker://ghcr.io/x/y:1", "docker-daemon:localhost/polar-test:bookworm",
                                   "/images/sweb.eval.x86_64.django__django-11099.sif", "oras://r/x:1"])
def test_image_forms_pass_through(tmp_path, image):
    assert make(tmp_path, image=image).start_argv()[-2] == image


@pytest.mark.parametrize("image", ["python:3.12", "relative.sif", "/images/../etc/passwd.sif", "/etc/passwd"])
def test_other_image_forms_are_refused(tmp_path, image):
    with pytest.raises(RuntimeStartError, match="apptainer image"):
        make(tmp_path, image=image)


def test_commands_exec_in_the_instance_at_the_container_workdir(tmp_path):
    rt = make(tmp_path, workdir="/testbed")
    assert rt.argv("pytest -x", rt.workdir)[1:4] == ["exec", f"instance://{rt.instance}", "bash"]
    assert rt.instance.startswith("polar-sess-app-")
    assert rt.base_env()["HOME"] == "/polar/session/home"


def test_files_move_only_through_the_session_directory(tmp_path):
    rt = make(tmp_path)
    root = tmp_path / "sessions" / "sess-app"
    assert rt.path("/polar/session/artifacts/patch.diff") == root / "artifacts" / "patch.diff"
    assert rt.path("notes.txt") == root / "workspace" / "notes.txt"  # the default workdir is in the session
    for bad in ("/testbed/x", "../../etc/passwd"):
        with pytest.raises(PathRefused):
            rt.path(bad)


@pytest.mark.skipif(shutil.which("apptainer") is not None, reason="apptainer is installed here")
def test_a_missing_binary_is_a_clear_error_and_nothing_is_left(tmp_path, monkeypatch):
    rt = make(tmp_path)
    with pytest.raises(RuntimeStartError, match="needs the apptainer CLI"):
        rt.start()
    rt.stop()
    assert not (tmp_path / "sessions" / "sess-app").exists()
