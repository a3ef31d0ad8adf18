"""Sampled text -> assistant message parts, as a vLLM chat server with ``--reasoning-parser qwen3``
and ``--tool-call-parser hermes`` splits it (the template family the reference server renders).

Needed when the engine is asked through a token-id prompt (``/v1/completions``, SGLang's
``/generate``: ``token_prompts.py``): those routes return raw text, so the proxy does the chat
route's parsing itself. Order as in vLLM: the ``<think>…</think>`` block is split off first, then
hermes ``<tool_call>{json}</tool_call>`` blocks are read from the rest. Never raises on model
output: whatever does not parse stays content. ``tests/refserver/test_token_prompts.py`` checks
this module against the reference server's own parser and renderer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

# A closed block, or an unclosed one running to the end of the text (generation can stop right
# after the JSON without the end tag; vLLM's hermes parser takes that too).
_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text: the parsed arguments re-serialised with ensure_ascii=False


@dataclass(frozen=True)
class AssistantText:
    reasoning: str | None  # None: no closing </think> in the text
    content: str | None
    tool_calls: tuple[ParsedCall, ...]


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, rest): the closing tag is what counts (none: ``(None, text)``); reasoning loses
    its ``<think>`` and surrounding whitespace, rest its leading newlines."""
    head, sep, tail = text.partition(THINK_END)
    if not sep:
        return None, text
    head = head.strip()
    if head.startswith(THINK_START):
        head = head[len(THINK_START):].strip()
    return head, tail.lstrip("\n")


def _parse_block(body: str) -> ParsedCall | None:
    try:
        obj = json.loads(body.strip())
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return ParsedCall(name, json.dumps({} if args is None else args, ensure_ascii=False))


def parse_tool_calls(text: str) -> tuple[str | None, list[ParsedCall]]:
    """(content, calls). No block parses: the text unchanged and no calls (the turn is then a
    plain answer, finish_reason ``stop``). Otherwise content is the text before the first block,
    stripped, then the raw text of each block that did not parse, so nothing the model wrote is
    lost; None when that is empty."""
    if TOOL_CALL_START not in text:
        return text, []
    calls: list[ParsedCall] = []
    failed: list[str] = []
    first_start: int | None = None
    for m in _BLOCK_RE.finditer(text):
        if first_start is None:
            first_start = m.start()
        call = _parse_block(m.group(1) if m.group(1) is not None else m.group(2))
        if call is None:
            failed.append(m.group(0))
        else:
            calls.append(call)
    if not calls:
        return text, []
    prefix = text[:first_start].strip()
    content = "\n".join(p for p in [prefix, *(f.strip() for f in failed)] if p)
    return (content or None), calls


def parse_assistant_text(text: str, *, parse_tools: bool) -> AssistantText:
    """The whole split; ``parse_tools`` as vLLM decides it: tools given and tool_choice not "none"."""
    reasoning, content = split_reasoning(text)
    calls: list[ParsedCall] = []
    rest: str | None = content
    if parse_tools:
        rest, calls = parse_tool_calls(content)
    if reasoning is not None and not rest:
        rest = None  # only a think block (+ calls): no content, as vLLM answers
    return AssistantText(reasoning, rest, tuple(calls))
