"""Soak: does anything grow with the number of sessions run? Rounds of sessions through the whole
stack (API, proxy, the five stage workers, Redis); after each round, the resident memory and open
file descriptors of every process and Redis's memory. A stack that runs for days must level off:
after the first rounds (imports, pools, caches filling) a process's memory should stay flat.

    .venv/bin/python bench/soak.py [--rounds 6] [--sessions 200] [--quick] [--json]

Input: each round ``--sessions`` sessions in tasks of 4; each session's agent (``curl`` in the
local runtime) makes 2 model calls through the proxy with ``bench/chat_requests.py``'s 10-message,
~4.5 kB coding-agent request, answered by the instant fake engine (a 48-token tool call with ids
and logprobs); ``per_request`` builder, ``session_completed`` evaluator, results published to the
stream and read (acked) by a consumer group as a trainer would. Redis memory counts what the
pipeline keeps by design (results for ``POLAR_RESULT_TTL_SECONDS``, a day), so it grows per
session: the figure is per 1,000 sessions. Process memory should not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from bench import chat_requests  # noqa: E402
from bench.figures import emit, figure  # noqa: E402
from bench.orchestration_bench import bench_home, submit_all, task, wait_published  # noqa: E402
from infra.stack import Stack, StackConfig  # noqa: E402
from pipeline.client import RolloutClient  # noqa: E402
from pipeline.settings import Settings  # noqa: E402

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def two_calls(body_file: Path) -> str:
    """The agent's command: the request in ``body_file`` sent twice through the proxy."""
    call = (f'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
            f'-H "content-type: application/json" --data-binary @{body_file} > /dev/null')
    return f"{call} && {call}"


def process_tree(groups: dict[str, int]) -> dict[str, tuple[int, int, int]]:
    """component -> (processes, resident kB, open fds), over every live process of its process
    session (a component's pool children included; agents have ended between rounds)."""
    by_session = {sid: name for name, sid in groups.items()}
    out = {name: (0, 0, 0) for name in groups}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            name = by_session.get(int(fields[3]))
            if name is None:
                continue
            rss_kb = int(Path(f"/proc/{entry.name}/statm").read_text().split()[1]) * PAGE_KB
            fds = len(os.listdir(f"/proc/{entry.name}/fd"))
        except OSError:  # gone meanwhile
            continue
        n, rss, fd = out[name]
        out[name] = (n + 1, rss + rss_kb, fd + fds)
    return out


def drain(client: RolloutClient, expected: int) -> int:
    """Read and ack ``expected`` results as a trainer's consumer group would."""
    read = 0
    for item in client.results(group="soak", consumer="c", block_ms=1000, stop_after=300):
        item.ack()
        read += 1
        if read >= expected:
            break
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=200, help="per round (tasks of 4)")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 100 sessions")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.sessions = 3, 100
    home = bench_home()
    body_file = home / "request.json"
    body_file.write_text(json.dumps(chat_requests.coding_turns(), separators=(",", ":")))
    settings = Settings(home=home, ready_capacity=16)
    rows: list[dict] = []
    with Stack(StackConfig(settings=settings, upstream="fake", supervise=False)) as stack:
        client = RolloutClient.from_settings(stack.settings)
        r = redis.Redis.from_url(stack.settings.redis_url)
        groups = {name: child.proc.pid for name, child in stack.children.items() if name not in ("model", "upstream")}
        published = 0
        command = two_calls(body_file)
        for rnd in range(args.rounds):
            tasks = [task(i, 4, f"r{rnd}", command, "soak") for i in range(args.sessions // 4)]
            t0 = time.monotonic()
            submit_all(client, tasks)
            published += 4 * len(tasks)
            wait_published(r, published, 900)
            drained = drain(client, 4 * len(tasks))
            time.sleep(2)  # stragglers: the last session's teardown, pool children settling
            tree = process_tree(groups)
            mem = r.info("memory")
            rows.append({"round": rnd, "sessions": published, "seconds": round(time.monotonic() - t0, 1),
                         "drained": drained, "redis_used_kb": int(mem["used_memory"]) // 1024,
                         "rss_kb": {k: v[1] for k, v in tree.items()}, "fds": {k: v[2] for k, v in tree.items()},
                         "processes": {k: v[0] for k, v in tree.items()}})
            print(f"round {rnd}: {published} sessions, {rows[-1]['seconds']} s, Redis {rows[-1]['redis_used_kb']} kB, "
                  f"RSS {sum(rows[-1]['rss_kb'].values())} kB, fds {sum(rows[-1]['fds'].values())}",
                  file=sys.stderr if args.json else sys.stdout, flush=True)
        statuses = [s.status.value for t in range(args.sessions // 4) for s in client.status(f"soak-r0-{t}").sessions]
    shutil.rmtree(home, ignore_errors=True)
    report(rows, statuses, args)


def report(rows: list[dict], statuses: list[str], args: argparse.Namespace) -> None:
    """Growth from the second round to the last (the first fills imports, pools and caches)."""
    base, last = rows[1] if len(rows) > 2 else rows[0], rows[-1]
    sessions = last["sessions"] - base["sessions"]
    growth = {k: (last["rss_kb"][k] - base["rss_kb"][k]) for k in last["rss_kb"]}
    fd_growth = {k: last["fds"][k] - base["fds"][k] for k in last["fds"]}
    redis_per_1000 = 1000 * (last["redis_used_kb"] - base["redis_used_kb"]) / max(1, sessions)
    rss_per_1000 = 1000 * sum(growth.values()) / max(1, sessions)
    # The last third of the rounds alone: bounded caches (Celery's 1,000 finished task ids, the
    # session keys' digests, ...) fill in the first thousands of sessions; a leak keeps its slope.
    late = rows[max(1, (2 * len(rows)) // 3) - 1]
    late_per_1000 = 1000 * (sum(last["rss_kb"].values()) - sum(late["rss_kb"].values())) / max(
        1, last["sessions"] - late["sessions"])
    on = (f"{args.rounds} rounds of {args.sessions} sessions, 2 model calls each (10-message 4.5 kB request, "
          f"fake engine), growth from round 1 to round {len(rows) - 1}")
    if args.json:
        emit("soak", [
            figure("process memory growth per 1,000 sessions, all processes", round(rss_per_1000), "kB", on),
            figure("process memory growth per 1,000 sessions, last third of the rounds", round(late_per_1000), "kB",
                   f"{on}; from round {late['round']}"),
            figure("Redis memory per 1,000 sessions (results kept a day by design)", round(redis_per_1000), "kB", on),
            figure("open file descriptors growth, all processes", sum(fd_growth.values()), "fds", on),
        ], rows=rows, first_round_statuses=sorted(set(statuses)))
        return
    print(f"\n{on}; first round's statuses: {sorted(set(statuses))}")
    for name in sorted(growth, key=lambda k: -last["rss_kb"][k]):
        series = " ".join(f"{row['rss_kb'][name] // 1024}" for row in rows)
        print(f"  {name:<18} RSS MB by round: {series}  (+{growth[name]} kB), fds {base['fds'][name]} -> "
              f"{last['fds'][name]}, processes {last['processes'][name]}")
    print(f"  all processes: {rss_per_1000:+.0f} kB per 1,000 sessions ({late_per_1000:+.0f} kB from round {late['round']} "
          f"on); Redis: {redis_per_1000:+.0f} kB per 1,000 sessions")


if __name__ == "__main__":
    main()
