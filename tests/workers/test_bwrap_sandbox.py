"""What the bwrap sandbox hides from, and denies to, the command it runs (the worker often runs
as root): the services' folder and the shared /tmp, the worker's user's files, the host's sockets,
the kernel's controls under /proc, and the launcher itself, which a task's environment cannot pick.
What every backend holds is in test_runtime_contract.py."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import tempfile

from pipeline.schemas import RuntimeSpec
from workers import runtimes
from workers.runtimes import RuntimeHost


def test_the_bwrap_sandbox_does_not_see_the_services_folder(bwrap_available, tmp_path):
    """bwrap shows the host read-only, but never POLAR_HOME: its secrets (tokens.json), Redis's
    append-only file with every live session's key, the other sessions. The session's folder and
    the harness tools kept there are bound back in."""
    home = tmp_path / "home"
    (home / "redis").mkdir(parents=True)
    (home / "tokens.json").write_text('{"api_token": "SECRET"}')
    (home / "redis" / "appendonly.aof").write_text("sk-polar-other-session")
    (home / "tools" / "bin").mkdir(parents=True)
    (home / "tools" / "bin" / "polar-hello").write_text("#!/bin/sh\necho hello from tools\n")
    (home / "tools" / "bin" / "polar-hello").chmod(0o755)
    elsewhere = tmp_path / "disk2" / "runtimes"  # the sessions' folder a link to another disk
    (elsewhere / "sess-other").mkdir(parents=True)
    (elsewhere / "sess-other" / "key.txt").write_text("sk-polar-other-session-key")
    (home / "runtimes").symlink_to(elsewhere)
    host = RuntimeHost(root=home / "runtimes", tools_dir=home / "tools", private=(home, home / "runtimes"))
    rt = runtimes.create(RuntimeSpec(backend="bwrap"), "sess-mine", host)
    rt.start()
    try:
        # also as root (CI): no capability to unmount what hides them, or to remount the host writable
        res = rt.exec(f'umount -l {home} {elsewhere} 2>/dev/null; mount -o remount,bind,rw / 2>/dev/null; '
                      f'cat {home}/tokens.json {home}/redis/appendonly.aof {elsewhere}/sess-other/key.txt; '
                      f'ls {elsewhere}; touch {tmp_path}/escaped; polar-hello; '
                      'echo kept > "$POLAR_SESSION_DIR/workspace/out.txt"')
        assert "SECRET" not in res.stdout and "sk-polar-other" not in res.stdout and "sess-other" not in res.stdout
        assert not (tmp_path / "escaped").exists()
        # the shared /tmp neither (another stack's home, a grading folder of the worker's)
        with tempfile.NamedTemporaryFile("w", dir="/tmp", suffix="-tokens.json") as other:
            other.write("sk-polar-in-tmp")
            other.flush()
            seen = rt.exec(f"cat {other.name}; ls /tmp")
            assert "sk-polar-in-tmp" not in seen.stdout and os.path.basename(other.name) not in seen.stdout
        assert "hello from tools" in res.stdout
        assert (elsewhere / "sess-mine" / "workspace" / "out.txt").read_text() == "kept\n"
    finally:
        rt.stop()


def test_a_tasks_environment_never_picks_or_loads_what_runs_bwrap_on_the_host(bwrap_available, tmp_path):
    """The task's environment was the host launcher's: a PATH with a relative folder ran the
    `bwrap` the agent wrote in its workspace -- on the host, outside the sandbox (the probe read
    tokens.json with it) -- and LD_PRELOAD would have loaded the agent's library there. The
    command still gets its environment, inside."""
    escaped = tmp_path / "escaped"
    env = {"PATH": f".bin:{os.environ['PATH']}", "LD_PRELOAD": "./evil.so", "MINE": "set"}
    rt = runtimes.create(RuntimeSpec(backend="bwrap", env=env), "sess-env", RuntimeHost(root=tmp_path / "runtimes"))
    rt.start()
    try:
        fake = f'#!/bin/sh\ntouch {escaped}\nexec /usr/bin/bwrap "$@"\n'
        assert rt.exec(f"mkdir -p .bin && printf '%s' '{fake}' > .bin/bwrap && chmod +x .bin/bwrap").ok
        res = rt.exec('echo "$MINE $LD_PRELOAD $PATH"')
        assert not escaped.exists(), "the task's PATH picked the host's bwrap"
        assert res.stdout.startswith("set ./evil.so .bin:"), res.stdout + res.stderr  # (inside: the task's own)
    finally:
        rt.stop()


def test_the_bwrap_sandbox_cannot_connect_to_the_hosts_sockets(bwrap_available, tmp_path):
    """A read-only bind does not stop connect(): a container engine's API socket seen in the
    sandbox handed it the host (a probe had podman's answer from a network-less, capability-less
    sandbox). The configured engine's socket and /run (the system bus, rootless engines) are not
    reachable; the session still resolves names through the resolver's folder."""
    sock_path = tmp_path / "engine" / "docker.sock"
    sock_path.parent.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen(1)
    try:
        host = RuntimeHost(root=tmp_path / "sessions", docker_host=f"unix://{sock_path}")
        rt = runtimes.create(RuntimeSpec(backend="bwrap"), "sess-sock", host)
        rt.start()
        try:
            probe = (f"import socket; s = socket.socket(socket.AF_UNIX)\n"
                     f"try:\n    s.connect({str(sock_path)!r}); print('CONNECTED')\n"
                     f"except OSError as e:\n    print('refused', e.errno)\n"
                     f"import os; print(sorted(os.listdir('/run')))")
            res = rt.exec(f"python3 -c {shlex.quote(probe)}")
            assert res.ok, res.stderr
            assert "CONNECTED" not in res.stdout and "refused" in res.stdout
            assert "dbus" not in res.stdout and "podman" not in res.stdout
        finally:
            rt.stop()
    finally:
        server.close()


