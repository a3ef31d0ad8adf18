"""Hermes-style tool-call parsing, the format Qwen2.5 emits and vLLM's ``hermes`` parser reads.

A completion such as::

    I will look around.
    <tool_call>
    {"name": "bash", "arguments": {"command": "ls"}}
    </tool_call>

becomes ``content="I will look around."`` plus one OpenAI-shaped tool call. Pure functions, no
model or HTTP knowledge, and never raises on model output: anything unparseable stays text.
"""

from __future__ import annotations

import json
import re
import uuid

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

# A closed block, or an unclosed one running to the end of the text (generation can stop right
# after the JSON without emitting the end tag; vLLM's hermes parser accepts that too).
_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)


def new_tool_call_id() -> str:
    """vLLM's default id shape for tool calls: ``chatcmpl-tool-`` + 32 hex digits."""
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def _parse_block(body: str) -> dict | None:
    try:
        obj = json.loads(body.strip())
    except (ValueError, RecursionError):  # a model can nest brackets past the parser's depth
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if args is None:
        args = {}
    # Arguments always travel as a JSON string in the OpenAI schema; keep non-ASCII readable
    # like vLLM does (ensure_ascii=False).
    return {
        "id": new_tool_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


def parse_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """Split model output into (content, tool_calls).

    - No ``<tool_call>`` block parses: ``(text, [])`` with text unchanged, as vLLM returns it.
    - Otherwise content is the text before the first block, stripped, followed by the raw text
      of any block that failed to parse (so nothing the model wrote silently disappears);
      ``None`` when that is empty.
    """
    if TOOL_CALL_START not in text:
        return text, []
    calls: list[dict] = []
    failed: list[str] = []
    first_start: int | None = None
    for m in _BLOCK_RE.finditer(text):
        if first_start is None:
            first_start = m.start()
        body = m.group(1) if m.group(1) is not None else m.group(2)
        call = _parse_block(body)
        if call is None:
            failed.append(m.group(0))
        else:
            calls.append(call)
    if not calls:
        return text, []
    prefix = text[:first_start].strip()
    content = "\n".join(p for p in [prefix, *(f.strip() for f in failed)] if p)
    return (content or None), calls
