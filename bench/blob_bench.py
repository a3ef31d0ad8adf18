"""Result blobs: version 1 (the pydantic dump, msgpack-packed), version 2 (the "aligned" layout:
plain packed arrays, read in place) and version 3 (the "compact" layout, the default) on 10k /
100k / 1M-token trajectories of both builders' shapes, in one run.

    .venv/bin/python bench/blob_bench.py [--sizes 10000,100000,1000000] [--messages] [--quick] [--json]

Shapes (ids uniform over a 151,936-token vocabulary, logprobs float32 values as engines give):
- ``prefix_merging``: one merged conversation, 2 % prompt, then sampled turns (mask 1, real
  logprobs) and tool output between them (mask 0, synthetic logprob 0.0), about 1 : 2.
- ``per_request``: the default builder: one trace per model call, each prompt the previous one
  plus its response and a tool output.

Bytes per token = blob bytes / (prompt + response ids of every trace). ``--messages`` adds the
conversation text (about 4 characters per token) to every trace, as real results carry it;
without it the blobs hold token data only. "numpy" is ``decode_arrays`` with every array of every
trace read (ids, mask, logprobs, sampled logprobs): the expansion the compact layout needs
included. Times are the best of a few runs.

``--quick``: the goals' case only (the compact layout of a merged 1M-token trace; no pydantic
decode). ``--json``: the figures with their goals as one JSON line (bench/figures.py), the table
on stderr. Goals (issue 12): <= 4.5 bytes/token and < 10 ms to numpy, v3, merged 1M tokens.
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

from bench.figures import emit, figure  # noqa: E402
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


def read_all(blob: bytes) -> int:
    """Every array of every trace, as a trainer building tensors would read them."""
    n = 0
    for t in decode_arrays(blob).traces:
        for a in (t.prompt_ids, t.response_ids, t.loss_mask, t.response_logprobs, t.sampled_logprobs):
            n += a.size
    return n


VERSIONS = ("v1", "v2", "v3")


def measure(result: SessionResult, repeat: int, versions: tuple[str, ...] = VERSIONS,
            pydantic: bool = True) -> dict[str, Any]:
    encoders = {"v1": lambda: pack(result), "v2": lambda: encode_result(result, "aligned"),
                "v3": lambda: encode_result(result, "compact")}
    n = tokens_in(result)
    out: dict[str, Any] = {"tokens": n}
    for v in versions:
        blob = encoders[v]()
        out[v] = {
            "bpt": len(blob) / n,
            "enc": best_ms(encoders[v], repeat),
            # v1: what consumers did before v2, the pydantic model from the msgpack dump.
            "dec": None if not pydantic else best_ms((lambda b=blob: SessionResult.model_validate(unpack(b)))
                                                     if v == "v1" else (lambda b=blob: decode_result(b)), repeat),
            "numpy": best_ms(lambda b=blob: read_all(b), max(repeat, 10)),
        }
    return out


GOAL_SIZE = 1_000_000


def figures(merged_1m: dict[str, Any], messages: bool) -> list[dict[str, Any]]:
    what = f"merged trace, {merged_1m['tokens']:,} tokens" + (", with message text" if messages else "")
    v3 = merged_1m["v3"]
    out = [figure("v3 bytes per token", round(v3["bpt"], 2), "B/token", what, ("<=", 4.5)),
           figure("v3 decode to numpy, every array read", round(v3["numpy"], 2), "ms", what, ("<", 10)),
           figure("v3 encode", round(v3["enc"], 1), "ms", what)]
    if "v1" in merged_1m:
        out.append(figure("v1 / v3 size", round(merged_1m["v1"]["bpt"] / v3["bpt"], 1), "x", what))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--messages", action="store_true", help="carry the conversation text too")
    parser.add_argument("--quick", action="store_true", help="only v3 of a merged 1M-token trace (the goals)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line; the table on stderr")
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout
    sizes = [GOAL_SIZE] if args.quick else [int(s) for s in args.sizes.split(",")]
    shapes = (("prefix_merging", merged),) if args.quick else (("prefix_merging", merged), ("per_request", per_request))
    versions = ("v3",) if args.quick else VERSIONS
    cols = ("bytes/token", "encode ms", "decode ms", "numpy ms")
    print(f"{'shape':<15}{'tokens':>10} | " + " | ".join(f"{c + ' ' + '/'.join(versions):>27}" for c in cols)
          + " | v1/v3 bytes", file=out)
    measured: dict[tuple[str, int], dict[str, Any]] = {}
    for shape, make in shapes:
        for size in sizes:
            m = measured[shape, size] = measure(make(size, args.messages), repeat=3 if size >= 1_000_000 else 5,
                                                versions=versions, pydantic=not args.quick)
            cells = []
            for key, fmt in (("bpt", "{:.2f}"), ("enc", "{:.1f}"), ("dec", "{:.1f}"), ("numpy", "{:.2f}")):
                cells.append(f"{' / '.join('-' if m[v][key] is None else fmt.format(m[v][key]) for v in versions):>27}")
            ratio = f"{m['v1']['bpt'] / m['v3']['bpt']:>8.1f}x" if "v1" in m else "-"
            print(f"{shape:<15}{m['tokens']:>10,} | " + " | ".join(cells) + f" | {ratio}", file=out)
    print("v1: the pydantic dump packed (decode: SessionResult from it; numpy: arrays from it); v2: aligned "
          "layout; v3: compact layout (the default). decode = decode_result (pydantic); numpy = decode_arrays "
          "with every array read", file=out)
    if args.json:
        goal_case = measured.get(("prefix_merging", GOAL_SIZE))
        if goal_case is None:
            raise SystemExit(f"--json reports the goals, measured at {GOAL_SIZE:,} tokens: include it in --sizes")
        emit("blobs", figures(goal_case, args.messages),
             measured=[{"shape": shape, "size": size, **m} for (shape, size), m in measured.items()])


if __name__ == "__main__":
    main()
