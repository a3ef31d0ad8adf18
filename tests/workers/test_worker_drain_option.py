"""`polar worker --soft-shutdown-timeout` reaches the real worker process: what a deploy's drain
(compose stop_grace_period, Kubernetes terminationGracePeriodSeconds) is sized against. Read
back from a running worker through Celery's remote control, then the worker is stopped with
SIGTERM, as an orchestrator stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.celery_app import make_app
from pipeline.settings import Settings


def _worker_conf(settings: Settings, name: str, proc: subprocess.Popen, wait: float = 60.0) -> dict:
    app = make_app(settings)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
        replies = app.control.inspect(destination=[name], timeout=1.0).conf() or {}
        if name in replies:
            return replies[name]
    pytest.fail(f"worker {name} did not answer within {wait:.0f}s")


@pytest.mark.parametrize("argv, expected", [(["--soft-shutdown-timeout", "7.5"], 7.5), ([], 10.0)])
def test_soft_shutdown_timeout_reaches_the_worker(redis_url, tmp_path, argv, expected):
    settings = Settings(redis_url=redis_url, home=tmp_path)
    hostname = f"drain{os.getpid()}x{int(expected * 10)}"
    env = {**os.environ, **settings.to_env(), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "worker", "--stage", "callback", "-c", "1",
                             "--hostname", hostname, *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        conf = _worker_conf(settings, f"callback@{hostname}", proc)
        assert conf["worker_soft_shutdown_timeout"] == expected
        proc.send_signal(signal.SIGTERM)  # REMAP_SIGTERM=SIGQUIT: the bounded soft shutdown, then exit
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_negative_drain_is_refused():
    out = subprocess.run([sys.executable, "-m", "infra.cli.main", "worker", "--stage", "run",
                          "--soft-shutdown-timeout", "-1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--soft-shutdown-timeout" in out.stderr
