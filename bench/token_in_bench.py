"""What ``agent.token_in`` costs a call: the same multi-turn conversation through the proxy with it
off and on, interleaved, against the reference server (tiny model, CPU) -- the latency a harness
sees per call, the difference being the splice: the session's turns read from Redis, the engine's
``/tokenize`` twice for the new messages, the turn recorded.

    .venv/bin/python bench/token_in_bench.py [--turns 10] [--rounds 5] [--quick] [--json]

Input: a coding agent's conversation (``bench/chat_requests.py``'s system prompt and four tools),
the policy emitting each turn as a model does (a compact ``<tool_call>`` JSON), the harness
sending it back with its tool output (~600 bytes each), ``--turns`` calls per conversation.
Latencies are wall clock through gunicorn + gevent (2 workers); the reference model's own
compute is in both, so only the difference is the splice's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench import chat_requests  # noqa: E402
from bench.figures import emit, figure  # noqa: E402
from infra.refserver import build_tiny_model  # noqa: E402
from infra.stack import Stack, StackConfig  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from tests.support import running_session  # noqa: E402


def policy(turns: int) -> dict:
    out = []
    for i in range(turns - 1):
        call = {"name": "bash", "arguments": {"command": f"grep -rn 'step_{i}' src/ | head -20"}}
        out.append({"text": "<tool_call>\n" + json.dumps(call, separators=(",", ":")) + "\n</tool_call>"})
    out.append({"content": "Done: the change is in and the tests pass."})
    return {"turns": out}


def conversation(proxy: str, key: str, turns: int) -> list[float]:
    """Per call, the seconds the harness waited."""
    base = chat_requests.coding_turns()
    messages, tools = base["messages"][:2], base.get("tools")
    took = []
    with httpx.Client(timeout=120) as http:
        for i in range(turns):
            t0 = time.perf_counter()
            res = http.post(f"{proxy}/s/{key}/v1/chat/completions",
                            json={"model": "agent", "messages": messages, "tools": tools})
            took.append(time.perf_counter() - t0)
            res.raise_for_status()
            msg = res.json()["choices"][0]["message"]
            if not msg.get("tool_calls"):
                break
            call = msg["tool_calls"][0]
            # the harness's re-serialisation of the arguments, and the tool's output
            args = json.dumps(json.loads(call["function"]["arguments"]))
            messages = [*messages, {"role": "assistant", "content": msg.get("content") or "", "tool_calls": [
                {**call, "function": {**call["function"], "arguments": args}}]},
                {"role": "tool", "tool_call_id": call["id"], "content": f"src/mod_{i}.py:{i}: step_{i} = True\n" * 12}]
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="6 turns, 2 rounds")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line; the table on stderr")
    args = ap.parse_args()
    if args.quick:
        args.turns, args.rounds = 6, 2
    out = sys.stderr if args.json else sys.stdout
    home = Path(tempfile.mkdtemp(prefix="polar-token-in-"))
    script = home / "agent.json"
    script.write_text(json.dumps(policy(args.turns)))
    config = StackConfig(settings=Settings(home=home), model_dir=build_tiny_model(home / "model"),
                         policies={"agent": str(script)}, components=("proxy",))
    with Stack(config) as stack:
        proxy, redis_url = stack.settings.proxy_url, stack.settings.redis_url
        times: dict[str, list[list[float]]] = {"off": [], "auto": []}
        conversation(proxy, running_session(redis_url), args.turns)  # warm up
        for _ in range(args.rounds):
            for mode in ("off", "auto"):
                key = running_session(redis_url, agent={"custom_shell": "true", "token_in": mode})
                times[mode].append(conversation(proxy, key, args.turns))
    # Calls after the first of each conversation: the ones a splice applies to.
    later = {m: [t for conv in runs for t in conv[1:]] for m, runs in times.items()}
    p50 = {m: 1000 * statistics.median(v) for m, v in later.items()}
    added = [1000 * (b - a) for ra, rb in zip(times["off"], times["auto"]) for a, b in zip(ra[1:], rb[1:])]
    print(f"{args.turns}-call conversations x {args.rounds} rounds (reference model, 2 proxy workers): "
          f"p50 per call off {p50['off']:.2f} ms, on {p50['auto']:.2f} ms; the splice adds "
          f"{statistics.median(added):.2f} ms p50 (calls 2..{args.turns}, paired by turn)", file=out)
    if args.json:
        measured_on = f"{args.turns}-call coding conversation, ~600-byte tool outputs, reference server"
        emit("token_in", [figure("latency a splice adds per call, p50", round(statistics.median(added), 2), "ms",
                                 measured_on),
                          figure("call latency p50, token_in off", round(p50["off"], 2), "ms", measured_on),
                          figure("call latency p50, token_in auto", round(p50["auto"], 2), "ms", measured_on)])


if __name__ == "__main__":
    main()
