"""prefix_merging speed: a 100-completion session whose prompts grow past 32k tokens (3.2 M ids),
and the cost per prompt id as completions, open conversations and turns grow.

    .venv/bin/python bench/merge_bench.py [--against REV] [--quick] [--json]

``--against REV`` times the builder as of a git revision in the same run, interleaved with this
tree's, so the before/after ratio holds on a loaded machine. ``--quick``: the long conversation at
10 / 100 / 300 turns instead of 1,000 (23 M ids). ``--json``:
the figures with their goals as one JSON line (bench/figures.py), the tables on stderr.

Records hold fresh int objects, as decoded from a blob: no id is the same Python object in two
records, so no comparison is cut short by an identity check that real sessions never get.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import subprocess
import sys
import time
import types
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.figures import emit, figure  # noqa: E402
from pipeline import builders  # noqa: E402
from pipeline.builders import BuildContext, TrajectoryBuilder  # noqa: E402
from pipeline.schemas import CompletionRecord  # noqa: E402

EOT, GEN = 2, [1, 5, 3]
VOCAB = (300, 150_000)  # above CPython's small-int cache, like a real vocabulary


def _fresh(ids: list[int]) -> list[int]:
    return array("q", ids).tolist()


def session(conversations: int, turns: int, base: int, response: int, tool: int, seed: int = 0,
            shared: int = 0) -> list[CompletionRecord]:
    """``conversations`` chains of ``turns`` completions each, interleaved in time (one turn of
    each in turn); every prompt starts with the same ``shared`` ids (a system prompt and tools),
    then ``base - shared`` ids of its own conversation."""
    rng = random.Random(seed)

    def text(n: int) -> list[int]:
        return [rng.randrange(*VOCAB) for _ in range(n)]

    system = text(shared)
    records, clock = [], 0
    histories = [system + text(base - shared) for _ in range(conversations)]
    for _ in range(turns):
        for h in histories:
            body = text(response - 1)
            records.append(CompletionRecord.model_construct(
                completion_id=f"c{clock}", session_id="s", seq=clock, provider="openai_chat", started_at=float(clock),
                prompt_ids=_fresh(h + GEN), response_ids=_fresh(body + [EOT]), response_logprobs=[-0.5] * response,
                response_tokens=None, finish_reason="tool_calls", stop_reason=None, policy_version=None,
                normalized_request={"messages": []}, response_message={"role": "assistant", "content": ""}))
            h += GEN + body + [EOT] + text(tool)
            clock += 1
    return records


def builder_at(rev: str) -> TrajectoryBuilder:
    """``prefix_merging`` as it was at git revision ``rev``, loaded beside this tree's (its module
    may import only what this tree still has), to time both in one run."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:pipeline/builders/prefix_merging.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"prefix_merging_at_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:pipeline/builders/prefix_merging.py", "exec"), module.__dict__)
    builder: TrajectoryBuilder = module.PrefixMergingBuilder(end_of_turn_token_id=EOT)
    return builder


def measure(records: list[CompletionRecord], under_test: list[TrajectoryBuilder], repeat: int = 5,
            conversations: int | None = None) -> list[float]:
    """Median CPU seconds per build for each builder (CPU time: on a shared machine the wall
    clock mostly measures the other tenants), their runs interleaved so that all of them see the
    same cache and memory contention; they must agree on the chains. Each build starts after a
    full collection, so none pays for the garbage or the pending collection another left. (The
    builder pauses automatic collection while it builds; the full pass the new trace objects
    bring on later -- one, where unpaused builds ran about three -- is not in these figures.)"""
    ctx = BuildContext("s", "t", "bench", {})
    times: list[list[float]] = [[] for _ in under_test]
    for _ in range(repeat):
        chains = []
        for builder, runs in zip(under_test, times):
            gc.collect()
            t = time.process_time()
            traj = builder.build(records, ctx)
            runs.append(time.process_time() - t)
            stats = traj.metadata["reconstruction"]
            assert stats["completions_merged"] == stats["completions_total"] - stats["chains_total"] > 0
            assert conversations is None or stats["chains_total"] == conversations
            chains.append([tr.metadata["completion_ids"] for tr in traj.traces])
        assert all(c == chains[0] for c in chains)
    return [statistics.median(runs) for runs in times]


def timed(records: list[CompletionRecord], repeat: int = 5, conversations: int | None = None) -> float:
    [t] = measure(records, [builders.create("prefix_merging", {"end_of_turn_token_id": EOT})], repeat, conversations)
    return t


FLAT = ("<=", 1.2)  # per-id cost flat as the session grows: last / first within 20 %


