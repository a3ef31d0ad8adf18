"""Result blobs: version 1 (the pydantic dump, msgpack-packed) against version 2 (packed arrays)
on 10k / 100k / 1M-token trajectories of both builders' shapes, in one run.

    .venv/bin/python bench/blob_bench.py [--sizes 10000,100000,1000000] [--messages]

Shapes (ids uniform over a 151,936-token vocabulary, logprobs float32 values as engines give):
- ``prefix_merging``: one merged conversation, 2 % prompt, then sampled turns (mask 1, real
  logprobs) and tool output between them (mask 0, synthetic logprob 0.0), about 1 : 2.
- ``per_request``: the default builder: one trace per model call, each prompt the previous one
  plus its response and a tool output.

Bytes per token = blob bytes / (prompt + response ids of every trace). ``--messages`` adds the
conversation text (about 4 characters per token) to every trace, as real results carry it;
without it the blobs hold token data only. Times are the best of a few runs.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from pipeline.blobs import decode_arrays, decode_result, encode_result  # noqa: E402
from pipeline.codec import pack, unpack  # noqa: E402
from pipeline.schemas import SessionResult, TokenLogprob, Trace, Trajectory  # noqa: E402
from pipeline.status import SessionStatus  # noqa: E402

VOCAB = 151_936
SIZES = (10_000, 100_000, 1_000_000)


class Tokens:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def ids(self, n: int) -> list[int]:
        return self.rng.integers(0, VOCAB, n).tolist()

    def logprobs(self, n: int) -> list[float]:
        return (-self.rng.exponential(0.3, n)).astype(np.float32).astype(np.float64).tolist()


def _trace(prompt: list[int], response: list[int], mask: list[float], logprobs: list[float],
           messages: bool) -> Trace:
    text = (lambda n: [{"role": "user", "content": "x" * (4 * n)}]) if messages else (lambda n: [])
    return Trace.model_construct(
        prompt_ids=prompt, response_ids=response, loss_mask=mask,
        response_logprobs=[TokenLogprob.model_construct(token_id=t, logprob=lp, token=None)
                           for t, lp in zip(response, logprobs)],
        prompt_messages=text(len(prompt)), response_messages=text(len(response)), tools=None,
        finish_reason="stop", reward=1.0, metadata={"builder": "bench"})


def merged(total: int, messages: bool = False, seed: int = 0) -> SessionResult:
    tok, rng = Tokens(seed), random.Random(seed)
    prompt = tok.ids(max(1, total // 50))
    response: list[int] = []
    mask: list[float] = []
    logprobs: list[float] = []
    while len(prompt) + len(response) < total:
        room = total - len(prompt) - len(response)
        sampled, tool = min(room, rng.randint(100, 500)), min(max(0, room - 500), rng.randint(200, 1000))
        response += tok.ids(sampled) + tok.ids(tool)
        mask += [1.0] * sampled + [0.0] * tool
        logprobs += tok.logprobs(sampled) + [0.0] * tool
    return _result([_trace(prompt, response, mask, logprobs, messages)])


def per_request(total: int, messages: bool = False, seed: int = 0) -> SessionResult:
    tok, rng = Tokens(seed), random.Random(seed)
    history = tok.ids(max(1, min(2000, total // 5)))
    traces, count = [], 0
    while not traces or count + len(history) < total:
        n = max(1, min(rng.randint(100, 500), total - count - len(history)))
        response = tok.ids(n)
        traces.append(_trace(list(history), response, [1.0] * n, tok.logprobs(n), messages))
        count += len(history) + n
        history += response + tok.ids(rng.randint(200, 1000))
    return _result(traces)


def _result(traces: list[Trace]) -> SessionResult:
    return SessionResult(session_id="sess-bench", task_id="task-bench", status=SessionStatus.COMPLETED,
                         reward=1.0, trajectory=Trajectory(traces=traces))


def tokens_in(result: SessionResult) -> int:
    return sum(len(t.prompt_ids) + len(t.response_ids) for t in result.trajectory.traces)


def best_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def measure(result: SessionResult, repeat: int) -> dict[str, float]:
    old, new = pack(result), encode_result(result)
    n = tokens_in(result)
    return {
        "tokens": n,
        "old_bpt": len(old) / n, "new_bpt": len(new) / n,
        "old_enc": best_ms(lambda: pack(result), repeat), "new_enc": best_ms(lambda: encode_result(result), repeat),
        # What consumers did until now: the pydantic model from the msgpack dump.
        "old_dec": best_ms(lambda: SessionResult.model_validate(unpack(old)), repeat),
        "new_dec": best_ms(lambda: decode_result(new), repeat),
        "arrays": best_ms(lambda: decode_arrays(new), max(repeat, 20)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--messages", action="store_true", help="carry the conversation text too")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'shape':<15}{'tokens':>10} | {'bytes/token old':>15}{'new':>7}{'ratio':>7} | "
          f"{'encode ms old':>13}{'new':>8}{'ratio':>7} | {'decode ms old':>13}{'new':>8}{'ratio':>7} | "
          f"{'numpy ms':>9}{'ratio':>9}")
    for shape, make in (("prefix_merging", merged), ("per_request", per_request)):
        for size in sizes:
            m = measure(make(size, args.messages), repeat=3 if size >= 1_000_000 else 5)
            print(f"{shape:<15}{m['tokens']:>10,} | {m['old_bpt']:>15.2f}{m['new_bpt']:>7.2f}"
                  f"{m['old_bpt'] / m['new_bpt']:>6.1f}x | {m['old_enc']:>13.1f}{m['new_enc']:>8.1f}"
                  f"{m['old_enc'] / m['new_enc']:>6.1f}x | {m['old_dec']:>13.1f}{m['new_dec']:>8.1f}"
                  f"{m['old_dec'] / m['new_dec']:>6.1f}x | {m['arrays']:>9.3f}{m['old_dec'] / m['arrays']:>8.0f}x")
    print("decode: old = SessionResult from the msgpack dump, new = decode_result (pydantic), "
          "numpy = decode_arrays (views; ratio against the old decode)")


if __name__ == "__main__":
    main()
