"""Responses-API input items (pure: no I/O): as chat messages for the engine, and as kept with a
stored response — the request's own input items given ids, ``item_reference`` inputs replaced by
the items they name, and the cursor page ``GET /v1/responses/{id}/input_items`` answers.

A stored response keeps only its own input; the list of a response that continues another
(``previous_response_id``) is that one's list, its output, then this input, as the context the
model saw. The items of every stored response are indexed by id per session, which is what an
``item_reference`` (sent by clients that replay a stored turn by id instead of in full) resolves.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Callable, Iterable, Mapping

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers.base import new_id, text_of

_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
             "custom_tool_call": "ctc", "custom_tool_call_output": "ctco"}
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
MAX_LIMIT = 100
MAX_CHAIN = 10_000  # responses followed back by input_items (a loop guard: the ids are ours)


def references(raw_input: Any) -> list[str]:
    """The ids the request's ``item_reference`` items name (none for a string input)."""
    if not isinstance(raw_input, list):
        return []
    out = []
    for i, item in enumerate(raw_input):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            if not isinstance(item.get("id"), str) or not item["id"]:
                raise BadRequest(f"input[{i}].id must be a non-empty string", param=f"input[{i}].id")
            out.append(item["id"])
    return out


def resolve(raw_input: Any, found: Mapping[str, dict[str, Any]]) -> Any:
    """The input with each ``item_reference`` replaced by the stored item it names; one naming
    no item of this session is the client's 400, as the Responses API answers it."""
    if not isinstance(raw_input, list):
        return raw_input
    references(raw_input)  # each names an id
    out = []
    for i, item in enumerate(raw_input):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            if item["id"] not in found:
                raise BadRequest(f"Item with id '{item['id']}' not found.", param=f"input[{i}]")
            out.append(found[item["id"]])
        else:
            out.append(item)
    return out


