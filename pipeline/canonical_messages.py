"""Chat messages compared as a chat template renders them: the one notion of "the same
message" shared by the proxy's token-in splicing (``proxy/splice.py``: which recorded turn a
request continues) and the prefix-merging builder (``builders/prefix_merging.py``: whether a
harness sent a sampled turn back as it was, or rewrote it).

Role, content (text parts joined, whitespace at the ends aside), tool calls by name and
arguments as JSON values (ids aside; an integral float as its integer, as a JavaScript harness
sends it back), a tool result's name; the reasoning only when asked for. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any


def _text(content: Any) -> Any:
    """Content as compared: text parts joined (a string and a list of text parts render alike),
    other parts (images) as they are; whitespace at the ends aside."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            return "".join(str(p.get("text", "")) for p in content).strip()
        return [p for p in content]
    return content


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return _same_numbers(json.loads(raw))
        except ValueError:
            return raw  # not JSON: compared as the text it is
    return _same_numbers(raw)


def _same_numbers(value: Any) -> Any:
    """JSON values as a JavaScript harness sends them back: it has one number type, so the
    policy's ``30.0`` comes back ``30`` (the six CLIs are Node programs); an integral float is
    compared as the integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _same_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_same_numbers(v) for v in value]
    return value


def canonical(message: dict[str, Any], *, with_reasoning: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.get("role"), "content": _text(message.get("content"))}
    if message.get("tool_calls"):
        out["tool_calls"] = [{"name": (c.get("function") or {}).get("name"),
                              "arguments": _arguments((c.get("function") or {}).get("arguments"))}
                             for c in message["tool_calls"] if isinstance(c, dict)]
    if message.get("role") == "tool" and message.get("name"):
        out["name"] = message["name"]
    if with_reasoning:
        out["reasoning"] = reasoning_of(message)
    return out


def reasoning_of(message: dict[str, Any]) -> str:
    value = message.get("reasoning_content") or message.get("reasoning") or ""
    return value.strip() if isinstance(value, str) else ""


def same_assistant_turn(a: Any, b: Any) -> bool:
    """Whether two assistant messages are the same turn (text and tool calls compared as above;
    reasoning, ids and extra fields a harness adds when echoing aside)."""
    if not isinstance(a, dict) or not isinstance(b, dict) or a.get("role") != "assistant" or b.get("role") != "assistant":
        return False
    return canonical(a) == canonical(b)
