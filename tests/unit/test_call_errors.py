"""POSTRUN's summary of a session's failed model calls (workers/stages/postrun.call_errors)."""

from __future__ import annotations

from pipeline.schemas import UpstreamErrorRecord
from workers.stages.postrun import call_errors


def error(kind: str, status: int, at: float) -> UpstreamErrorRecord:
    return UpstreamErrorRecord(session_id="s", provider="openai_chat", started_at=at - 1, finished_at=at,
                               status_code=status, error_type=kind, message=f"{kind} happened")


def test_calls_the_agent_left_are_counted_apart_never_named_as_the_cause():
    """A session stopped at its deadline (or cancelled) while a call sampled has that call's
    ClientGone record, the stop's consequence: not a model-API error that explains it."""
    assert call_errors([error("ClientGone", 499, 5.0)]) == {"calls_aborted": 1}
    summary = call_errors([error("UpstreamTimeout", 504, 1.0), error("ClientGone", 499, 5.0)])
    assert summary == {"calls_aborted": 1, "proxy_errors": {"UpstreamTimeout": 1},
                       "last_proxy_error": "504 UpstreamTimeout: UpstreamTimeout happened"}
    assert call_errors([]) == {}
