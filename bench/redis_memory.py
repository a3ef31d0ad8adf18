"""Redis memory after N finished sessions (default 10,000), and what is left once raw records
have expired.

    .venv/bin/python bench/redis_memory.py [--sessions 10000] [--calls 3] [--turn-bytes 0] [--quick] [--json]

Every session goes through all five stage bodies in this process (the ``memory`` runtime; an
agent that makes ``--calls`` model calls through the proxy app in-process against the instant
fake engine, each with a 2-message, ~150-byte request; ``--turn-bytes N`` makes it a growing
conversation instead: every call after the first adds the answer and an N-byte tool result, as an
agent's context grows), so the keys are exactly what a real run leaves. The fake engine counts a
prompt token per 4 bytes of request. Reports bytes per finished session with the results kept (24 h by default) and
after the raw records' retention (1 h after publishing), plus any key without an expiry.
``--quick``: 500 sessions. ``--json``: the figures (no goals: docs/sizing.md sizes from them) as
one JSON line (bench/figures.py), the rest on stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import emit, figure  # noqa: E402
from infra import fake_upstream  # noqa: E402
from infra.embedded_redis import EmbeddedRedis  # noqa: E402
from pipeline.schemas import TaskRequest  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.status import Stage  # noqa: E402
from proxy.app import create_app  # noqa: E402
from proxy.upstream import WSGITransport  # noqa: E402
from workers.runtimes.base import ExecResult  # noqa: E402
from workers.runtimes.memory import BACKEND, MemoryRuntime  # noqa: E402
from workers.stages.bodies import BODIES  # noqa: E402
from workers.stages.common import make_deps, run_stage  # noqa: E402

TOOL_LINE = "-rw-r--r-- 1 agent agent  4096 src/module.py\n"
MSG = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List the files."}]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--per-task", type=int, default=100)
    ap.add_argument("--turn-bytes", type=int, default=0, help="tool-result bytes each turn adds (0: fixed request)")
    ap.add_argument("--quick", action="store_true", help="500 sessions")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line; the rest on stderr")
    args = ap.parse_args()
    if args.quick:
        args.sessions = 500
    out = sys.stderr if args.json else sys.stdout
    with EmbeddedRedis() as server:
        settings = Settings(home=tempfile.mkdtemp(), redis_url=server.url, upstream_url="http://engine.test",
                            proxy_url="http://proxy.test", inflight_drain_seconds=0, plugin_modules="workers.runtimes")
        d = make_deps(settings)
        proxy = create_app(settings, transport=WSGITransport(fake_upstream.app))

        def agent(rt: MemoryRuntime, argv: list[str], env: dict[str, str]) -> ExecResult:
            sdk = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0,
                                http_client=httpx2.Client(transport=httpx2.WSGITransport(app=proxy)))
            messages = list(MSG)
            for _ in range(args.calls):
                sdk.chat.completions.create(model="fake", messages=messages)
                if args.turn_bytes:
                    tool_result = (TOOL_LINE * (args.turn_bytes // len(TOOL_LINE) + 1))[:args.turn_bytes]
                    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": tool_result}]
            return ExecResult(0)

        MemoryRuntime.commands["agent"] = agent
        r = d.stores.r
        base = int(r.info("memory")["used_memory"])
        started = time.monotonic()
        done = 0
        while done < args.sessions:
            n = min(args.per_task, args.sessions - done)
            task = TaskRequest.model_validate({"instruction": "List the files and summarise them.", "num_samples": n,
                                               "runtime": {"backend": BACKEND}, "agent": {"custom_shell": "agent"}})
            for spec in d.stores.tasks.create(task):
                for stage in Stage:
                    run_stage(stage, spec.session_id, *BODIES[stage], d=d)
                MemoryRuntime.live.pop(spec.session_id, None)
            r.delete(*[q.value for q in Stage])  # the stage messages no worker consumes here
            done += n
            print(f"\r{done}/{args.sessions} sessions ({time.monotonic() - started:.0f}s)", end="", flush=True,
                  file=out)
        print(file=out)
        kept = int(r.info("memory")["used_memory"]) - base
        no_ttl = sorted({k.decode().split("{")[0] for k in r.scan_iter(count=1000) if r.ttl(k) == -1})
        # What the raw records' retention removes (completion/error records, trajectories).
        for pattern in ("polar:sess:*:completions", "polar:sess:*:errors", "polar:sess:*:trajectory"):
            for k in r.scan_iter(match=pattern, count=1000):
                r.delete(k)
        after_records = int(r.info("memory")["used_memory"]) - base
    shape = (f"a conversation growing by {args.turn_bytes} bytes a turn" if args.turn_bytes
             else "2-message chat requests")
    print(f"{args.sessions} finished sessions, {args.calls} model calls each ({shape}):", file=out)
    print(f"  with results and raw records kept: {kept / 1e6:.1f} MB ({kept / args.sessions / 1024:.1f} KiB/session)",
          file=out)
    print(f"  after the raw records expire:      {after_records / 1e6:.1f} MB "
          f"({after_records / args.sessions / 1024:.1f} KiB/session; results go at POLAR_RESULT_TTL_SECONDS)", file=out)
    print(f"  keys without an expiry (bounded, docs/architecture.md): {', '.join(no_ttl)}", file=out)
    if args.json:
        measured_on = f"{args.sessions:,} finished sessions, {args.calls} model calls each, {shape}"
        emit("redis_memory", [
            figure("Redis memory per session, results and raw records kept", round(kept / args.sessions / 1024, 1),
                   "KiB", measured_on),
            figure("Redis memory per session, after raw records expire",
                   round(after_records / args.sessions / 1024, 1), "KiB", measured_on),
        ], kept_bytes=kept, after_records_bytes=after_records, keys_without_expiry=no_ttl)


if __name__ == "__main__":
    main()
