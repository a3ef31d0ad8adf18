"""Where one proxy worker spends its CPU on a request: py-spy samples the single gunicorn worker
while the benchmark's load runs, and the samples are summed per function (self and total).

    pip install py-spy   # a sampling profiler; not a dependency of the project
    .venv/bin/python bench/proxy_profile.py [--request 10|32k] [--stream] [--concurrency 1] [--seconds 8]

Prints the top functions by self time and by inclusive time, as shares of the worker's busy
samples (its idle waits in gevent's event loop are dropped) and as wall microseconds per request.
Sampling wall time on a shared 2-core machine also counts the moments the worker was runnable but
descheduled (e.g. right after a send woke Redis or the engine).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import chat_requests, loadgen  # noqa: E402
from bench.proxy_bench import _dumps, spawn, stop, wait_http  # noqa: E402
from infra.embedded_redis import EmbeddedRedis, free_ports  # noqa: E402
from tests.support import running_session  # noqa: E402


def worker_pid(master: int) -> int:
    for _ in range(100):
        for task in Path(f"/proc/{master}/task").iterdir():
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.1)
    raise RuntimeError("no gunicorn worker")


RATE = 2000  # samples per second


def summarise(raw: Path, top: int, requests: int) -> None:
    """Per function: its share of the busy samples and its wall time per request (a sample is
    1/RATE s of the worker's wall clock while it was not idle in the event loop)."""
    self_t: collections.Counter[str] = collections.Counter()
    total_t: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        if "Hub.run (" in stack.rsplit(";", 1)[-1]:
            continue  # the event loop waiting for I/O: idle, whatever py-spy thinks
        samples += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        self_t[frames[-1]] += n
        for f in set(frames):
            total_t[f] += n
    print(f"{samples} busy samples, {samples / RATE / max(1, requests) * 1000:.2f} ms per request")
    for title, table in (("self", self_t), ("inclusive", total_t)):
        print(f"\ntop {top} by {title} time:")
        for name, n in table.most_common(top):
            print(f"  {100 * n / samples:5.1f}%  {n / RATE / max(1, requests) * 1e6:6.0f} us/req  {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--request", choices=("10", "32k"), default="10")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--gil", action="store_true",
                    help="only samples holding the GIL: Python's own CPU, without syscalls and descheduled time")
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or os.environ.get("PY_SPY")
    if not pyspy:
        sys.exit("py-spy not found (pip install py-spy, or set PY_SPY to its path)")
    build = chat_requests.coding_turns if args.request == "10" else chat_requests.long_conversation
    body = _dumps(build(stream=args.stream))
    with EmbeddedRedis() as redis_server:
        ports = dict(zip(("upstream", "proxy"), free_ports(2)))
        upstream = f"http://127.0.0.1:{ports['upstream']}"
        home = tempfile.mkdtemp(prefix="polar-prof-")
        env = {**os.environ, "POLAR_HOME": home, "POLAR_REDIS_URL": redis_server.url,
               "POLAR_UPSTREAM_URL": upstream}
        procs = [spawn(["-m", "infra.cli.main", "model", "fake", "--port", str(ports["upstream"]), "--workers", "1"], env),
                 spawn(["-m", "infra.cli.main", "proxy", "--port", str(ports["proxy"]), "--workers", "1"], env)]
        try:
            for port in ports.values():
                wait_http(f"http://127.0.0.1:{port}/health")
            sid = running_session(redis_server.url)
            url = f"http://127.0.0.1:{ports['proxy']}/s/{sid}/v1/chat/completions"
            loadgen.run(url, body, args.concurrency, seconds=1.0)  # warm up
            out = Path(tempfile.mkdtemp(prefix="polar-prof-")) / "profile.txt"
            spy = subprocess.Popen([pyspy, "record", "--format", "raw", "--rate", str(RATE), "--nonblocking",
                                    "--duration", str(int(args.seconds)), "--pid", str(worker_pid(procs[1].pid)),
                                    "--output", str(out), *(["--gil"] if args.gil else [])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            result: list[loadgen.Result] = []
            load = threading.Thread(target=lambda: result.append(
                loadgen.run(url, body, args.concurrency, seconds=args.seconds)))
            load.start()
            spy.wait()
            load.join()
            print(f"{len(body):,}-byte request, stream={args.stream}, concurrency {args.concurrency}: "
                  f"{len(result[0].latencies)} requests, p50 {result[0].pct(0.5) * 1000:.2f} ms")
            summarise(out, args.top, len(result[0].latencies))
        finally:
            stop(procs)
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
