"""Start, supervise and stop the whole stack as child processes: embedded Redis, the reference
model server, the proxy, the rollout API and one Celery worker per stage (plus Flower).

Used by ``polar up`` / ``polar demo`` and by the test suite, so tests exercise exactly what a
user runs. A child that dies (OOM kill, a Flower "shut down worker" click, a crash) is started
again with back-off while the rest keeps running; the embedded Redis keeps an append-only file
in ``$POLAR_HOME/redis`` and comes back from it. Every control surface gets a secret
(``infra/tokens.py``). Children die with the launcher (``PR_SET_PDEATHSIG``); ``stop`` also kills
any agent a local runtime left behind, so nothing keeps running after Ctrl-C (the children and
how they are stopped: ``infra/children.py``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx
import kombu.exceptions
import redis

from infra.children import Child, _signal_group, _stop_all, kill_runtime_processes
from infra.embedded_redis import EmbeddedRedis, _die_with_parent, free_ports
from infra.home_lock import claim_home, release
from infra.log_rotation import rotate_if_large
from infra.tokens import make_home, redis_password, with_tokens, without_password
from pipeline.settings import Settings
from pipeline.status import Stage

log = logging.getLogger("polar.stack")

# Pool per stage: RUN holds a slot for a whole agent session and mostly waits on a subprocess;
# INIT/EVALUATE wait on runtimes; CALLBACK waits on HTTP: threads. POSTRUN builds trajectories
# (CPU): processes.
STAGE_POOLS = {Stage.INIT: "threads", Stage.RUN: "threads", Stage.POSTRUN: "prefork",
               Stage.EVALUATE: "threads", Stage.CALLBACK: "threads"}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMOKE_POLICY = "polar-smoke"
STAGE_CONCURRENCY = {Stage.INIT: 4, Stage.RUN: 8, Stage.POSTRUN: 2, Stage.EVALUATE: 4, Stage.CALLBACK: 4}
RESTART_BACKOFF_MAX = 30.0
WORKER_STOP_SECONDS = 15.0  # the workers' soft shutdown (10 s, `polar worker`) and their cold one
ROTATE_EVERY_SECONDS = 30.0  # how often the supervisor looks at the services' log sizes
STABLE_AFTER_SECONDS = 60.0  # a child that ran this long restarts without back-off next time


@dataclass
class StackConfig:
    settings: Settings
    # "reference": the reference model server; "fake": the instant fake upstream (benchmarks);
    # "external": settings.upstream_url is served by someone else (vLLM, SGLang).
    upstream: str = "reference"
    dialect: str = "vllm"  # what the reference server speaks ("vllm" or "sglang")
    chat_template: Path | None = None  # the reference server renders with this template
    model_dir: Path | None = None
    policies: dict[str, str] = field(default_factory=dict)  # scripted-policy name -> file
    served_model_name: str = "tiny"
    flower_port: int | None = None
    concurrency: dict[Stage, int] = field(default_factory=dict)
    log_dir: Path | None = None
    hostname: str = "%h"
    fixed_ports: bool = False  # use the ports of the settings' URLs instead of free ones
    components: tuple[str, ...] = ("proxy", "api", "workers")  # besides Redis and the upstream
    proxy_workers: int | None = None
    supervise: bool = True  # restart children that die (a thread; `polar up` also calls supervise())
    persist_redis: bool = False  # the embedded Redis keeps an append-only file in $POLAR_HOME/redis


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.settings = config.settings
        self.redis: EmbeddedRedis | None = None
        self.children: dict[str, Child] = {}
        self.log_dir = config.log_dir or (self.settings.home / "logs")
        self.restarts: list[tuple[float, str]] = []  # (time, name): what the supervisor restarted
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._on_waiting: Callable[[list[str]], None] = lambda names: None
        self._home_lock: int | None = None
        self._next_rotation = 0.0

    # --- start -------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0, on_waiting: Callable[[list[str]], None] | None = None) -> "Stack":
        """``on_waiting``: called while starting with the children not ready yet (a progress display)."""
        if on_waiting is not None:
            self._on_waiting = on_waiting
        make_home(self.settings)
        self._home_lock = claim_home(self.settings.home)  # before anything of the home is touched
        self.log_dir.mkdir(parents=True, exist_ok=True)
        s = with_tokens(self.settings)
        if not s.upload_roots:  # what tasks may upload: the examples, and where the stack was started
            s = s.replace(upload_roots=f"{EXAMPLES},{Path.cwd()}")
        if not s.proxy_socket and "proxy" in self.config.components:
            s = s.replace(proxy_socket=proxy_socket_path(s.home))
        try:
            if not s.redis_url:
                data = self.settings.home / "redis" if self.config.persist_redis else None
                self.redis = EmbeddedRedis(data_dir=data, password=redis_password(s)).start()
                s = s.replace(redis_url=self.redis.url)
            else:
                _reachable(s.redis_url)  # (else every service waits for it, and the error names them)
                redis_password(s, s.redis_url)  # the client commands find it beside up.json's URL
            ports = dict(zip(("api", "proxy", "model"), free_ports(3)))
            if self.config.fixed_ports:
                ports = {"api": _port(s.api_url), "proxy": _port(s.proxy_url), "model": _port(s.upstream_url)}
                _refuse_taken({k: v for k, v in ports.items()
                               if k in self.config.components or (k == "model" and self.config.upstream != "external")})
            s = s.replace(api_url=f"http://127.0.0.1:{ports['api']}", proxy_url=f"http://127.0.0.1:{ports['proxy']}",
                          upstream_url=s.upstream_url if self.config.upstream == "external"
                          else f"http://127.0.0.1:{ports['model']}")
            if self.config.flower_port:  # callbacks may not point at it
                s = s.replace(flower_url=f"http://127.0.0.1:{self.config.flower_port}")
            self.settings = s
            for name, args in self._commands(ports).items():
                self._spawn(name, args)
            self._wait_ready(timeout)
            if "workers" in self.config.components:
                self._wait_workers(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        if self.config.supervise:
            self._supervisor = threading.Thread(target=self._supervise_loop, name="polar-supervisor", daemon=True)
            self._supervisor.start()
        return self

    def _commands(self, ports: dict[str, int]) -> dict[str, list[str]]:
        c, out = self.config, {}
        if c.upstream == "reference":
            args = ["model", "serve", "--port", str(ports["model"]), "--served-name", c.served_model_name,
                    "--dialect", c.dialect]
            if c.model_dir:
                args += ["--model-dir", str(c.model_dir)]
            if c.chat_template:
                args += ["--chat-template", str(c.chat_template)]
            # polar-smoke answers "DONE" once: `polar harnesses doctor` runs each CLI against it.
            for name, path in {SMOKE_POLICY: str(EXAMPLES / "smoke_policy.json"), **c.policies}.items():
                args += ["--policy", f"{name}={path}"]
            out["model"] = args
        elif c.upstream == "fake":
            out["model"] = ["model", "fake", "--port", str(ports["model"])]
        if "proxy" in c.components:
            out["proxy"] = ["proxy", "--port", str(ports["proxy"]),
                            *(["--workers", str(c.proxy_workers)] if c.proxy_workers else [])]
        if "api" in c.components:
            out["api"] = ["api", "--port", str(ports["api"])]
        for stage in Stage if "workers" in c.components else ():
            out[f"worker-{stage.value}"] = ["worker", "--stage", stage.value, "-c",
                                            str(c.concurrency.get(stage, STAGE_CONCURRENCY[stage])),
                                            "--hostname", c.hostname]
        if c.flower_port:
            out["flower"] = ["flower", "--port", str(c.flower_port)]
        return out

    def _spawn(self, name: str, args: list[str], restarts: int = 0) -> Child:
        log_path = self.log_dir / f"{name}.log"
        env = {**os.environ, **self.settings.to_env(), "PYTHONUNBUFFERED": "1"}
        if self.settings.secret("flower_basic_auth"):
            env["FLOWER_BASIC_AUTH"] = self.settings.secret("flower_basic_auth") or ""
        # (never appended through a link in the log's place: the stack may run as root)
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", *args], env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)
        child = Child(name, args, proc, log_path, restarts=restarts)
        with self._lock:
            self.children[name] = child
        return child

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        urls = {name: f"{url}/health" for name, url in (("api", self.settings.api_url),
                                                         ("proxy", self.settings.proxy_url))
                if name in self.config.components}
        if self.config.upstream != "external":
            urls["model"] = f"{self.settings.upstream_url}/health"
        if self.config.flower_port:
            urls["flower"] = f"http://127.0.0.1:{self.config.flower_port}/healthcheck"
        pending = dict(urls)
        workers = [f"worker-{s.value}" for s in Stage] if "workers" in self.config.components else []
        while pending:
            self._on_waiting(sorted(pending) + workers)
            self._check_alive()
            for name, url in list(pending.items()):
                try:
                    if httpx.get(url, timeout=1.0).status_code == 200:
                        pending.pop(name)
                except httpx.HTTPError:
                    pass
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"services not ready after {timeout:.0f}s: {sorted(pending)}")
            time.sleep(0.2)

    def _wait_workers(self, deadline: float) -> None:
        from pipeline.celery_app import make_app

        app = make_app(self.settings)
        want = {s.queue for s in Stage}
        while True:
            self._check_alive()
            try:
                replies = app.control.inspect(timeout=1.0).active_queues() or {}
            except (redis.ConnectionError, kombu.exceptions.OperationalError):
                # A connection of this process's pools from before the server restarted (a
                # stack started again in the same process): the next round reconnects.
                app, replies = make_app(self.settings), {}
            seen = {q["name"] for queues in replies.values() for q in queues}
            self._on_waiting([f"worker-{s.value}" for s in Stage if s.queue not in seen])
            if want <= seen:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not ready; queues consumed: {sorted(seen)}")

    def _check_alive(self) -> None:
        """While starting, a child that exits is a configuration error: report it."""
        for child in list(self.children.values()):
            if child.proc.poll() is not None:
                tail = child.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{tail}")

    # --- supervision -------------------------------------------------------------------------

    def supervise(self) -> list[str]:
        """Restart what died (Redis first), each with back-off; returns the names restarted now."""
        restarted: list[str] = []
        now = time.monotonic()
        with self._lock:
            if self._stopping.is_set():
                return restarted
            if now >= self._next_rotation:
                self._next_rotation = now + ROTATE_EVERY_SECONDS
                for child in self.children.values():
                    rotate_if_large(child.log_path, self.settings.log_max_mb * 2**20)
            if self.redis is not None and not self.redis.alive():
                log.warning("embedded Redis died; restarting it from its append-only file")
                self.redis.start()
                restarted.append("redis")
            for child in list(self.children.values()):
                if child.proc.poll() is None:
                    continue
                if child.restart_at is None:
                    ran = now - child.started
                    tries = 0 if ran > STABLE_AFTER_SECONDS else child.restarts
                    child.restarts = tries + 1
                    child.restart_at = now + min(RESTART_BACKOFF_MAX, 0.5 * 2 ** tries)
                    log.warning("%s exited with %s after %.0fs; restarting in %.1fs", child.name,
                                child.proc.returncode, ran, child.restart_at - now)
                if now >= child.restart_at:
                    self._spawn(child.name, child.args, restarts=child.restarts)
                    self.restarts.append((time.time(), child.name))
                    restarted.append(child.name)
        return restarted

    def _supervise_loop(self) -> None:
        while not self._stopping.wait(0.5):
            try:
                self.supervise()
            except Exception:  # the supervisor itself must not die
                log.exception("supervising the stack failed")

    def kill(self, name: str) -> int:
        """SIGKILL one child's whole process group (fault tests; the supervisor restarts it);
        returns its pid. ``redis`` kills the embedded Redis."""
        if name == "redis":
            assert self.redis is not None and self.redis.pid is not None
            pid = self.redis.pid
            self.redis.kill()
            return pid
        child = self.children[name]
        _signal_group(child.proc, signal.SIGKILL)
        child.proc.wait()
        return child.proc.pid

    def pid(self, name: str) -> int | None:
        if name == "redis":
            return self.redis.pid if self.redis is not None and self.redis.alive() else None
        child = self.children.get(name)
        return child.proc.pid if child is not None and child.proc.poll() is None else None

    # --- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        if self._home_lock is None:  # not started (or refused its home): nothing here is this stack's
            return
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=5)
        with self._lock:
            children = list(self.children.values())
            # The workers first, while the proxy, API and model still serve: during their soft
            # shutdown (SIGQUIT: running stages get --soft-shutdown-timeout, 10 s, then a cold
            # one; a warm one would wait for hour-long agent runs) an agent still calls the model,
            # and one stopped underneath it would be recorded as the agent's own failure.
            workers = [c for c in children if c.name.startswith("worker-")]
            _stop_all(workers, signal.SIGQUIT, WORKER_STOP_SECONDS)
            # gunicorn: quick shutdown (a graceful one waits for idle keep-alive clients).
            _stop_all([c for c in children if c not in workers], signal.SIGINT, 10)
            self.children.clear()
        kill_runtime_processes(self.settings.runtime_root)
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        release(self._home_lock)
        self._home_lock = None

    def state(self) -> dict[str, Any]:
        """What the CLI's client commands need to find the stack (no secrets: infra/tokens.py)."""
        redis_url = without_password(self.settings.redis_url) if self.settings.redis_url else None
        return {"pid": os.getpid(), "redis_url": redis_url, "api_url": self.settings.api_url,
                "proxy_url": self.settings.proxy_url, "upstream_url": self.settings.upstream_url,
                "flower_url": self.settings.flower_url,
                "logs": str(self.log_dir)}

    def __enter__(self) -> "Stack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _reachable(redis_url: str) -> None:
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=5, socket_timeout=5).ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise RuntimeError(f"cannot reach POLAR_REDIS_URL ({without_password(redis_url)}): {exc}") from None


