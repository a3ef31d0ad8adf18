"""Start and stop the whole stack as child processes: embedded Redis, the reference model
server, the proxy, the rollout API and one Celery worker per stage (plus Flower on request).

Used by ``polar up`` / ``polar demo`` and by the test suite, so tests exercise exactly what a
user runs. Children die with the launcher (``PR_SET_PDEATHSIG``); ``stop`` also kills any agent
process group a local runtime left behind, so nothing keeps running after Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from infra.embedded_redis import EmbeddedRedis, _die_with_parent, free_port
from pipeline.settings import Settings
from pipeline.status import Stage

# Pool per stage: RUN holds a slot for a whole agent session and mostly waits on a subprocess;
# INIT/EVALUATE wait on runtimes; CALLBACK waits on HTTP: threads. POSTRUN builds trajectories
# (CPU): processes.
STAGE_POOLS = {Stage.INIT: "threads", Stage.RUN: "threads", Stage.POSTRUN: "prefork",
               Stage.EVALUATE: "threads", Stage.CALLBACK: "threads"}
STAGE_CONCURRENCY = {Stage.INIT: 4, Stage.RUN: 8, Stage.POSTRUN: 2, Stage.EVALUATE: 4, Stage.CALLBACK: 4}


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


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: Path
    args: list[str] = field(default_factory=list)


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.settings = config.settings
        self.redis: EmbeddedRedis | None = None
        self.children: list[Child] = []
        self._args: dict[str, list[str]] = {}
        self.log_dir = config.log_dir or (self.settings.home / "logs")

    # --- start -------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> "Stack":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        s = self.settings
        try:
            if not s.redis_url:
                self.redis = EmbeddedRedis().start()
                s = s.replace(redis_url=self.redis.url)
            ports = {k: free_port() for k in ("api", "proxy", "model")}
            if self.config.fixed_ports:
                ports = {"api": _port(s.api_url), "proxy": _port(s.proxy_url), "model": _port(s.upstream_url)}
            s = s.replace(api_url=f"http://127.0.0.1:{ports['api']}",
                        proxy_url=f"http://127.0.0.1:{ports['proxy']}",
                        upstream_url=s.upstream_url if self.config.upstream == "external"
                        else f"http://127.0.0.1:{ports['model']}")
            self.settings = s
            if self.config.upstream == "reference":
                args = ["model", "serve", "--port", str(ports["model"]), "--served-name", self.config.served_model_name,
                        "--dialect", self.config.dialect]
                if self.config.model_dir:
                    args += ["--model-dir", str(self.config.model_dir)]
                if self.config.chat_template:
                    args += ["--chat-template", str(self.config.chat_template)]
                for name, path in self.config.policies.items():
                    args += ["--policy", f"{name}={path}"]
                self._spawn("model", args)
            elif self.config.upstream == "fake":
                self._spawn("model", ["model", "fake", "--port", str(ports["model"])])
            if "proxy" in self.config.components:
                workers = ["--workers", str(self.config.proxy_workers)] if self.config.proxy_workers else []
                self._spawn("proxy", ["proxy", "--port", str(ports["proxy"]), *workers])
            if "api" in self.config.components:
                self._spawn("api", ["api", "--port", str(ports["api"])])
            for stage in Stage if "workers" in self.config.components else ():
                c = self.config.concurrency.get(stage, STAGE_CONCURRENCY[stage])
                self._spawn(f"worker-{stage.value}", ["worker", "--stage", stage.value, "-c", str(c),
                                                      "--hostname", self.config.hostname])
            if self.config.flower_port:
                self._spawn("flower", ["flower", "--port", str(self.config.flower_port)])
            self._wait_ready(timeout)
            if "workers" in self.config.components:
                self._wait_workers(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, name: str) -> int:
        """SIGKILL one child's whole process group (fault tests); returns its pid."""
        child = next(c for c in self.children if c.name == name)
        _signal_group(child.proc, signal.SIGKILL)
        child.proc.wait()
        self.children.remove(child)
        self._args.setdefault(name, child.args)
        return child.proc.pid

    def respawn(self, name: str) -> None:
        self._spawn(name, self._args[name])

    def _spawn(self, name: str, args: list[str]) -> None:
        log_path = self.log_dir / f"{name}.log"
        env = {**os.environ, **self.settings.to_env(), "PYTHONUNBUFFERED": "1",
               "FLOWER_UNAUTHENTICATED_API": "true"}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", *args], env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)
        self.children.append(Child(name, proc, log_path, args))

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
        while pending:
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
            replies = app.control.inspect(timeout=1.0).active_queues() or {}
            seen = {q["name"] for queues in replies.values() for q in queues}
            if want <= seen:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not ready; queues consumed: {sorted(seen)}")

    def _check_alive(self) -> None:
        for child in self.children:
            if child.proc.poll() is not None:
                tail = child.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{tail}")

    # --- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        # Workers first, cold (SIGQUIT): a warm shutdown would wait for hour-long agent runs.
        for child in reversed(self.children):
            if child.proc.poll() is None:
                # Celery workers: cold shutdown (a warm one waits for hour-long agent runs);
                # gunicorn: quick shutdown (a graceful one waits for idle keep-alive clients).
                sig = signal.SIGQUIT if child.name.startswith("worker-") else signal.SIGINT
                _signal_group(child.proc, sig)
        deadline = time.monotonic() + 10
        for child in self.children:
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait()
        self.children.clear()
        kill_runtime_processes(self.settings.runtime_root)
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def state(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "redis_url": self.settings.redis_url, "api_url": self.settings.api_url,
                "proxy_url": self.settings.proxy_url, "upstream_url": self.settings.upstream_url,
                "flower_url": f"http://127.0.0.1:{self.config.flower_port}" if self.config.flower_port else None,
                "logs": str(self.log_dir)}

    def __enter__(self) -> "Stack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_runtime_processes(runtime_root: Path) -> int:
    """Kill every process group a local runtime recorded (agents outliving a killed worker)."""
    killed = 0
    for pidfile in runtime_root.glob("*/.pids/*"):
        try:
            os.killpg(int(pidfile.name), signal.SIGKILL)
            killed += 1
        except (ValueError, ProcessLookupError, PermissionError):
            pass
        pidfile.unlink(missing_ok=True)
    return killed
