"""Orchestration throughput: how many sessions per second the five stage queues move, and the CPU
each costs across every process (API, the five workers and their pool children, Redis), when
the agent itself costs nothing.

    .venv/bin/python bench/orchestration_bench.py [--sessions 500] [--tasks 50] [--events] [--profile]
                                                 [--quick] [--json]

Input: ``--sessions`` sessions in ``--tasks`` tasks submitted at once through the API, each
session's agent a ``custom_shell`` ``true`` in the local runtime, the ``per_request`` builder
and the ``session_completed`` evaluator -- every stage runs for real (INIT makes the session's
folder, RUN starts the process, CALLBACK publishes to the stream), only the agent does no
work. (It makes no model call, so each session ends ERROR "no completions captured": the same
path as any other session.) Stage concurrency is the stack's default (init 4, run 8, postrun 2,
evaluate 4, callback 4 on 2 cores), READY capacity 16.

Prints sessions/s (first submit to last terminal), CPU ms per session summed over every process
and per process, and Redis commands per session (INFO commandstats). ``--events`` turns Celery
task events on in every worker (what ``polar up`` does when Flower is started) to measure what
they cost; ``--profile`` samples every worker with py-spy (``pip install py-spy``) and prints the
top functions by own time. ``--quick``: 200 sessions in 20 tasks. ``--json``: the figures with
their goals (>= 50 sessions/s, <= 20 ms CPU per session) as one JSON line (bench/figures.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from bench.figures import emit, figure  # noqa: E402
from infra.stack import Stack, StackConfig  # noqa: E402
from pipeline.client import RolloutClient  # noqa: E402
from pipeline.keys import RESULTS_STREAM  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from workers.runtimes.local import SUBDIRS  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
SESSION_FOLDERS = 1 + len(SUBDIRS)  # the local runtime's: the session's own and its sub-folders
IDLE_WINDOW_SECONDS = 5.0


def bench_home(base: Path | None = None) -> Path:
    """A fresh POLAR_HOME beside where a real one lives (~/.cache), or under ``base`` (--home-base,
    e.g. a tmpfs). Creating a file or folder costs 100-350 us of CPU on some virtual disks and a
    session's runtime makes a few dozen (its folders, logs, the results file): the run prints
    what its folders cost on the disk it ran on (``folder_cost_us``)."""
    base = base or Path.home() / ".cache" / "polar-bench"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="home-", dir=base))


def task(i: int, samples: int, tag: str, command: str = "true", prefix: str = "orch") -> dict[str, Any]:
    """A task of ``samples`` sessions whose agent runs ``command`` in the local runtime."""
    return {"task_id": f"{prefix}-{tag}-{i}", "instruction": prefix, "num_samples": samples, "timeout_seconds": 600,
            "runtime": {"backend": "local"}, "agent": {"custom_shell": {"command": command}, "model_name": "agent"},
            "builder": {"strategy": "per_request"}, "evaluator": {"strategy": "session_completed"}}


def _stat(pid: int | str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # [0] is field 3 (state)
    except OSError:
        return None


def cpu_seconds(groups: dict[str, int], redis_pid: int, waited_only: bool = False) -> dict[str, float]:
    """CPU (user + system, with waited-for children's) by stack component: every live process of
    each child's process session (each leads its own: its pool children and agents included),
    and the Redis server's process. ``waited_only``: the waited-for children's share alone (the
    agents' processes, which ended; a pool child is counted while it lives)."""
    by_session = {sid: name for name, sid in groups.items()}
    out = {name: 0.0 for name in groups}
    first = 13 if waited_only else 11
    for entry in os.scandir("/proc"):
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields and int(fields[3]) in by_session:
            out[by_session[int(fields[3])]] += sum(int(f) for f in fields[first:15]) / CLK  # utime stime cutime cstime
    if waited_only:
        return out
    fields = _stat(redis_pid)
    out["redis"] = sum(int(f) for f in fields[11:15]) / CLK if fields else 0.0
    return out


def redis_calls(r: redis.Redis) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def wait_published(r: redis.Redis, total: int, timeout: float) -> int:
    """Until the results stream holds ``total`` entries (each terminal session is published
    once); returns the XLENs sent, so they can be left out of the pipeline's command count.
    (Polling the API instead would charge the API and Redis for the benchmark's own polling.)"""
    deadline, polls = time.monotonic() + timeout, 0
    while r.xlen(RESULTS_STREAM) < total:
        polls += 1
        if time.monotonic() > deadline:
            raise TimeoutError(f"{r.xlen(RESULTS_STREAM)} of {total} sessions published")
        time.sleep(0.02)
    return polls + 1


def submit_all(client: RolloutClient, tasks: list[dict[str, Any]], threads: int = 4) -> None:
    chunks = [tasks[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=lambda c=c: [client.submit(t) for t in c]) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def profile(pids: dict[str, int], seconds: float, out_dir: Path) -> dict[str, Path]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    procs = {}
    for name, pid in pids.items():
        path = out_dir / f"{name}.txt"
        procs[name] = (subprocess.Popen([spy, "record", "--pid", str(pid), "--subprocesses", "--duration",
                                         str(int(seconds)), "--format", "raw", "--output", str(path), "--nonblocking", "--gil"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), path)
    return {n: p for n, (proc, p) in procs.items() if proc.wait() == 0 or p.exists()}


OURS = ("(pipeline/", "(workers/", "(infra/")  # py-spy names files relative to sys.path
MACHINERY = ("(celery/", "(kombu/", "(billiard/", "(vine/", "(amqp/")


def breakdown(raw: Path, top: int = 10) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """From py-spy's raw (collapsed-stack) output: the share of samples whose stack holds project
    code (``project``: our stage code and the Redis calls it makes), else Celery/kombu machinery
    (``celery/kombu``: its Redis calls included), else anything else; and, within the project's
    share, the project functions that were innermost (what our code was doing)."""
    shares: dict[str, int] = {}
    ours: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count, frames = int(n), stack.split(";")
        total += count
        mine = [f for f in frames if any(p in f for p in OURS) and "(infra/cli/" not in f]
        bucket = "project" if mine else "celery/kombu" if any(any(p in f for p in MACHINERY) for f in frames) \
            else "other"
        shares[bucket] = shares.get(bucket, 0) + count
        if mine:
            name = mine[-1].split(" (")[0] + " " + mine[-1].rsplit("/", 1)[-1].rstrip(")")
            ours[name] = ours.get(name, 0) + count
    pct = {k: 100 * v / total for k, v in shares.items()} if total else {}
    return pct, [(f, 100 * c / total) for f, c in sorted(ours.items(), key=lambda kv: -kv[1])[:top]]


def folder_cost_us(home: Path, n: int = 200) -> tuple[float, float]:
    """CPU microseconds for one mkdir and one rmdir in ``home``'s disk, measured here: a session's
    runtime makes and removes SESSION_FOLDERS of them, and their cost varies tenfold between
    disks and even folders of one ext4 disk (364 us under /root, 34 under /tmp on one machine)."""
    probe = Path(tempfile.mkdtemp(prefix="folders-", dir=home))
    names = [probe / f"f{i}" for i in range(n)]
    t0 = time.process_time()
    for name in names:
        os.mkdir(name)
    t1 = time.process_time()
    for name in names:
        os.rmdir(name)
    t2 = time.process_time()
    probe.rmdir()
    return 1e6 * (t1 - t0) / n, 1e6 * (t2 - t1) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--events", action="store_true", help="Celery task events on (what Flower needs)")
    parser.add_argument("--profile", action="store_true", help="sample every worker with py-spy")
    parser.add_argument("--quick", action="store_true", help="200 sessions in 20 tasks")
    parser.add_argument("--home-base", type=Path, default=None,
                        help="where the stack's POLAR_HOME goes (default ~/.cache/polar-bench; e.g. /dev/shm)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.tasks = 200, 20
    home = bench_home(args.home_base)
    mkdir_us, rmdir_us = folder_cost_us(home)
    folders_ms = SESSION_FOLDERS * (mkdir_us + rmdir_us) / 1000
    settings = Settings(home=home, ready_capacity=16, task_events=args.events)
    config = StackConfig(settings=settings, upstream="fake", components=("api", "workers"), supervise=False)
    with Stack(config) as stack:
        client = RolloutClient.from_settings(stack.settings)
        r = redis.Redis.from_url(stack.settings.redis_url)
        groups = {name: child.proc.pid for name, child in stack.children.items() if name != "model"}
        assert stack.redis is not None and stack.redis.pid is not None
        redis_pid = stack.redis.pid
        # Warm-up: every pool child has imported what it runs.
        warm = [task(i, 4, "warm") for i in range(5)]
        submit_all(client, warm)
        wait_published(r, 20, 120)
        # What the stack burns doing nothing (Celery's timers, reapers, pools), for scale.
        idle0, idle_t0 = cpu_seconds(groups, redis_pid), time.monotonic()
        time.sleep(IDLE_WINDOW_SECONDS)
        idle1, idle_wall = cpu_seconds(groups, redis_pid), time.monotonic() - idle_t0
        idle_ms_per_s = {k: 1000 * (idle1[k] - idle0[k]) / idle_wall for k in idle1}
        per_task = max(1, args.sessions // args.tasks)
        tasks = [task(i, per_task, "run") for i in range(args.tasks)]
        n = per_task * args.tasks
        cpu0, calls0, t0 = cpu_seconds(groups, redis_pid), redis_calls(r), time.monotonic()
        agents0 = sum(cpu_seconds(groups, redis_pid, waited_only=True).values())
        spy: threading.Thread | None = None
        raws: dict[str, Path] = {}
        if args.profile:
            pids = {k: v for k, v in groups.items() if k.startswith("worker-") or k == "api"}
            out = home / "profiles"
            out.mkdir()
            spy = threading.Thread(target=lambda: raws.update(profile(pids, max(3.0, n / 60), out)))
            spy.start()
        submit_all(client, tasks)
        polls = wait_published(r, 20 + n, 600)
        wall = time.monotonic() - t0
        cpu1, calls1 = cpu_seconds(groups, redis_pid), redis_calls(r)
        agents_ms = 1000 * (sum(cpu_seconds(groups, redis_pid, waited_only=True).values()) - agents0) / n
        calls1["xlen"] = calls1.get("xlen", 0) - polls  # the benchmark's own
        calls1["info"] = calls1.get("info", 0) - 1
        commands = {k: (v - calls0.get(k, 0)) / n for k, v in calls1.items() if v - calls0.get(k, 0) > 0}
        if spy is not None:
            spy.join()
        by_name = {name: 1000 * (cpu1[name] - cpu0[name]) / n for name in cpu1}
        figures = {"sessions": n, "tasks": args.tasks, "events": args.events, "wall_s": round(wall, 2),
                   "sessions_per_s": round(n / wall, 1), "cpu_ms_per_session": round(sum(by_name.values()), 1),
                   "cpu_ms_per_session_by_process": {k: round(v, 2) for k, v in sorted(by_name.items())},
                   # Of the total: the agents' own processes (``bash -c true``: exec and shell start-up).
                   "agent_processes_cpu_ms_per_session": round(agents_ms, 2),
                   "idle_cpu_ms_per_s": round(sum(idle_ms_per_s.values()), 2),
                   # Of the total: the session folders' mkdir and rmdir on this disk (estimated
                   # from their measured cost: a property of the disk, not of the pipeline).
                   "session_folders_cpu_ms_per_session": round(folders_ms, 2),
                   "mkdir_us": round(mkdir_us, 1), "rmdir_us": round(rmdir_us, 1),
                   "redis_commands_per_session": round(sum(commands.values()), 1),
                   "redis_commands_by_name": {k: round(v, 2) for k, v in sorted(commands.items(), key=lambda kv: -kv[1])}}
        if args.json:
            measured_on = (f"{n} no-op sessions in {args.tasks} tasks, local runtime, all stages, "
                           f"{os.cpu_count()} cores" + (", task events on" if args.events else ""))
            emit("orchestration", [
                figure("sessions per second", figures["sessions_per_s"], "sessions/s", measured_on, (">=", 50)),
                figure("CPU per session, all processes", figures["cpu_ms_per_session"], "ms", measured_on,
                       ("<=", 20)),
                figure("Redis commands per session", figures["redis_commands_per_session"], "commands",
                       measured_on),
                figure("CPU per session, of it the agents' own processes", figures["agent_processes_cpu_ms_per_session"],
                       "ms", measured_on + " (bash -c true)"),
                figure("CPU per session, of it the session folders (this disk)",
                       figures["session_folders_cpu_ms_per_session"], "ms",
                       f"{SESSION_FOLDERS} mkdir + rmdir at {mkdir_us:.0f} + {rmdir_us:.0f} us measured in the bench home"),
            ], **figures)
        else:
            print(f"{n} no-op sessions in {args.tasks} tasks, events {'on' if args.events else 'off'}: "
                  f"{figures['sessions_per_s']} sessions/s ({wall:.1f} s), "
                  f"{figures['cpu_ms_per_session']} ms CPU per session, "
                  f"{figures['redis_commands_per_session']} Redis commands per session")
            print(f"  of which the agents' own processes (bash -c true): {agents_ms:.2f} ms CPU/session")
            print(f"  of which the session folders, {SESSION_FOLDERS} made and removed (this disk: mkdir {mkdir_us:.0f} us, "
                  f"rmdir {rmdir_us:.0f} us CPU): ~{folders_ms:.2f} ms CPU/session")
            for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1]):
                print(f"  {name:<18}{ms:>8.2f} ms CPU/session   (idle: {idle_ms_per_s[name]:.2f} ms CPU/s)")
            print("  Redis commands per session: " + ", ".join(
                f"{k} {v}" for k, v in list(figures["redis_commands_by_name"].items())[:16]))
        for name, raw in sorted(raws.items()):  # with --json on stderr: the JSON line stays the last
            shares, ours = breakdown(raw)
            print(f"\n{name} (py-spy, samples holding the GIL): " +
                  ", ".join(f"{k} {v:.0f}%" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])),
                  file=sys.stderr if args.json else sys.stdout)
            for frame, pct in ours:
                print(f"  {pct:5.1f}%  {frame}", file=sys.stderr if args.json else sys.stdout)
    if not args.profile:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
