"""Polar's training filter: a turn whose tool call the engine could not parse -- the model wrote
the call's markup, the parser found no valid call, so the text came back as plain content --
zeroes the reward of its trace: training on it would reward a malformed call."""

from __future__ import annotations

from pipeline.schemas import SessionResult

# What a Qwen/Hermes-style model writes around a call (the reference model's and vLLM's hermes parser).
TOOL_CALL_MARKERS = ("<tool_call>",)


def unparsed_tool_calls(result: SessionResult, markers: tuple[str, ...] = TOOL_CALL_MARKERS) -> list[int]:
    """Indexes of the traces with an assistant turn that holds call markup but no parsed call."""
    bad = []
    for i, trace in enumerate(result.trajectory.traces):
        for message in trace.response_messages:
            content = message.get("content")
            text = content if isinstance(content, str) else ""
            if message.get("role") == "assistant" and not message.get("tool_calls") and \
                    any(m in text for m in markers):
                bad.append(i)
                break
    return bad


def zero_unparsed(result: SessionResult, markers: tuple[str, ...] = TOOL_CALL_MARKERS) -> list[int]:
    """Set the reward of every trace with an unparsed tool call to 0; returns their indexes."""
    bad = unparsed_tool_calls(result, markers)
    for i in bad:
        result.trajectory.traces[i].reward = 0.0
    return bad
