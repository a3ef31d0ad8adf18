"""What Celery itself costs per session: the orchestration benchmark's five stage queues and
workers, with this project's Celery configuration, but stage tasks that do nothing except push
the next stage's message (one LPUSH) -- no lease, no session, no runtime. The CPU per session here
is the floor any stage code sits on; ``bench/orchestration_bench.py`` is the real pipeline.

    .venv/bin/python bench/celery_floor.py [--sessions 1000] [--variant polar|throughput] [--quick] [--json]

``polar``: the project's settings (late acks, no prefetch, the threads pools and concurrency of
``infra/stack.py``, task events off). ``throughput``: what a Celery expert would set for short
tasks whose loss costs nothing (early acks, prefetch multiplier 16, no disable_prefetch, the
``solo`` pool): the cost of the delivery guarantees, measured. ``--json`` (what ``polar bench``
reads): both variants, one after the other, as figures without a goal (the floor the
orchestration goal sits on); ``--quick``: 300 sessions.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from bench.figures import emit, figure  # noqa: E402
from bench.orchestration_bench import cpu_seconds  # noqa: E402
from infra.embedded_redis import EmbeddedRedis, _die_with_parent  # noqa: E402
from infra.stack import STAGE_CONCURRENCY, STAGE_POOLS  # noqa: E402
from pipeline.messages import stage_message  # noqa: E402
from pipeline.status import Stage  # noqa: E402

DONE_KEY = "bench:floor:done"


def start_workers(redis_url: str, variant: str, log_dir: Path) -> dict[str, subprocess.Popen]:
    env = {**os.environ, "POLAR_REDIS_URL": redis_url, "POLAR_TASK_EVENTS": "false", "BENCH_FLOOR_VARIANT": variant,
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = {}
    for stage in Stage:
        pool = "solo" if variant == "throughput" else STAGE_POOLS[stage]
        conc = "1" if variant == "throughput" else str(STAGE_CONCURRENCY[stage])
        argv = [sys.executable, "-m", "celery", "-A", "bench.celery_floor_tasks", "worker", "-Q", stage.queue,
                "-n", f"floor-{stage.value}@%h", "-P", pool, "-c", conc, "--without-gossip", "--without-mingle",
                "--loglevel", os.environ.get("BENCH_FLOOR_LOGLEVEL", "WARNING")]
        with open(log_dir / f"{stage.value}.log", "wb") as out:
            procs[f"worker-{stage.value}"] = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                              start_new_session=True, preexec_fn=_die_with_parent)
    return procs


def push(r: redis.Redis, n: int, tag: str) -> None:
    init = Stage.INIT
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.lpush(init.queue, stage_message(init.task_name, f"{tag}-{i}", init.queue))
    pipe.execute()


def wait_done(r: redis.Redis, total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while int(r.get(DONE_KEY) or 0) < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{int(r.get(DONE_KEY) or 0)} of {total} done")
        time.sleep(0.02)


def measure(variant: str, sessions: int) -> dict:
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as logs:
        r = redis.Redis.from_url(server.url)
        procs = start_workers(server.url, variant, Path(logs))
        try:
            push(r, 50, "warm")
            wait_done(r, 50, 120)
            groups = {name: p.pid for name, p in procs.items()}
            cpu0, t0 = cpu_seconds(groups, server.pid or 0), time.monotonic()
            push(r, sessions, "run")
            wait_done(r, 50 + sessions, 600)
            wall = time.monotonic() - t0
            cpu1 = cpu_seconds(groups, server.pid or 0)
        finally:
            for p in procs.values():
                p.kill()
                p.wait()
    by_name = {k: 1000 * (cpu1[k] - cpu0[k]) / sessions for k in cpu1}
    return {"variant": variant, "sessions": sessions, "sessions_per_s": round(sessions / wall, 1),
            "cpu_ms_per_session": round(sum(by_name.values()), 2),
            "cpu_ms_per_session_by_process": {k: round(v, 2) for k, v in sorted(by_name.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--variant", choices=["polar", "throughput"], default="polar")
    parser.add_argument("--quick", action="store_true", help="300 sessions")
    parser.add_argument("--json", action="store_true", help="both variants, as polar bench's JSON line")
    args = parser.parse_args()
    sessions = 300 if args.quick else args.sessions
    if args.json:
        runs = [measure(variant, sessions) for variant in ("polar", "throughput")]
        on = f"{sessions} sessions of 5 empty stage tasks through the five stage queues, {os.cpu_count()} cores"
        emit("celery_floor", [
            figure("Celery's CPU per session, this project's delivery settings", runs[0]["cpu_ms_per_session"], "ms",
                   on + " (late acks, no prefetch, the stack's pools)"),
            figure("Celery's CPU per session, a throughput configuration", runs[1]["cpu_ms_per_session"], "ms",
                   on + " (early acks, prefetch 16, solo pools: no redelivery)"),
        ], runs=runs)
        return
    figures = measure(args.variant, sessions)
    print(f"Celery floor ({args.variant}): {sessions} sessions of 5 empty stage tasks: "
          f"{figures['sessions_per_s']} sessions/s, {figures['cpu_ms_per_session']} ms CPU per session")
    for name, ms in sorted(figures["cpu_ms_per_session_by_process"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<18}{ms:>8.2f} ms CPU/session")


if __name__ == "__main__":
    main()
