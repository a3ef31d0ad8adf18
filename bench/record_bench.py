"""The cost of converting and recording one completion whose prompt is 32k tokens, per provider.

    .venv/bin/python bench/record_bench.py [--redis-url URL] [--quick] [--json]

``--quick``: the median of 10 runs instead of 30. ``--json``: the figures with their goal
(< 5 ms convert + record) as one JSON line (bench/figures.py), the table on stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figures import emit, figure  # noqa: E402
from proxy import upstream  # noqa: E402
from proxy.capture import build_record  # noqa: E402
from proxy.providers import PROVIDERS, turn_from_chat  # noqa: E402
from proxy.providers.base import assistant_message  # noqa: E402

PROMPT_TOKENS = 32_768
RESPONSE_TOKENS = 256


def requests() -> dict[str, dict]:
    """~128 kB of conversation (about 32k tokens) in each provider's format."""
    chunk = "def handler(event):\n    return process(event['body'])  # " * 4
    turns = [chunk * 10 for _ in range(60)]
    chat = [{"role": "system", "content": "You are a coding agent."}]
    anthropic, responses, google = [], [], []
    for i, text in enumerate(turns):
        role = "user" if i % 2 == 0 else "assistant"
        chat.append({"role": role, "content": text})
        anthropic.append({"role": role, "content": [{"type": "text", "text": text}]})
        responses.append({"type": "message", "role": role,
                          "content": [{"type": "input_text" if role == "user" else "output_text", "text": text}]})
        google.append({"role": "user" if role == "user" else "model", "parts": [{"text": text}]})
    tools = [{"type": "function", "function": {"name": f"tool{i}", "parameters": {"type": "object"}}} for i in range(20)]
    return {
        "openai_chat": {"model": "m", "messages": chat, "tools": tools},
        "anthropic": {"model": "m", "max_tokens": 4096, "system": "You are a coding agent.", "messages": anthropic,
                      "tools": [{"name": t["function"]["name"], "input_schema": {"type": "object"}} for t in tools]},
        "openai_responses": {"model": "m", "instructions": "You are a coding agent.", "input": responses,
                             "tools": [{"type": "function", "name": t["function"]["name"], "parameters": {}} for t in tools]},
        "google": {"systemInstruction": {"parts": [{"text": "You are a coding agent."}]}, "contents": google,
                   "tools": [{"functionDeclarations": [{"name": t["function"]["name"]} for t in tools]}]},
    }


def engine_answer() -> dict:
    ids = list(range(RESPONSE_TOKENS))
    return {"id": "chatcmpl-1", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x " * RESPONSE_TOKENS},
                         "finish_reason": "stop", "stop_reason": None, "token_ids": ids,
                         "logprobs": {"content": [{"token": "x", "logprob": -0.1, "bytes": None, "top_logprobs": []}
                                                  for _ in ids]}}],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": RESPONSE_TOKENS},
            "prompt_token_ids": list(range(PROMPT_TOKENS))}


def one(provider_name: str, body: dict, answer_bytes: bytes) -> tuple[float, float, bytes]:
    provider, engine = PROVIDERS[provider_name], upstream.create("vllm")
    t0 = time.perf_counter()
    raw = json.loads(answer_bytes)  # the engine's answer, as the proxy receives it
    t1 = time.perf_counter()
    parsed = provider.parse(body, path_model="m")
    engine.prepare(parsed.chat)
    captured = engine.extract(raw)
    turn = turn_from_chat(raw, parsed.model)
    provider.render(turn, parsed)
    record = build_record(session_id="s", seq=1, provider=provider_name, stream=False, model=parsed.model,
                          captured=captured,
                          original=body, normalized=parsed.chat, upstream=raw, response_message=assistant_message(turn),
                          started_at=0.0, finished_at=0.0, latency_ms=0.0, upstream_url="u", policy_version=None)
    t2 = time.perf_counter()
    return (t1 - t0) * 1000, (t2 - t1) * 1000, record


def record_costs(redis_url: str | None = None, repeat: int = 30, out: TextIO | None = None) -> list[dict[str, Any]]:
    """Prints the table (to ``out``, default stdout); returns the figures."""
    out = out or sys.stdout
    figures = []
    answer = json.dumps(engine_answer()).encode()
    client = None
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)
    print(f"\nconvert + record one completion, {PROMPT_TOKENS}-token prompt, {RESPONSE_TOKENS}-token answer "
          f"(median of {repeat}; goal < 5 ms):", file=out)
    for name, body in requests().items():
        parse_ms, conv_ms, write_ms = [], [], []
        for _ in range(repeat):
            p, c, record = one(name, body, answer)
            parse_ms.append(p)
            conv_ms.append(c)
            if client is not None:
                t = time.perf_counter()
                client.rpush("polar:bench:records", record)
                write_ms.append((time.perf_counter() - t) * 1000)
        write = f", Redis write {statistics.median(write_ms):.2f} ms" if write_ms else ""
        print(f"  {name:17} convert+record {statistics.median(conv_ms):.2f} ms (record {len(record) / 1024:.0f} kB)"
              f"; parsing the engine's JSON answer {statistics.median(parse_ms):.2f} ms{write}", file=out)
        figures.append(figure(f"{name}: convert + record", round(statistics.median(conv_ms), 2), "ms",
                              f"{PROMPT_TOKENS // 1024}k-token prompt ({len(json.dumps(body)) // 1024} kB request), "
                              f"{RESPONSE_TOKENS}-token answer, median of {repeat}", ("<", 5)))
    if client is not None:
        client.delete("polar:bench:records")
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-url", help="also time the record's write to this Redis")
    ap.add_argument("--quick", action="store_true", help="median of 10 runs instead of 30")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line; the table on stderr")
    args = ap.parse_args()
    figures = record_costs(args.redis_url, repeat=10 if args.quick else 30, out=sys.stderr if args.json else None)
    if args.json:
        emit("record", figures)


if __name__ == "__main__":
    main()
