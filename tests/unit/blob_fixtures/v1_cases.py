"""The results and trajectories saved as version-1 blobs in this folder.

The ``.msgpack`` files were written by ``pipeline.codec.pack`` as it was before the compact
format (commit ecc4fe2: the pydantic JSON dump, msgpack-packed): they stand for blobs already in
Redis streams and result keys when a deployment upgrades. Never regenerate them with newer code;
``python -m tests.unit.blob_fixtures.v1_cases`` only rewrites them from the same code.

The ``v2_*.msgpack`` files are the same cases as version-2 blobs, written by the version-2 encoder
as it was before the compact version 3 (commit 4fc087c, ``encode_result``/``encode_trajectory``);
never regenerate them either.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.schemas import SessionResult, SessionTiming, TokenLogprob, Trace, Trajectory
from pipeline.status import SessionStatus

HERE = Path(__file__).parent


def _trace(prompt: list[int], response: list[int], mask: list[float], logprobs: list[float],
           tokens: list[str | None] | None = None, **kw) -> Trace:
    tokens = tokens or [None] * len(response)
    return Trace(prompt_ids=prompt, response_ids=response, loss_mask=mask,
                 response_logprobs=[TokenLogprob(token_id=t, logprob=lp, token=s)
                                    for t, lp, s in zip(response, logprobs, tokens)], **kw)


def multi_trace_result() -> SessionResult:
    """Three traces: token strings and messages; an empty response; ids and logprobs at the edges."""
    merged = _trace([151644, 8948, 198], [40, 1079, 151645, 198, 77091], [1.0, 1.0, 1.0, 0.0, 0.0],
                    [-0.25, -1.5e-05, -0.0, 0.0, 0.0], ["I", " am", "<|im_end|>", None, None],
                    prompt_messages=[{"role": "user", "content": "hi"}],
                    response_messages=[{"role": "assistant", "content": "I am"}],
                    tools=[{"type": "function", "function": {"name": "bash"}}], finish_reason="stop",
                    reward=1.0, metadata={"builder": "prefix_merging", "turns": [{"response_start": 0}]})
    empty = _trace([1, 2, 3], [], [], [], finish_reason="length")
    edges = _trace([0, 2**31 - 1, 2**31, 2**40], [2**63 - 1, 7, 0], [0.5, 1.0, 0.0],
                   [float("nan"), float("-inf"), -1e-300])
    return SessionResult(
        session_id="sess-fixture1", task_id="task-fixture", sample_index=2, status=SessionStatus.COMPLETED,
        reward=1.0, trajectory=Trajectory(traces=[merged, empty, edges], metadata={"builder": "prefix_merging"}),
        timing=SessionTiming(registered_at=1700000000.0, finished_at=1700000012.5),
        evaluation={"passed": True}, metadata={"k": "v"})


def empty_result() -> SessionResult:
    return SessionResult(session_id="sess-fixture2", task_id="task-fixture", status=SessionStatus.ERROR,
                         trajectory=Trajectory(status=SessionStatus.ERROR, error="trajectory missing"),
                         error="trajectory missing")


def wide_ids_result() -> SessionResult:
    """Ids msgpack cannot hold: version 1 kept them as decimal text."""
    wide = _trace([2**64, 5], [2**64 + 1], [1.0], [-0.5])
    return SessionResult(session_id="sess-fixture3", task_id="task-fixture", status=SessionStatus.COMPLETED,
                         trajectory=Trajectory(traces=[wide]))


def trajectory() -> Trajectory:
    return multi_trace_result().trajectory


CASES = {
    "v1_result_multi.msgpack": multi_trace_result,
    "v1_result_empty.msgpack": empty_result,
    "v1_result_wide_ids.msgpack": wide_ids_result,
    "v1_trajectory.msgpack": trajectory,
}
V2_CASES = {name.replace("v1_", "v2_"): make for name, make in CASES.items()}

if __name__ == "__main__":
    from pipeline.codec import pack

    for name, make in CASES.items():
        (HERE / name).write_bytes(pack(make()))
