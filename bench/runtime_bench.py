"""Runtimes: how long a container takes from start to ready and to stop on podman, and whether
the run slots stay busy when INIT is slow (container start + prepare) -- the READY buffer's job.

    .venv/bin/python bench/runtime_bench.py [--starts 10] [--sessions 16] [--run-slots 4] [--quick] [--json]

Needs podman (infra/images/install_host_runtimes.sh) and the test image (build_test_image.sh);
starts its own `podman system service` on a temporary socket.

1. start -> ready (the container created, started, its working directory made; for no network,
   the proxy relay up) and stop (removed), per backend, as p50/p90 over --starts runs each.
2. The example agent (scripted policy: a 4 s model call, then a tool call and a last turn) in
   docker, with a slow INIT (container start + a 3 s prepare step), READY capacity = run slots:
   the fraction of the run slots' time spent running agents, over the window in which sessions
   were still waiting to run (goal >= 95 %), and over the whole task (with the drain at the end);
   then the same with READY capacity 1, where INIT can prepare only one session ahead.

``--quick``: 4 starts per backend, 8 sessions. ``--json``: the figures as one JSON line
(bench/figures.py), the tables on stderr.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import emit, figure  # noqa: E402
from infra.refserver import build_tiny_model  # noqa: E402
from infra.stack import Stack, StackConfig  # noqa: E402
from pipeline.client import RolloutClient, load_task_file  # noqa: E402
from pipeline.schemas import RuntimeSpec  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.status import Stage  # noqa: E402
from workers import runtimes  # noqa: E402
from workers.runtimes import RuntimeHost  # noqa: E402

IMAGE = "localhost/polar-test:bookworm"


def podman_service(folder: Path) -> tuple[subprocess.Popen, str]:
    sock = folder / "podman.sock"
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline:
            raise SystemExit("podman system service did not start")
        time.sleep(0.05)
    return proc, f"unix://{sock}"


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=10)[int(q * 10) - 1] if len(values) > 1 else values[0]


def start_stop(host: RuntimeHost, spec: dict, n: int) -> tuple[list[float], list[float]]:
    starts, stops = [], []
    for i in range(n):
        rt = runtimes.create(RuntimeSpec(**spec), f"sess-bench-{uuid.uuid4().hex[:8]}", host)
        t0 = time.perf_counter()
        rt.start()
        assert rt.exec("true", timeout=30).exit_code == 0  # ready: a command runs in it
        t1 = time.perf_counter()
        rt.stop()
        t2 = time.perf_counter()
        if i:  # the first of each kind warms caches (image layers, the engine's client)
            starts.append((t1 - t0) * 1000)
            stops.append((t2 - t1) * 1000)
    return starts, stops


def busy_fraction(results: list, slots: int) -> tuple[float, float, float]:
    spans = sorted((r.timing.run_started_at, r.timing.run_ended_at) for r in results)
    first, last_start, last_end = spans[0][0], max(s for s, _ in spans), max(e for _, e in spans)

    def busy(a: float, b: float) -> float:
        return sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans) / (slots * (b - a))

    return busy(first, last_start), busy(first, last_end), last_start - first


def busy_run(settings: Settings, model: Path, args: argparse.Namespace, capacity: int, kinds: dict | None = None,
             start_stop_ms: dict | None = None):
    """One stack with READY capacity ``capacity``; the start/stop figures first when asked (into
    ``start_stop_ms``: name -> (start p50, stop p50))."""
    config = StackConfig(settings=settings.replace(ready_capacity=capacity), model_dir=model,
                         concurrency={Stage.RUN: args.run_slots, Stage.INIT: args.run_slots},
                         policies={"slow-model": str(ROOT / "tests" / "fixtures" / "slow_model_policy.json")})
    with Stack(config) as stack:
        host = RuntimeHost.of(stack.settings, task_id="bench")
        for name, spec in (kinds or {}).items():
            starts, stops = start_stop(host, spec, args.starts)
            if start_stop_ms is not None:
                start_stop_ms[name] = (pct(starts, .5), pct(stops, .5))
            print(f"{name:>24} {pct(starts, .5):>7.0f} / {pct(starts, .9):<7.0f} {pct(stops, .5):>6.0f} / "
                  f"{pct(stops, .9):<6.0f}", file=args.out)
        client = RolloutClient.from_settings(stack.settings)
        task = load_task_file(ROOT / "examples" / "demo_task.json")
        task.update(task_id=f"busy-{uuid.uuid4().hex[:6]}", num_samples=args.sessions, timeout_seconds=300)
        task["runtime"].update(backend="docker", image=IMAGE)
        task["runtime"]["prepare"].append({"type": "exec", "command": f"sleep {args.prepare_seconds}"})
        task["agent"]["model_name"] = "slow-model"
        t0 = time.monotonic()
        status = client.wait(client.submit(task), timeout=900)
        wall = time.monotonic() - t0
    ok = [r for r in status.results if r.timing.run_started_at and r.timing.run_ended_at]
    fed, whole, window = busy_fraction(ok, args.run_slots)
    runs = [r.timing.durations_ms["run"] / 1000 for r in ok]
    inits = [r.timing.durations_ms["init"] / 1000 for r in ok]
    return fed, whole, window, wall, statistics.median(inits), statistics.median(runs), status.counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--run-slots", type=int, default=4)
    ap.add_argument("--prepare-seconds", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="4 starts per backend, 8 sessions")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line; the tables on stderr")
    args = ap.parse_args()
    if args.quick:
        args.starts, args.sessions = 4, 8
    args.out = out = sys.stderr if args.json else sys.stdout
    home = Path(tempfile.mkdtemp(prefix="polar-runtime-bench-"))
    service, docker_host = podman_service(home)
    try:
        settings = Settings(home=home, docker_host=docker_host)
        model = build_tiny_model(home / "model")
        kinds = {"local": {"backend": "local"}, "bwrap": {"backend": "bwrap"},
                 "docker (host network)": {"backend": "docker", "image": IMAGE, "network": "host"},
                 "docker (no network)": {"backend": "docker", "image": IMAGE, "allow_internet": False}}
        print(f"1. start -> ready and stop, ms (p50 / p90 of {args.starts - 1} runs after one warm-up):", file=out)
        print(f"{'runtime':>24} {'start->ready':>16} {'stop':>14}", file=out)
        start_stop_ms: dict[str, tuple[float, float]] = {}
        rows = {cap: busy_run(settings, model, args, cap, kinds if cap == args.run_slots else None, start_stop_ms)
                for cap in (args.run_slots, 1)}
        _, _, _, _, init, run, _ = rows[args.run_slots]
        print(f"\n2. {args.sessions} sessions of the example agent in docker, {args.run_slots} run slots; INIT = "
              f"container start + {args.prepare_seconds:.0f} s prepare (p50 {init:.1f} s), agent p50 {run:.1f} s.",
              file=out)
        print("   Run slots' time spent running agents, while sessions waited to run / over the whole run phase:",
              file=out)
        for cap, (fed, whole, window, wall, _, _, counts) in rows.items():
            print(f"   READY capacity {cap}: {fed:.1%} over {window:.1f} s / {whole:.1%}; task wall time {wall:.1f} s; "
                  f"{counts}", file=out)
        (fed_a, *_), (fed_b, *_) = rows[args.run_slots], rows[1]
        print(f"   READY capacity >= run slots keeps them {fed_a / fed_b:.2f}x as busy as capacity 1", file=out)
        if args.json:
            busy_input = (f"{args.sessions} example-agent sessions in docker, {args.run_slots} run slots, INIT = "
                          f"container start + {args.prepare_seconds:g} s prepare")
            emit("runtime", [
                *(figure(f"{name}: start -> ready p50", round(start, 0), "ms",
                         f"{args.starts - 1} starts after a warm-up") for name, (start, _) in start_stop_ms.items()),
                figure("run slots busy while sessions wait, READY capacity = run slots", round(100 * fed_a, 1), "%",
                       busy_input, (">=", 95)),
                figure("run slots busy, capacity = run slots / capacity 1", round(fed_a / fed_b, 2), "x", busy_input),
            ], start_stop_p50_ms=start_stop_ms,
                busy={cap: {"fed": r[0], "whole": r[1], "window_s": r[2], "wall_s": r[3], "sessions": r[6]}
                      for cap, r in rows.items()})
    finally:
        service.terminate()
        service.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)  # the model, the stacks' logs, the engine's socket


if __name__ == "__main__":
    main()