def own_input(raw_input: Any) -> list[dict[str, Any]]:
    """The request's input as the items the API lists: each with an id (the client's, or a
    new one), a string message content as one text part."""
    if isinstance(raw_input, str):
        raw_input = [{"type": "message", "role": "user", "content": raw_input}]
    out = []
    for item in raw_input if isinstance(raw_input, list) else []:
        item = dict(item)
        kind = item.setdefault("type", "message")
        if kind == "message" and isinstance(item.get("content"), str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": part, "text": item["content"]}]
        if not isinstance(item.get("id"), str) or not item["id"]:
            item["id"] = new_id(_PREFIXES.get(kind, "item"))
        out.append(item)
    return out


def context_items(stored: dict[str, Any],
                  load: Callable[[str], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The items a stored response was generated from: the chain of responses it continues
    (as far as they are still stored, ``load`` reading one), each one's input and output, then
    its own input."""
    chain, seen = [stored], {stored["response"]["id"]}
    prev = stored["response"].get("previous_response_id")
    while isinstance(prev, str) and prev not in seen and len(chain) < MAX_CHAIN:
        earlier = load(prev)
        if earlier is None:  # deleted or expired: the list starts after it
            break
        chain.append(earlier)
        seen.add(prev)
        prev = earlier["response"].get("previous_response_id")
    out: list[dict[str, Any]] = []
    for i, record in enumerate(reversed(chain)):
        out += record.get("input", [])
        if i < len(chain) - 1:
            out += record["response"].get("output", [])
    return out


def indexed(input_items: Iterable[dict[str, Any]], output: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A stored response's items by id: what later ``item_reference`` inputs may name."""
    return {item["id"]: item for item in [*input_items, *output] if isinstance(item.get("id"), str)}


def page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """One cursor page of a response's input items (``order`` desc by default, ``after`` an item
    id, ``limit`` 1-100, 20 by default)."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadRequest("order must be 'asc' or 'desc'", param="order")
    raw_limit = query.get("limit", "20")
    if not str(raw_limit).isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}", param="limit")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after is not None:
        at = next((i for i, item in enumerate(ordered) if item.get("id") == after), None)
        if at is None:
            raise BadRequest(f"No item with id '{after}' in this response's input items.", param="after")
        ordered = ordered[at + 1:]
    data = ordered[:int(raw_limit)]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(ordered) > len(data)}


# --- input items as chat messages -----------------------------------------------------------

def to_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as chat messages (one turn's output items merge into one assistant message)."""
    out: list[dict[str, Any]] = []
    open_assistant: dict[str, Any] | None = None  # output items of one turn merge into one message
    reasoning: list[str] = []

    def assistant() -> dict[str, Any]:
        nonlocal open_assistant
        if open_assistant is None:
            open_assistant = {"role": "assistant", "content": None}
            out.append(open_assistant)
        if reasoning:
            open_assistant["reasoning_content"] = "".join(reasoning)
            reasoning.clear()
        return open_assistant

    tool_images: list[dict[str, Any]] = []  # images of the tool outputs just read

    def show_tool_images() -> None:
        if tool_images:
            out.append({"role": "user", "content": list(tool_images)})
            tool_images.clear()

    def reasoned_only() -> None:
        nonlocal open_assistant
        if reasoning:  # a turn that only reasoned (cut short, say): still the model's turn, kept
            open_assistant = None
            assistant()["content"] = ""

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{where} must be an object", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind not in ("function_call_output", "custom_tool_call_output"):
            show_tool_images()
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise BadRequest(f"{where}.role must be user, assistant, system or developer", param=f"{where}.role")
            if role == "assistant":
                if open_assistant is not None and open_assistant["content"] is not None:
                    open_assistant = None  # a second text message starts a new assistant turn
                msg = assistant()
                msg["content"] = _text(item.get("content"), where)
                continue
            reasoned_only()
            open_assistant = None
            out.append({"role": "system" if role == "developer" else role, "content": _parts(item.get("content"), where)})
        elif kind in ("function_call", "custom_tool_call"):
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise BadRequest(f"{where} needs 'call_id' and 'name'", param=where)
            if kind == "function_call" and item.get("arguments") is not None and not isinstance(item["arguments"], str):
                raise BadRequest(f"{where}.arguments must be a string (JSON text)", param=f"{where}.arguments")
            args = item.get("arguments") if kind == "function_call" else json.dumps({"input": item.get("input", "")}, ensure_ascii=False)
            msg = assistant()
            msg.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": args or "{}"}})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}.call_id is required", param=f"{where}.call_id")
            open_assistant = None
            output = item.get("output")
            if output is not None and not isinstance(output, (str, list)):
                raise BadRequest(f"{where}.output must be a string or an array of content parts",
                                 param=f"{where}.output")
            # Parts read as a user message's (a file refused, never dropped); chat tool messages
            # cannot hold images: they follow the run of tool messages.
            parts = _parts(output, f"{where}.output") if isinstance(output, list) else []
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": output if isinstance(output, str) else text_of(p for p in parts if p["type"] == "text")})
            tool_images += [p for p in parts if p["type"] == "image_url"]
            continue
        elif kind == "reasoning":
            reasoning.append(_reasoning_text(item))
        else:
            raise UnsupportedFeature(f"{where}: input item type {kind!r} is not supported", param=f"{where}.type")
    show_tool_images()
    reasoned_only()  # (reasoning as the last item was dropped: the prompt lacked the model's own turn)
    return out


def _text(content: Any, where: str) -> str:
    """An assistant message's text; a part of another kind (an image) is refused, not dropped:
    chat assistant messages hold text only, and the prompt would lack what the model was shown."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for j, p in enumerate(content):
            if not isinstance(p, dict) or p.get("type") not in _TEXT_PARTS:
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise UnsupportedFeature(f"{where}.content[{j}]: part type {kind!r} is not supported in an assistant "
                                         "message (text and refusal parts only)", param=f"{where}.content[{j}]")
        return text_of(content, keys=("text", "refusal"))
    raise BadRequest(f"{where}.content must be a string or an array", param=f"{where}.content")


def _parts(content: Any, where: str) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or an array", param=f"{where}.content")
    parts = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": p.get("text", p.get("refusal", ""))})
        elif kind == "input_image" and isinstance(p.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
        else:
            raise UnsupportedFeature(f"{where}.content[{j}]: part type {kind!r} is not supported",
                                     param=f"{where}.content[{j}]")
    return parts


def _reasoning_text(item: dict[str, Any]) -> str:
    enc = item.get("encrypted_content")
    if isinstance(enc, str) and enc:
        try:
            text = json.loads(base64.b64decode(enc))["reasoning"]
            if isinstance(text, str):
                return text
        except (ValueError, KeyError, TypeError):
            pass  # another provider's blob: fall back to the visible text
    # Reasoning is context, not instructions: a malformed content or summary is read as empty.
    content, summary = (v if isinstance(v, list) else [] for v in (item.get("content"), item.get("summary")))
    text = text_of(c for c in content if isinstance(c, dict) and c.get("type") == "reasoning_text")
    return text or text_of(summary)


def encrypt_reasoning(text: str) -> str:
    """Opaque to the harness, readable by us: lets reasoning survive ``store: false``."""
    return base64.b64encode(json.dumps({"reasoning": text}).encode()).decode()
