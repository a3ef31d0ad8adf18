"""The runtime contract, held by every backend that runs here: ``local``, ``bwrap`` (bubblewrap)
and ``docker`` (through podman's Docker-compatible API, on the test image built offline).

The same test body runs against each: isolated environment, exit codes and streams, logs on
the host, timeouts and cancels that kill a command and everything it started, folder
round-trips that keep links as links, paths that cannot climb out, teardown that leaves no
process and no directory behind, and -- for the backends that have networks -- a runtime with no
network that still reaches the proxy through its Unix socket.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipeline.errors import ExecError, PathRefused
from pipeline.schemas import RuntimeSpec
from tests.conftest import TEST_IMAGE
from tests.support import wait_for
from workers import runtimes
from workers.runtimes import RuntimeHost

# apptainer runs wherever its CLI is on PATH (never on the machines this project is built on).
BACKENDS = ["local", "bwrap", "docker", "apptainer"]
NETWORKED = ["bwrap", "docker", "apptainer"]  # backends that can take the network away
APPTAINER_IMAGE = os.environ.get("POLAR_TEST_APPTAINER_IMAGE", f"docker-daemon:{TEST_IMAGE}")


@pytest.fixture
def host(request, tmp_path):
    """The worker-side host for the backend under test (podman's socket for ``docker``)."""
    backend = request.node.callspec.params["backend"]
    docker_host = None
    if backend == "docker":
        docker_host = request.getfixturevalue("docker_host")
    elif backend == "bwrap":
        request.getfixturevalue("bwrap_available")
    elif backend == "apptainer" and shutil.which("apptainer") is None:
        pytest.skip("apptainer is not on PATH (its command lines are tested in test_apptainer.py)")
    return RuntimeHost(root=tmp_path / "sessions", docker_host=docker_host, task_id="contract")


def spec_for(backend: str, **fields) -> RuntimeSpec:
    image = {"docker": {"image": TEST_IMAGE}, "apptainer": {"image": APPTAINER_IMAGE}}.get(backend, {})
    return RuntimeSpec(backend=backend, **image, **fields)


@pytest.fixture
def make(host):
    made = []

    def _make(backend: str, session_id: str = "sess-contract", **fields):
        runtime = runtimes.create(spec_for(backend, **fields), session_id, host)
        made.append(runtime)
        runtime.start()
        return runtime

    yield _make
    for runtime in made:
        runtime.stop()


def processes_running(marker: str) -> list[int]:
    """Host pids (containers' processes are host processes too) whose command line is ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmdline == marker and state != "Z":
            found.append(int(proc.name))
    return found


def unique_sleep() -> str:
    return f"sleep {random.randint(100_000, 999_999)}"


def daemonize(command: str) -> str:
    """A shell line that starts ``command`` as a daemon in its own session (``setsid``) and
    returns only once it has left the command's process group -- as an agent's server would."""
    return (f"rm -f .daemon-up; setsid bash -c 'touch .daemon-up; exec {command}' < /dev/null > /dev/null 2>&1 & "
            "until [ -e .daemon-up ]; do sleep 0.01; done")


@pytest.mark.parametrize("backend", BACKENDS)
def test_environment_is_the_sessions_own(backend, make, monkeypatch):
    monkeypatch.setenv("WORKER_SECRET", "leak")
    rt = make(backend, env={"FROM_SPEC": "1"})
    res = rt.exec('echo "$HOME|$FROM_SPEC|$EXTRA|${WORKER_SECRET:-none}|$PWD|$POLAR_SESSION_DIR"', env={"EXTRA": "x"})
    home, spec, extra, secret, pwd, session = res.stdout.strip().split("|")
    assert res.ok, res.stderr
    assert (spec, extra, secret) == ("1", "x", "none")
    assert home == f"{session}/home" and pwd == f"{session}/workspace"


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_code_streams_and_logs_on_the_host(backend, make):
    rt = make(backend)
    res = rt.exec("echo out; echo err >&2; exit 3", log_name="step")
    assert (res.exit_code, res.stdout.strip(), res.stderr.strip()) == (3, "out", "err")
    assert Path(res.log_paths["stdout"]).read_text().strip() == "out"
    assert Path(res.log_paths["stderr"]).name == "step.stderr"


@pytest.mark.parametrize("backend", BACKENDS)
def test_cwd_is_a_runtime_path(backend, make):
    rt = make(backend)
    assert rt.exec("mkdir -p sub/dir").ok
    assert rt.exec("pwd", cwd="sub/dir").stdout.strip().endswith("/workspace/sub/dir")
    with pytest.raises(PathRefused):
        rt.exec("pwd", cwd="../../..")


@pytest.mark.parametrize("backend", BACKENDS)
def test_timeout_kills_the_command_and_its_children(backend, make):
    rt = make(backend)
    marker = unique_sleep()
    res = rt.exec(f"{marker} & {marker}", timeout=1.0)
    assert res.timed_out and res.exit_code is None and not res.ok
    wait_for(lambda: not processes_running(marker), timeout=10)
    assert rt.exec("echo still-usable").stdout.strip() == "still-usable"


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_from_another_process(backend, make):
    rt = make(backend)
    marker = unique_sleep()
    code = ("import time; from workers import runtimes; time.sleep(1.0); "
            f"runtimes.attach({rt.handle!r}).cancel()")
    canceller = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2])
    res = rt.exec(f"{marker} & {marker}", timeout=120)
    assert canceller.wait(timeout=60) == 0
    assert res.cancelled and not res.timed_out
    wait_for(lambda: not processes_running(marker), timeout=10)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "bwrap"])  # (bwrap's die with their command)
def test_what_a_command_left_running_is_ended_and_the_runtime_stays_usable(backend, make):
    """RUN ends what the agent left running before anything grades in its runtime."""
    rt = make(backend)
    marker = unique_sleep()
    rt.exec(daemonize(marker))
    wait_for(lambda: processes_running(marker), timeout=10)
    rt.end_processes()
    wait_for(lambda: not processes_running(marker), timeout=10)
    assert rt.exec("echo usable").stdout.strip() == "usable"


@pytest.mark.parametrize("backend", ["docker"])
def test_a_container_stopped_under_a_command_is_no_result(backend, make):
    """Killed from outside (an operator, its memory limit) while a grader ran: the command's
    signal exit is the container's end, not a failed test -- an error, never reward 0 (probe)."""
    rt = make(backend)
    threading.Timer(1.5, lambda: rt._docker.containers.get(rt.name).kill()).start()
    with pytest.raises(ExecError, match="stopped while the command ran"):
        rt.exec("sleep 30", timeout=60)


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_runs_in_a_session_cannot_mark_it_cancelled(backend, make):
    """A session's cancel is marked outside its folder: an agent that could mark it would end a
    grading it expects to fail as CANCELLED, which a trainer drops, instead of reward 0 (probe)."""
    rt = make(backend)
    rt.exec('touch "$POLAR_SESSION_DIR/.cancelled"')  # where the marker was
    if backend != "local":  # (plain local is no sandbox: it can write anything the worker can)
        rt.exec('touch "$POLAR_SESSION_DIR/../$(basename "$POLAR_SESSION_DIR").cancelled"')
    res = rt.exec("echo graded")
    assert not res.cancelled and res.stdout.strip() == "graded"
    rt.cancel()  # the worker's own cancel still holds
    assert rt.exec("echo late").cancelled
    marker = Path(rt.handle["root"]).with_name(Path(rt.handle["root"]).name + ".cancelled")
    assert marker.exists()
    rt.stop()
    assert not marker.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_folder_round_trip_keeps_links_as_links(backend, make, tmp_path):
    rt = make(backend)
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "README").write_text("hello\n")
    (src / "link").symlink_to("/etc/hostname")  # a link out: must arrive as a link, not the file
    rt.upload(str(src), "repo")
    listing = rt.exec("cat repo/pkg/mod.py repo/README; readlink repo/link").stdout
    assert listing == "x = 1\nhello\n/etc/hostname\n"
    assert rt.exec("echo changed > repo/README").ok
    out = tmp_path / "back"
    rt.download("repo", str(out))
    assert (out / "README").read_text() == "changed\n" and (out / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (out / "link").is_symlink() and os.readlink(out / "link") == "/etc/hostname"
    rt.upload(str(src / "README"), f"{runtimes.SESSION_MOUNT}/artifacts/one.txt")
    rt.download(f"{runtimes.SESSION_MOUNT}/artifacts/one.txt", str(tmp_path / "one.txt"))
    assert (tmp_path / "one.txt").read_text() == "hello\n"
    with pytest.raises(FileNotFoundError):
        rt.download("no-such-file", str(tmp_path / "nothing"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_creates_and_replaces_a_file_without_a_host_copy(backend, make, tmp_path):
    rt = make(backend)
    rt.write("conf/settings.json", b'{"a": 1}\n')
    rt.write(f"{runtimes.SESSION_MOUNT}/instruction.txt", "fix the bug: é\n".encode())
    assert rt.exec("cat conf/settings.json; cat \"$POLAR_SESSION_DIR/instruction.txt\"").stdout == \
        '{"a": 1}\nfix the bug: é\n'
    rt.write("conf/settings.json", b"{}")  # replaced, not appended
    assert rt.exec("cat conf/settings.json").stdout == "{}"
    # A link at the path, to a file outside the session (the host's, for backends on the host's
    # filesystem): refused or replaced -- never written through.
    on_host = backend in ("local", "bwrap")
    target = tmp_path / "outside.txt" if on_host else Path(f"/tmp/polar-link-target-{random.randrange(10**9)}")
    if on_host:
        target.write_text("orig\n")
    else:
        assert rt.exec(f"echo orig > {target}").ok
    assert rt.exec(f"ln -s {target} conf/link").ok
    try:
        rt.write("conf/link", b"mine")
        assert rt.exec("test ! -L conf/link && cat conf/link").stdout == "mine"
    except PathRefused:
        pass
    assert (target.read_text() if on_host else rt.exec(f"cat {target}").stdout) == "orig\n"
    with pytest.raises((PathRefused, ExecError)):
        rt.write("../../outside.txt", b"x")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", ["../outside", "a/../../outside", "bad\0name"])
def test_paths_cannot_climb_out(backend, path, make, tmp_path):
    rt = make(backend)
    (tmp_path / "f").write_text("x")
    with pytest.raises(PathRefused):
        rt.upload(str(tmp_path / "f"), path)
    with pytest.raises(PathRefused):
        rt.download(path, str(tmp_path / "g"))


@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_host_backends_refuse_paths_outside_the_session(backend, make, tmp_path):
    rt = make(backend)
    (tmp_path / "f").write_text("x")
    with pytest.raises(PathRefused):
        rt.upload(str(tmp_path / "f"), "/etc/polar-should-not-exist")
    assert rt.exec(f"ln -s {tmp_path} escape").ok  # a link the agent made, pointing out
    with pytest.raises(PathRefused):
        rt.upload(str(tmp_path / "f"), "escape/f")
    assert not (tmp_path / "f").with_name("g").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_leaves_no_process_and_no_directory(backend, make, host):
    rt = make(backend)
    marker = unique_sleep()
    res = rt.exec(daemonize(marker), timeout=30)
    assert res.exit_code == 0
    if backend == "bwrap":  # the sandbox's PID namespace ends with its command: the daemon too
        wait_for(lambda: not processes_running(marker), timeout=10)
    else:
        wait_for(lambda: processes_running(marker), timeout=10)  # it left its command's group
    rt.stop()
    rt.stop()  # twice is fine
    wait_for(lambda: not processes_running(marker), timeout=10)
    assert not (host.root / "sess-contract").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_sweeper_removes_what_sessions_that_are_over_left(backend, host):
    """A worker killed mid-session, a stack lost: runtimes of sessions that ended or that Redis
    no longer knows are removed with what they started; live ones (and their evaluation
    runtimes) are not touched."""
    from pipeline.status import SessionStatus
    from workers.runtimes import sweeper

    statuses = {"sess-live": SessionStatus.RUNNING, "sess-done": SessionStatus.COMPLETED}
    made = {}
    for name in ("sess-live", "sess-live.eval", "sess-done", "sess-gone", "sess-gone.eval"):
        made[name] = runtimes.create(spec_for(backend), name, host)
        made[name].start()
    for name in ("sess-done", "sess-gone.eval"):  # cancel markers a killed worker's stop never removed
        (host.root / f"{name}.cancelled").touch()
    marker = unique_sleep()
    made["sess-gone"].exec(daemonize(marker))
    if backend != "bwrap":  # in a sandbox the daemon ended with its command already
        wait_for(lambda: processes_running(marker), timeout=10)
    try:
        removed = sweeper.sweep(host, statuses.get, min_age=0)
        gone = {"sess-done", "sess-gone", "sess-gone.eval"}
        expected = sorted(gone) if backend != "docker" else sorted([f"polar-{n}" for n in gone] + list(gone))
        assert sorted(removed) == expected
        assert sorted(p.name for p in host.root.iterdir()) == ["sess-live", "sess-live.eval"]
        wait_for(lambda: not processes_running(marker), timeout=10)
        assert made["sess-live"].exec("echo alive").stdout.strip() == "alive"
        assert sweeper.sweep(host, statuses.get, min_age=0) == []  # nothing twice
    finally:
        for rt in made.values():
            rt.stop()


@pytest.mark.parametrize("backend", NETWORKED)
def test_without_a_network_only_the_proxy_is_reachable(backend, host, tmp_path):
    """``network: none``: no interface but loopback, yet the proxy (an HTTP server on a Unix
    socket here) answers at the URL the runtime is given -- also after it restarted with a new
    socket file."""
    sock_path = tmp_path / "proxy" / "proxy.sock"
    sock_path.parent.mkdir()
    server = unix_http_server(sock_path, "first")
    host = RuntimeHost(root=host.root, docker_host=host.docker_host, proxy_socket=sock_path)
    rt = runtimes.create(spec_for(backend, network="none"), "sess-isolated", host)
    rt.start()
    try:
        url = rt.reachable_url("http://127.0.0.1:8123/v1/models")
        fetch = f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}', timeout=10).read().decode())\""
        res = rt.exec(fetch, timeout=60)
        assert res.ok and res.stdout.strip() == "first proxy says hello from /v1/models", res.stderr
        interfaces = rt.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
        assert interfaces == ["lo"]
        outside = "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\""
        assert rt.exec(outside, timeout=30).exit_code not in (0, None)
        server.shutdown()
        server.server_close()
        sock_path.unlink()
        server = unix_http_server(sock_path, "restarted")
        res = rt.exec(fetch, timeout=60)
        assert res.ok and res.stdout.strip() == "restarted proxy says hello from /v1/models", res.stderr
    finally:
        rt.stop()
        server.shutdown()


@pytest.mark.parametrize("backend", NETWORKED)
def test_the_proxy_socket_folder_must_hold_only_the_socket(backend, host, tmp_path):
    sock_path = tmp_path / "proxy.sock"  # beside other files: mounting its folder would expose them
    server = unix_http_server(sock_path, "x")
    (tmp_path / "tokens.json").write_text("{}")
    host = RuntimeHost(root=host.root, docker_host=host.docker_host, proxy_socket=sock_path)
    try:
        with pytest.raises(runtimes.RuntimeStartError, match="only the socket"):
            runtimes.create(spec_for(backend, network="none"), "sess-iso2", host).start()
    finally:
        server.shutdown()


@pytest.mark.parametrize("backend", NETWORKED)
def test_no_internet_means_no_network(backend, host):
    with pytest.raises(Exception, match="network|internet"):
        rt = runtimes.create(spec_for(backend, allow_internet=False, network="host"), "sess-x", host)
        rt.start()
        rt.stop()


@pytest.mark.parametrize("backend", ["docker"])
def test_container_limits_and_labels(backend, make, host):
    from workers.runtimes import docker as docker_runtime

    rt = make(backend, cpus=0.5, memory_mb=256)
    attrs = docker_runtime.client(host.docker_host).containers.get(rt.handle["container"]).attrs
    assert attrs["HostConfig"]["NanoCpus"] == 500_000_000
    assert attrs["HostConfig"]["Memory"] == 256 * 1024 * 1024
    labels = attrs["Config"]["Labels"]
    assert labels["polar.project"] == "polar-rollout" and labels["polar.session"] == "sess-contract"
    assert labels["polar.task"] == "contract"


@pytest.mark.parametrize("backend", ["docker"])
def test_limits_the_host_cannot_give_are_a_clear_error_and_leave_nothing(backend, make, host):
    """``gpus`` on a host without a GPU, ``storage_mb`` where the storage driver cannot cap a
    container (overlay without xfs project quotas, as here): the engine is asked (or not) and
    the session gets an error saying why -- never a container running without the limit."""
    from workers.runtimes import docker as docker_runtime

    if Path("/dev/nvidiactl").exists():
        pytest.skip("this host has an NVIDIA GPU")
    with pytest.raises(runtimes.RuntimeStartError, match="no NVIDIA GPU"):
        make(backend, gpus=1)
    try:
        rt = make(backend, session_id="sess-storage", storage_mb=512)
    except runtimes.RuntimeStartError as exc:
        assert "storage" in str(exc)
        running = {sid for _, sid, _ in docker_runtime.session_containers(host.docker_host, host.root)}
        assert not running, running  # neither refusal left a container behind
    else:  # a driver that caps it: the cap is on the container
        attrs = docker_runtime.client(host.docker_host).containers.get(rt.handle["container"]).attrs
        assert attrs["HostConfig"]["StorageOpt"] == {"size": "512m"}


def unix_http_server(path: Path, name: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            body = f"{name} proxy says hello from {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class UnixServer(ThreadingHTTPServer):
        address_family = socket.AF_UNIX

        def server_bind(self):
            self.socket.bind(str(path))
            self.server_address = str(path)
            self.server_name, self.server_port = "proxy", 0

    server = UnixServer(str(path), Handler)
    os.chmod(path, 0o666)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_tools_come_first_on_path_and_cannot_be_changed(backend, host, tmp_path):
    """The harness tools folder (Node.js and the CLIs, installed on the host) is found first on
    every backend's PATH -- inside a task image that has neither -- and, wherever the backend
    isolates the filesystem, the agent cannot change it."""
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    script = tools / "bin" / "polar-tool-probe"
    script.write_text("#!/bin/sh\necho probe from the host tools\n")
    script.chmod(0o755)
    node = shutil.which("node")
    if node:
        shutil.copy2(node, tools / "bin" / "node")
    host = RuntimeHost(root=host.root, docker_host=host.docker_host, tools_dir=tools)
    rt = runtimes.create(spec_for(backend), "sess-tools", host)
    rt.start()
    try:
        probe = rt.exec("polar-tool-probe")
        assert probe.stdout.strip() == "probe from the host tools", probe
        assert rt.exec("command -v polar-tool-probe").stdout.strip().endswith("/bin/polar-tool-probe")
        if backend != "local":  # local is for trusted work: the host's folders are its own
            assert rt.exec("touch \"$(dirname \"$(command -v polar-tool-probe)\")/x\"").exit_code != 0
            assert not (tools / "bin" / "x").exists()
        if node:
            version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
            assert rt.exec("node --version").stdout.strip() == version
            assert rt.exec("command -v node").stdout.strip() == (
                str(tools / "bin" / "node") if backend in ("local", "bwrap") else "/polar/tools/bin/node")
    finally:
        rt.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_links_a_session_leaves_in_its_logs_are_never_written_or_read_through(backend, make, tmp_path):
    """The session folder is written by what runs in it (a sandbox, a container): a link it leaves
    where the worker writes a log, or in place of the logs folder, must not make the worker write
    to (or read back) a file of the host's. (A bwrap session wrote a .pth file into the worker's
    Python this way.)"""
    rt = make(backend)
    victim = tmp_path / "victim.txt"
    victim.write_text("the host's\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN-123\n")
    # a link planted where the next step's stdout goes
    assert rt.exec(f'ln -s {victim} "$POLAR_SESSION_DIR/logs/next.stdout"').ok
    res = rt.exec("echo written", log_name="next")
    assert res.ok and res.stdout == "written\n" and victim.read_text() == "the host's\n"
    # a command that swaps its own log for a link before it ends: its output, not the link's target
    res = rt.exec(f'echo mine; rm "$POLAR_SESSION_DIR/logs/swap.stdout"; '
                  f'ln -s {secret} "$POLAR_SESSION_DIR/logs/swap.stdout"', log_name="swap")
    assert res.stdout == "mine\n" and "TOKEN" not in res.stdout
    # the logs folder itself replaced by a link out: the next step fails, nothing lands outside
    outside = tmp_path / "outside"
    outside.mkdir()
    assert rt.exec(f'rm -rf "$POLAR_SESSION_DIR/logs" && ln -s {outside} "$POLAR_SESSION_DIR/logs"').ok
    with pytest.raises(ExecError, match="logs"):
        rt.exec("echo x", log_name="later")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_cancel_kills_only_the_sessions_own_process_groups(backend, make):
    """``.pids`` is in the session folder: a pid the session wrote there for a process that is not
    its own (another session's, the worker's) is not killed by the cancel."""
    rt = make(backend)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert rt.exec(f'touch "$POLAR_SESSION_DIR/.pids/{bystander.pid}"').ok
        rt.cancel()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("backend", ["local", "bwrap"])
def test_a_pipe_or_link_the_session_left_where_the_worker_writes_or_reads_never_blocks_or_leaks(backend, make,
                                                                                                tmp_path):
    """A named pipe in place of a file the worker writes (the instruction, a harness's config)
    hung an INIT thread for good, and an evaluator reading a test log the session had swapped for
    a link read a host file into the result. Both are refused or replaced, at once."""
    from workers.runtimes.base import read_in

    rt = make(backend)
    secret = tmp_path / "secret.txt"
    secret.write_text("PASSED tests/host.py::sk_live_TOPSECRET\n")
    assert rt.exec('mkfifo "$POLAR_SESSION_DIR/instruction.txt"; '
                   f'ln -s {secret} "$POLAR_SESSION_DIR/home/config.toml"').ok
    done = threading.Event()
    worker = threading.Thread(target=lambda: (rt.write("/polar/session/instruction.txt", b"the task"), done.set()),
                              daemon=True)
    worker.start()
    assert done.wait(10), "the write blocked on a named pipe"
    assert (rt.root / "instruction.txt").read_bytes() == b"the task" and (rt.root / "instruction.txt").is_file()
    with pytest.raises(PathRefused):  # a link out in the place of a file to write
        rt.write("/polar/session/home/config.toml", b"[x]")
    assert secret.read_text().startswith("PASSED")

    res = rt.exec(f'echo "PASSED tests/mine.py::ok"; rm "$POLAR_SESSION_DIR/logs/t.stdout"; '
                  f'ln -s {secret} "$POLAR_SESSION_DIR/logs/t.stdout"', log_name="t")
    with pytest.raises(OSError):
        read_in(Path(res.log_paths["stdout"]), 1 << 20)
    assert rt.exec('rm "$POLAR_SESSION_DIR/logs/t.stdout"; mkfifo "$POLAR_SESSION_DIR/logs/t.stdout"').ok
    with pytest.raises(OSError):  # at once, not waiting for a writer
        read_in(Path(res.log_paths["stdout"]), 1 << 20)
