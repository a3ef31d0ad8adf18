"""Flower lists every stage queue, also one whose workers are all down (infra/flower.py), with
its backlog, through its own HTTP API -- behind basic auth."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from infra.embedded_redis import EmbeddedRedis, free_port
from pipeline.messages import stage_message
from pipeline.status import Stage
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_a_stage_queue_without_a_worker_is_still_listed_with_its_backlog(tmp_path):
    port, auth = free_port(), "polar:s3cret-flower"
    with EmbeddedRedis() as server:
        env = {**os.environ, "POLAR_REDIS_URL": server.url, "POLAR_HOME": str(tmp_path), "FLOWER_BASIC_AUTH": auth,
               "POLAR_FLOWER_BASIC_AUTH": auth}
        cli = [sys.executable, "-m", "infra.cli.main"]
        procs = [subprocess.Popen([*cli, "worker", "--stage", "run", "-c", "1"], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                 subprocess.Popen([*cli, "flower", "--port", str(port)], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        started = time.monotonic()
        try:
            import redis

            r = redis.Redis.from_url(server.url)
            for i in range(3):  # INIT's backlog: no INIT worker is up
                r.lpush(Stage.INIT.queue, stage_message(Stage.INIT.task_name, f"sess-{i}", Stage.INIT.queue))
            base = f"http://127.0.0.1:{port}"
            http = httpx.Client(auth=tuple(auth.split(":", 1)), timeout=10)

            def run_worker_known():
                try:
                    workers = http.get(f"{base}/api/workers", params={"refresh": "1"}).json()
                except httpx.HTTPError:
                    return False
                return any(name.startswith("run@") for name in workers)

            wait_for(run_worker_known, timeout=60, interval=0.5)
            assert httpx.get(f"{base}/api/queues/length", timeout=10).status_code == 401
            assert httpx.get(f"{base}/metrics", timeout=10).status_code == 401  # Flower's own serves anyone
            assert httpx.get(f"{base}/metrics", timeout=10, auth=("polar", "wrong")).status_code == 401
            assert httpx.get(f"{base}/api/queues/length", timeout=10, auth=("polar", "s3cret-flöwer")).status_code == 401
            metrics = http.get(f"{base}/metrics")
            assert metrics.status_code == 200 and "flower_worker_online" in metrics.text, metrics.text[:300]
            lengths = {q["name"]: q["messages"] for q in http.get(f"{base}/api/queues/length").json()["active_queues"]}
            assert set(lengths) == {s.queue for s in Stage}  # not just "run", the one a worker consumes
            assert lengths[Stage.INIT.queue] == 3 and lengths[Stage.RUN.queue] == 0

            # Flower turns task events on in every worker it sees; gone, it turns them off again
            # (they cost CPU on every task, and nothing else would).
            time.sleep(max(0.0, started + 7 - time.monotonic()))  # (Flower's first enable_events: after 5 s)
            procs[1].terminate()
            procs[1].wait(timeout=30)
            from pipeline.celery_app import make_app
            from pipeline.settings import Settings

            control = make_app(Settings(home=tmp_path, redis_url=server.url)).control
            replies = control.enable_events(reply=True, timeout=5)
            assert replies and all("task events enabled" in str(r) for r in replies), replies
            control.disable_events()
        finally:
            for p in procs:
                p.kill()
                p.wait()


def test_flower_without_a_configured_login_makes_one_and_never_runs_open(tmp_path):
    """`polar flower` without POLAR_FLOWER_BASIC_AUTH ran Flower's unauthenticated API on
    loopback, which sends Access-Control-Allow-Origin: * -- any web page the user visited could
    list the tasks and shut the workers down. Found by a probe. It now stores a login in the
    home's tokens.json (the one `polar up` made, if any) and asks for it."""
    import json

    port = free_port()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with EmbeddedRedis() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POLAR_", "FLOWER_"))}
        env.update(POLAR_REDIS_URL=server.url, POLAR_HOME=str(home))
        proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "flower", "--port", str(port)], env=env,
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            base = f"http://127.0.0.1:{port}"

            def answers():
                try:
                    return httpx.get(f"{base}/api/workers", timeout=5, headers={"Origin": "http://evil.example"})
                except httpx.HTTPError:
                    return None

            open_call = wait_for(answers, timeout=60, interval=0.5)
            assert open_call.status_code == 401 and open_call.headers.get("Access-Control-Allow-Origin") != "*"
            login = json.loads((home / "tokens.json").read_text())["flower_basic_auth"]
            assert (home / "tokens.json").stat().st_mode & 0o077 == 0
            user, password = login.split(":", 1)
            assert httpx.get(f"{base}/api/workers", timeout=10, auth=(user, password)).status_code == 200
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert login not in err and password not in err and "tokens.json" in err