def _table(title: str, cases: dict[int, tuple[int, list[CompletionRecord]]], under_test: list[TrajectoryBuilder],
           names: list[str], out=sys.stdout) -> tuple[float, dict[int, float]]:
    """Prints one table; returns this tree's ns/id ratio last / first and its ns/id per case."""
    print(f"\n{title}", file=out)
    print(f"{'completions':>11} {'M ids':>6} {'CPU ms':>8} {'us/completion':>14} {'ns/id':>6}"
          + "".join(f" {'ns/id ' + name:>16}" for name in names[1:]), file=out)
    per_id: dict[int, list[float]] = {}
    for n, (conversations, records) in cases.items():
        ids = sum(len(r.prompt_ids) for r in records)
        repeat = max(3, min(41, round(2e6 / ids)))  # small sessions: more runs for a steady median
        times = measure(records, under_test, repeat, conversations)
        per_id[n] = [t * 1e9 / ids for t in times]
        print(f"{n:>11} {ids / 1e6:>6.2f} {times[0] * 1000:>8.1f} {times[0] * 1e6 / n:>14.1f} {per_id[n][0]:>6.1f}"
              + "".join(f" {p:>16.1f}" for p in per_id[n][1:]), file=out)
    first, last = min(cases), max(cases)
    print(f"ns/id {last} / {first} completions: "
          + ", ".join(f"{name} {per_id[last][i] / per_id[first][i]:.2f}x" for i, name in enumerate(names)), file=out)
    return per_id[last][0] / per_id[first][0], {n: v[0] for n, v in per_id.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REV", help="also time prefix_merging as of this git revision")
    parser.add_argument("--quick", action="store_true", help="the long conversation up to 300 turns")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line; tables on stderr")
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout
    under_test = [builders.create("prefix_merging", {"end_of_turn_token_id": EOT})]
    names = ["this tree"]
    if args.against:
        under_test.append(builder_at(args.against))
        names.append(args.against)

    big = session(conversations=1, turns=100, base=28_000, response=40, tool=40)
    ids = sum(len(r.prompt_ids) for r in big)
    times = measure(big, under_test, repeat=9, conversations=1)
    print(f"one conversation of 100 completions (40-token responses, 40-token tool results), prompts "
          f"{len(big[0].prompt_ids)} -> {len(big[-1].prompt_ids)} tokens ({ids / 1e6:.2f} M prompt ids): "
          + ", ".join(f"{name} {t * 1000:.1f} CPU ms" for name, t in zip(names, times)) + " (goal < 100 ms)",
          file=out)

    concurrent, concurrent_ns = _table("concurrent conversations: N completions = N/10 conversations x 10 turns, interleaved (1 / 10 / 100 "
           "open at once),\nall sharing a 1,500-token system prompt; prompts 2k -> 2.7k tokens (goal: flat ns/id, "
           "1000/10 ~1.0-1.2x):",
           {n: (n // 10, session(conversations=n // 10, turns=10, base=2_000, response=40, tool=40, seed=n,
                                 shared=1_500)) for n in (10, 100, 1000)}, under_test, names, out)
    open_chains, open_ns = _table("open conversations: 10 / 100 / 1,000 interleaved conversations x 3 turns, sharing a 1,500-token "
           "system prompt;\nprompts 2k -> 2.2k tokens (the chain search must not grow with the open chains):",
           {n: (n // 3, session(conversations=n // 3, turns=3, base=2_000, response=40, tool=40, seed=n,
                                shared=1_500)) for n in (30, 300, 3000)}, under_test, names, out)
    longest = 300 if args.quick else 1000
    turns, turns_ns = _table("one conversation of N turns, 20-token responses and tool results, prompts from 2k tokens "
                             "(ids grow with N^2, time per id should not):",
                             {n: (1, session(conversations=1, turns=n, base=2_000, response=20, tool=20, seed=n))
                              for n in (10, 100, longest)}, under_test, names, out)
    if args.json:
        emit("merge", [
            figure("CPU time of one build", round(times[0] * 1000, 1), "CPU ms",
                   f"1 conversation x 100 completions, prompts 28k -> 36k tokens ({ids / 1e6:.1f} M prompt ids)",
                   ("<", 100)),
            figure("ns/id, 1000 / 10 completions", round(concurrent, 2), "x",
                   "1 / 10 / 100 interleaved 10-turn conversations, 2k-token prompts, shared 1.5k system prompt", FLAT),
            figure("ns/id, 3000 / 30 completions", round(open_chains, 2), "x",
                   "10 / 100 / 1,000 open 3-turn conversations, 2k-token prompts", FLAT),
            figure(f"ns/id, {longest} / 10 turns", round(turns, 2), "x",
                   f"1 conversation of 10 / 100 / {longest:,} turns, prompts from 2k tokens", FLAT),
        ], big_session_cpu_ms={n: round(t * 1000, 1) for n, t in zip(names, times)},
            ns_per_id={"concurrent": concurrent_ns, "open": open_ns, "turns": turns_ns})


if __name__ == "__main__":
    main()
