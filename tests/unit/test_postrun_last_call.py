"""workers/stages/postrun.last_call_unanswered: whether the session's last admitted model call
gave its agent no answer through a fault of the service -- the case where a harness that exits 0
on a failed stream (gemini_cli) made a COMPLETED reward-0 sample out of a Redis outage."""

from __future__ import annotations

import pytest

from pipeline.schemas.records import CompletionRecord, UpstreamErrorRecord
from workers.stages.postrun import calls_unrecorded, last_call_unanswered


def done(seq: int) -> CompletionRecord:
    return CompletionRecord(completion_id=f"c{seq}", session_id="s", seq=seq, provider="google", started_at=0.0,
                            finished_at=float(seq), upstream_latency_ms=1.0, prompt_ids=[1], response_ids=[2],
                            response_logprobs=[-0.1])


def failed(seq: int | None, status: int, kind: str = "Unavailable") -> UpstreamErrorRecord:
    return UpstreamErrorRecord(session_id="s", seq=seq, provider="google", started_at=0.0, finished_at=float(seq or 0),
                               status_code=status, error_type=kind, message=f"{kind} happened")


@pytest.mark.parametrize("admitted, completions, errors, why", [
    (3, [done(1), done(2), done(3)], [], None),  # every call answered
    (3, [done(1), done(2)], [], "1 admitted model call(s) left no record"),  # Redis away even for the error
    (3, [done(1), done(2)], [failed(3, 503)], "503 Unavailable"),  # the last call failed on our side
    (3, [done(1), done(2)], [failed(3, 502, "UpstreamError")], "502 UpstreamError"),
    (3, [done(1), done(3)], [failed(2, 503)], None),  # failed, then retried and answered
    (3, [done(1), done(3)], [], None),  # an admission whose reply was lost, then retried: a gap, not the last
    (3, [done(1), done(2)], [failed(3, 400, "ContextOverflow")], None),  # the request's own: the agent may end on it
    (3, [done(1), done(2)], [failed(3, 499, "ClientGone")], None),  # the agent left
    (0, [], [], None),  # no call at all (said elsewhere)
    (2, [done(1), done(2)], [failed(None, 503)], None),  # an error record written before seqs were kept
])
def test_the_last_admitted_call_unanswered_by_a_fault_of_the_service(admitted, completions, errors, why):
    got = last_call_unanswered(admitted, completions, errors)
    assert (got is None) if why is None else (got is not None and why in got)


@pytest.mark.parametrize("admitted, completions, errors, gaps", [
    (3, [done(1), done(2), done(3)], [], 0),
    (5, [done(1), done(2), done(4), done(5)], [], 1),  # call 3 sampled, its record lost in a long outage
    (4, [done(1), done(4)], [failed(2, 503)], 1),
    (2, [], [], 2),
])
def test_admitted_calls_without_any_record_are_counted(admitted, completions, errors, gaps):
    assert calls_unrecorded(admitted, completions, errors) == gaps
