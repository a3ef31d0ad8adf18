"""Anthropic Messages request -> OpenAI Chat request for the engine (pure: no I/O): the
translation ``anthropic.Anthropic`` parses, counts and pre-warms with. Kept apart from
``anthropic`` (routes, detection, the rendered message, its event stream, errors) so the
request side is read in one file.

System prompts (string or blocks, and mid-conversation ``role: system`` messages), text and
image blocks, ``tool_use``/``tool_result`` (ids preserved), ``thinking`` blocks (history ->
``reasoning_content``), tool choice, stop sequences, output formats and prefill (a final
assistant turn) are translated; tools in ``anthropic_tools``. A ``tool_result`` with
``is_error: true`` is marked as failed (``tool_errors``).
"""

from __future__ import annotations

import json
from typing import Any

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers.anthropic_tools import check_tool_results, tool_choice, tools_of
from proxy.providers.base import assistant_history_message, data_url, text_of
from proxy.providers.fields import opt_bool, opt_int, opt_number, require_model, require_object, stop_list
from proxy.providers.tool_errors import marked

_THINKING = ("enabled", "adaptive", "disabled")


def to_chat(body: Any, *, need_max_tokens: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    body = require_object(body)
    if body.get("thread") is not None:
        # Server-held threads (a beta) send only each turn's new messages. Refused with the code
        # on which the SDK's tool runner sends the whole conversation without one: every call
        # then carries the full prompt, as recording it needs.
        err = UnsupportedFeature("message threads are not supported: send the full conversation without "
                                 "`thread`", param="thread")
        err.details = {"error_code": "thread_unsupported_request"}
        raise err
    if body.get("mcp_servers"):
        raise UnsupportedFeature("mcp_servers: remote MCP servers are not supported (the engine calls no "
                                 "server; run MCP in the agent)", param="mcp_servers")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise BadRequest("metadata: Input should be a valid dictionary", param="metadata")
    model = require_model(body, "model: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    chat: dict[str, Any] = {"model": model, "messages": _system(body.get("system"))}
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise BadRequest(f"messages.{i}.role: must be 'user', 'assistant' or 'system'", param=f"messages.{i}.role")
        chat["messages"].extend(_message(m, i))
    check_tool_results(messages)
    if messages[-1].get("role") == "assistant":  # prefill: continue the given assistant text
        chat["continue_final_message"], chat["add_generation_prompt"] = True, False
    max_tokens = opt_int(body, "max_tokens", minimum=1)
    if max_tokens is None and need_max_tokens:
        raise BadRequest("max_tokens: Field required", param="max_tokens")
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    for src, dst in (("temperature", "temperature"), ("top_p", "top_p")):
        if opt_number(body, src, within=(0.0, 1.0)) is not None:  # Anthropic's ranges (vLLM's are wider)
            chat[dst] = body[src]
    if (top_k := opt_int(body, "top_k", minimum=1)) is not None:
        chat["top_k"] = top_k
    if isinstance(body.get("stop_sequences"), str):  # Anthropic's 400 (OpenAI's `stop` may be one string)
        raise BadRequest("stop_sequences: Input should be a valid list", param="stop_sequences")
    stops = stop_list(body.get("stop_sequences"), "stop_sequences")
    if stops:
        chat["stop"] = stops
    tools, dropped = tools_of(body.get("tools"))
    if tools:
        chat["tools"] = tools
        chat.update(tool_choice(body.get("tool_choice"), {t["function"]["name"] for t in tools}))
    elif body.get("tool_choice") is not None and not body.get("tools"):  # (server tools only: theirs to choose)
        # A named tool among none, or "any" with no tool at all: the client's 400 (a forced call
        # that cannot be made would otherwise be answered in text as if never asked for).
        if tool_choice(body["tool_choice"], set()).get("tool_choice") == "required":
            raise BadRequest("tool_choice: 'any' forces a tool call, but no tools were provided", param="tool_choice")
    chat.update(_output_format(body))
    thinking = body.get("thinking")
    if thinking is not None:
        if not (isinstance(thinking, dict) and thinking.get("type") in _THINKING):
            raise BadRequest(f"thinking.type: must be one of {', '.join(_THINKING)}", param="thinking.type")
        if thinking["type"] == "enabled":
            _check_budget(thinking.get("budget_tokens"), max_tokens)
        forced = body.get("tool_choice")
        if thinking["type"] != "disabled" and isinstance(forced, dict) and forced.get("type") in ("any", "tool"):
            # Anthropic's 400: a forced tool call would be sampled with thinking the model may not do
            raise BadRequest("Thinking may not be enabled when tool_choice forces tool use.", param="tool_choice")
        chat["chat_template_kwargs"] = {"enable_thinking": thinking["type"] != "disabled"}
    return chat, {"dropped_tools": dropped, "thinking": isinstance(thinking, dict) and thinking.get("type") != "disabled"}


def _check_budget(budget: Any, max_tokens: int | None) -> None:
    """What Anthropic refuses of an enabled thinking budget (a harness relying on it must not
    pass here and fail at the vendor)."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
        raise BadRequest("thinking.enabled.budget_tokens: must be an integer of at least 1024",
                         param="thinking.budget_tokens")
    if max_tokens is not None and budget >= max_tokens:
        raise BadRequest("`max_tokens` must be greater than `thinking.budget_tokens`", param="max_tokens")


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None or system == "" or system == []:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list) and all(isinstance(b, dict) and b.get("type", "text") == "text"
                                        and isinstance(b.get("text"), str) for b in system):
        return [{"role": "system", "content": "\n".join(b["text"] for b in system)}]
    raise BadRequest("system: must be a string or a list of text blocks", param="system")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    raise BadRequest(f"{where}.content: must be a string or a list of content blocks", param=f"{where}.content")


def _image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    src = block["source"] if isinstance(block.get("source"), dict) else {}
    if src.get("type") == "base64" and isinstance(src.get("data"), str):
        return {"type": "image_url", "image_url": {"url": data_url(src.get("media_type", "image/png"), src["data"])}}
    if src.get("type") == "url" and isinstance(src.get("url"), str):
        return {"type": "image_url", "image_url": {"url": src["url"]}}
    raise UnsupportedFeature(f"{where}: image source {src.get('type')!r} is not supported", param=where)


def _string(block: dict[str, Any], key: str, where: str) -> str:
    value = block.get(key, "")
    if not isinstance(value, str):
        raise BadRequest(f"{where}.{key}: Input should be a valid string", param=f"{where}.{key}")
    return value


def _search_result_text(block: dict[str, Any], where: str) -> str:
    """A search result block (RAG with citations) as the model reads it: title, source, text."""
    content = block.get("content")
    if not isinstance(content, list) or not all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        raise BadRequest(f"{where}.content: a search_result holds a list of text blocks", param=f"{where}.content")
    head = [v for v in (block.get("title"), block.get("source")) if isinstance(v, str) and v]
    return "\n".join(head + [_string(b, "text", where) for b in content])


def _document_text(block: dict[str, Any], where: str) -> str:
    """A plain-text document as the model reads it: its title and context (what the caller
    says the document is, which the vendor's model is shown too) before its text."""
    head = [_string(block, k, where) for k in ("title", "context") if block.get(k) is not None]
    return "\n".join([h for h in head if h] + [_string(block["source"], "data", f"{where}.source")])


def _user_part(block: dict[str, Any], where: str) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _string(block, "text", where)}
    if kind == "image":
        return _image_part(block, where)
    if kind == "document" and isinstance(block.get("source"), dict) and block["source"].get("type") == "text":
        return {"type": "text", "text": _document_text(block, where)}
    if kind == "search_result":
        return {"type": "text", "text": _search_result_text(block, where)}
    if kind in ("thinking", "redacted_thinking"):
        return None
    raise UnsupportedFeature(f"{where}: content block type {kind!r} is not supported", param=where)


def _message(m: dict[str, Any], i: int) -> list[dict[str, Any]]:
    role, where = m["role"], f"messages.{i}"
    blocks = _blocks(m.get("content"), where)
    if role == "system":
        return [{"role": "system", "content": text_of(blocks)}]
    if role == "assistant":
        return [_assistant(blocks, where)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    images_after_tools: list[dict[str, Any]] = []
    for j, b in enumerate(blocks):
        if b.get("type") == "tool_result":
            if parts:
                out.append({"role": "user", "content": parts})
                parts = []
            text, images = _tool_result(b, f"{where}.content.{j}")
            out.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": text})
            images_after_tools += images
        else:
            part = _user_part(b, f"{where}.content.{j}")
            if part is not None:
                parts.append(part)
    if images_after_tools:  # chat tool messages cannot hold images: show them right after
        parts = images_after_tools + parts
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _tool_result(block: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    if not isinstance(block.get("tool_use_id"), str):
        raise BadRequest(f"{where}.tool_use_id: Field required", param=f"{where}.tool_use_id")
    failed = opt_bool(block, "is_error", param=f"{where}.is_error") is True
    content = block.get("content")
    if content is None or isinstance(content, str):
        return marked(content or "", failed), []
    # Every block read as in a user message (text documents and search results as text, images
    # shown after the tool messages); one the engine cannot take is refused, never dropped.
    parts = [p for j, b in enumerate(_blocks(content, where)) if (p := _user_part(b, f"{where}.content.{j}"))]
    return (marked(text_of(p for p in parts if p["type"] == "text"), failed),
            [p for p in parts if p["type"] == "image_url"])


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    text, reasoning, calls = [], [], []
    for j, b in enumerate(blocks):
        kind = b.get("type")
        if kind == "text":
            text.append(_string(b, "text", f"{where}.content.{j}"))
        elif kind == "thinking":
            reasoning.append(_string(b, "thinking", f"{where}.content.{j}"))
        elif kind == "tool_use":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str):
                raise BadRequest(f"{where}: tool_use blocks need 'id' and 'name'", param=where)
            if b.get("input") is not None and not isinstance(b["input"], dict):
                raise BadRequest(f"{where}.content.{j}.input: Input should be a valid dictionary",
                                 param=f"{where}.content.{j}.input")
            calls.append({"id": b["id"], "type": "function",
                          "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)}})
        elif kind in ("tool_result", "image", "document"):  # the user's blocks, misplaced
            raise BadRequest(f"{where}.content.{j}: a {kind} block belongs in a user message",
                             param=f"{where}.content.{j}.type")
        # other blocks (redacted thinking, server tool calls and results) are the vendor's: skipped
    return assistant_history_message(text, reasoning, calls)


def _output_format(body: dict[str, Any]) -> dict[str, Any]:
    """Structured output (``output_config.format``, or the beta's ``output_format``) as the
    engine's guided JSON; ``effort`` has no engine counterpart and is ignored."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise BadRequest("output_config: must be an object", param="output_config")
    fmt = (config or {}).get("format") or body.get("output_format")
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise BadRequest("output_config.format: must be {type: 'json_schema', schema: {...}}",
                         param="output_config.format")
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}}
