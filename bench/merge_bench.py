"""prefix_merging speed: a 100-completion session whose prompts grow past 32k tokens (3.2 M ids),
and how the cost scales with the number of completions.

    .venv/bin/python bench/merge_bench.py
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import builders  # noqa: E402
from pipeline.builders import BuildContext  # noqa: E402
from pipeline.schemas import CompletionRecord  # noqa: E402

EOT, GEN = 2, [1, 5, 3]


def session(conversations: int, turns: int, base: int, response: int, tool: int, seed: int = 0) -> list[CompletionRecord]:
    """``conversations`` independent chains of ``turns`` completions each, interleaved in time."""
    rng = random.Random(seed)
    records, clock = [], 0
    histories = [[rng.randrange(10, 4000) for _ in range(base)] for _ in range(conversations)]
    for _ in range(turns):
        for h in histories:
            body = [rng.randrange(10, 4000) for _ in range(response - 1)]
            prompt = h + GEN
            records.append(CompletionRecord.model_construct(
                completion_id=f"c{clock}", session_id="s", seq=clock, provider="openai_chat", started_at=float(clock),
                prompt_ids=prompt, response_ids=body + [EOT], response_logprobs=[-0.5] * response,
                response_tokens=None, finish_reason="tool_calls", stop_reason=None, policy_version=None,
                normalized_request={"messages": []}, response_message={"role": "assistant", "content": ""}))
            h += GEN + body + [EOT] + [rng.randrange(10, 4000) for _ in range(tool)]
            clock += 1
    return records


def timed(records: list[CompletionRecord], repeat: int = 5) -> float:
    builder = builders.create("prefix_merging", {"end_of_turn_token_id": EOT})
    ctx = BuildContext("s", "t", "bench", {})
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        traj = builder.build(records, ctx)
        times.append(time.perf_counter() - t)
    stats = traj.metadata["reconstruction"]
    assert stats["completions_merged"] == stats["completions_total"] - stats["chains_total"] > 0
    return statistics.median(times)


def main() -> None:
    big = session(conversations=1, turns=100, base=28_000, response=40, tool=40)
    ids = sum(len(r.prompt_ids) for r in big)
    t = timed(big)
    print(f"100 completions, prompts {len(big[0].prompt_ids)} -> {len(big[-1].prompt_ids)} tokens "
          f"({ids / 1e6:.1f} M prompt ids): {t * 1000:.1f} ms (goal < 100 ms)")
    print("\nscaling (conversations of 10 turns, prompts 2k -> 2.8k tokens):")
    print(f"{'completions':>11} {'M ids':>6} {'ms':>8} {'us/completion':>14} {'ns/id':>6}")
    for n in (10, 100, 1000):
        recs = session(conversations=n // 10, turns=10, base=2_000, response=40, tool=40, seed=n)
        ids = sum(len(r.prompt_ids) for r in recs)
        t = timed(recs, repeat=3)
        print(f"{n:>11} {ids / 1e6:>6.2f} {t * 1000:>8.1f} {t * 1e6 / n:>14.1f} {t * 1e9 / ids:>6.1f}")
    print("\nscaling (one conversation of N turns; ids grow with N^2, time per id should not):")
    for n in (10, 100, 1000):
        recs = session(conversations=1, turns=n, base=2_000, response=20, tool=20, seed=n)
        ids = sum(len(r.prompt_ids) for r in recs)
        t = timed(recs, repeat=3)
        print(f"{n:>11} {ids / 1e6:>6.2f} {t * 1000:>8.1f} {t * 1e6 / n:>14.1f} {t * 1e9 / ids:>6.1f}")


if __name__ == "__main__":
    main()
