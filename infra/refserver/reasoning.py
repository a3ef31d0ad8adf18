"""Reasoning split in the manner of vLLM's ``qwen3`` reasoning parser.

Qwen3-style models think inside ``<think> ... </think>`` before answering. The closing tag is what
counts: without it nothing is treated as reasoning (the model may not think at all, e.g. when the
prompt pre-filled an empty think block, or it was cut off mid-thought). Pure function, never raises.
"""

from __future__ import annotations

THINK_START = "<think>"
THINK_END = "</think>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Model output -> (reasoning, rest).

    With a ``</think>``: reasoning is the text before it without a leading ``<think>`` and
    without surrounding whitespace; rest is the text after it without leading newlines (the
    template puts a blank line between the think block and the answer). Otherwise
    ``(None, text)`` with text unchanged.
    """
    head, sep, tail = text.partition(THINK_END)
    if not sep:
        return None, text
    head = head.strip()
    if head.startswith(THINK_START):
        head = head[len(THINK_START):].strip()
    return head, tail.lstrip("\n")