def test_the_bwrap_sandbox_does_not_see_what_the_workers_user_owns(bwrap_available, tmp_path, monkeypatch):
    """The sandbox runs as the worker's user (root on many hosts; without capabilities, still the
    owner of root's files): the user's home (keys, credentials), the settings' .env and the
    password hashes are hidden, while this Python (bound back from wherever it lives) still runs."""
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE-KEY")
    monkeypatch.setenv("HOME", str(home))
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    (workdir / ".env").write_text("POLAR_CALLBACK_SECRET=hunter2\n")
    monkeypatch.chdir(workdir)
    rt = runtimes.create(RuntimeSpec(backend="bwrap"), "sess-user", RuntimeHost(root=tmp_path / "sessions"))
    rt.start()
    try:
        res = rt.exec(f"cat {home}/.ssh/id_rsa {workdir}/.env /etc/shadow /root/.bash_history 2>/dev/null; "
                      f"{sys.executable} -c 'print(6 * 7)'")
        assert "PRIVATE-KEY" not in res.stdout and "hunter2" not in res.stdout and "root:" not in res.stdout
        assert "42" in res.stdout, res.stderr
    finally:
        rt.stop()


def test_the_bwrap_sandbox_cannot_change_the_kernels_settings(bwrap_available, tmp_path):
    """As root without capabilities the sandbox could still write /proc/sys (bwrap covers it only
    when it finds it writable): a probe rewrote core_pattern, which runs a program as root on the
    host at the next crash. The kernel's controls are read-only and its memory and keys hidden;
    reading a setting still works."""
    rt = runtimes.create(RuntimeSpec(backend="bwrap"), "sess-proc", RuntimeHost(root=tmp_path / "sessions"))
    rt.start()
    try:
        before = open("/proc/sys/kernel/core_pattern").read()
        res = rt.exec('v=$(cat /proc/sys/kernel/core_pattern); printf "%s\\n" "$v" > /proc/sys/kernel/core_pattern '
                      '&& echo REWROTE; echo 1 > /proc/sys/vm/drop_caches && echo DROPPED; '
                      'cat /proc/sys/kernel/ostype; cat /proc/keys /proc/timer_list 2>/dev/null | wc -c; '
                      'test -d /proc/1 && echo has-proc')
        assert "REWROTE" not in res.stdout and "DROPPED" not in res.stdout, res.stdout
        assert "Linux" in res.stdout and "has-proc" in res.stdout
        assert res.stdout.splitlines()[1].strip() == "0"  # nothing read from the keys and timers
        assert open("/proc/sys/kernel/core_pattern").read() == before
    finally:
        rt.stop()


def test_the_bwrap_sandbox_does_not_see_the_hosts_container_engine_or_data_services(bwrap_available, tmp_path):
    """A container engine's storage holds every container's files and the environment of each
    command it ran in one: a probe's bwrap session read a docker session's live proxy key there.
    That storage (the configured one too), data services' folders and the host's logs are hidden."""
    import uuid

    from workers.runtimes import bwrap

    marker = f"/var/lib/containers/polar-test-{uuid.uuid4().hex[:8]}"  # (the engine's own folders are left alone)
    os.makedirs(marker)
    try:
        with open(f"{marker}/exec-process", "w") as f:
            f.write("OPENAI_BASE_URL=http://host/s/sk-polar-other-session/v1")
        rt = runtimes.create(RuntimeSpec(backend="bwrap"), "sess-state", RuntimeHost(root=tmp_path / "sessions"))
        rt.start()
        try:
            res = rt.exec(f"cat {marker}/exec-process; ls /var/lib/containers /var/log | wc -l; "
                          f"{sys.executable} -c 'print(6 * 7)'")
            assert "sk-polar-other" not in res.stdout and "42" in res.stdout, res.stdout + res.stderr
            assert res.stdout.splitlines()[0].strip() in ("0", "3")  # (ls's two headers and a blank line at most)
        finally:
            rt.stop()
        assert "/var/lib/containers" in bwrap._host_state()
    finally:
        os.remove(f"{marker}/exec-process")
        os.rmdir(marker)