def _refuse_taken(ports: dict[str, int]) -> None:
    """A port some server already listens on: the health checks would be answered by it (another
    stack's API says "ok" too) while this stack's own server fails to bind, restarting for ever."""
    import socket

    for name, port in ports.items():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (a closed connection's TIME_WAIT is no listener)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise RuntimeError(f"port {port} (the {name}'s, from POLAR_{'UPSTREAM' if name == 'model' else name.upper()}"
                                   "_URL) is taken: another stack or service listens there") from None


def proxy_socket_path(home: Path) -> Path:
    """Where the stack's proxy also listens (for runtimes without a network): a folder of its
    own in POLAR_HOME (runtimes mount the folder), or under /tmp when that path would be too
    long for a Unix socket (107 bytes)."""
    path = home / "proxy" / "proxy.sock"
    if len(str(path)) > 100:
        digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"polar-proxy-{digest}" / "proxy.sock"
    path.parent.mkdir(parents=True, exist_ok=True)
    st = path.parent.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        # (under /tmp another user could have made it first, and swap the socket for their own)
        raise RuntimeError(f"{path.parent} is not a folder of this user's: cannot put the proxy's socket there")
    path.parent.chmod(0o755)  # a container's non-root user must reach the socket; nothing else lives here
    return path


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


