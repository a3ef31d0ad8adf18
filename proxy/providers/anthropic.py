"""Anthropic Messages, both directions (pure: no I/O).

System prompts (string or blocks, and mid-conversation ``role: system`` messages), text and
image blocks, ``tool_use``/``tool_result`` (ids preserved), ``thinking`` blocks (history ->
``reasoning_content``; output -> a thinking block with a synthesised signature), tool choice,
stop sequences and prefill (a final assistant turn) are translated; tools in
``anthropic_tools``. A ``tool_result`` with ``is_error: true`` is marked as failed (``tool_errors``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.errors import BadRequest, ContextOverflow, ProxyError, UnsupportedFeature
from proxy.providers.anthropic_tools import check_tool_results, tool_choice, tools_of
from proxy.providers.base import (
    Headers,
    Parsed,
    ProviderBase,
    Route,
    Turn,
    assistant_history_message,
    data_url,
    new_id,
    root_generate,
    shared_models_route,
    signature_for,
    text_of,
)
from proxy.providers.fields import opt_bool, opt_int, opt_number, require_model, require_object, stop_list
from proxy.providers.tool_errors import marked
from proxy.sse import named_event

NAME = "anthropic"
_THINKING = ("enabled", "adaptive", "disabled")
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                504: "timeout_error", 529: "overloaded_error"}


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
        tool_choice(body["tool_choice"], set())  # a named tool among none: the client's 400
    chat.update(_output_format(body))
    thinking = body.get("thinking")
    if thinking is not None:
        if not (isinstance(thinking, dict) and thinking.get("type") in _THINKING):
            raise BadRequest(f"thinking.type: must be one of {', '.join(_THINKING)}", param="thinking.type")
        if thinking["type"] == "enabled":
            _check_budget(thinking.get("budget_tokens"), max_tokens)
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
                                        and isinstance(b.get("text", ""), str) for b in system):
        return [{"role": "system", "content": "\n".join(b.get("text", "") for b in system)}]
    raise BadRequest("system: must be a string or a list of text blocks", param="system")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    raise BadRequest(f"{where}.content: must be a string or a list of content blocks", param=f"{where}.content")


def _image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    src = block.get("source") or {}
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


def _user_part(block: dict[str, Any], where: str) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _string(block, "text", where)}
    if kind == "image":
        return _image_part(block, where)
    if kind == "document" and (block.get("source") or {}).get("type") == "text":
        return {"type": "text", "text": block["source"].get("data", "")}
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


def stop_reason(turn: Turn) -> tuple[str, str | None]:
    if turn.finish_reason == "tool_calls":
        return "tool_use", None
    if turn.finish_reason == "length":
        return "max_tokens", None
    if turn.finish_reason == "content_filter":
        return "refusal", None
    if turn.stopped_on_sequence:
        return "stop_sequence", turn.stop_reason
    return "end_turn", None


def content_blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.reasoning:
        blocks.append({"type": "thinking", "thinking": turn.reasoning, "signature": signature_for(turn.reasoning)})
    if turn.content or not (turn.tool_calls or turn.reasoning):
        blocks.append({"type": "text", "text": turn.content or ""})
    for c in turn.tool_calls:
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments_object()})
    return blocks


class Anthropic(ProviderBase):
    name = NAME

    def match(self, method: str, path: str) -> Route | None:
        if method == "POST" and path.endswith("/messages/count_tokens"):
            return Route("count_tokens", NAME)
        if method == "POST" and path in ("/v1/messages", "/messages"):
            return Route("generate", NAME)
        return shared_models_route(method, path, NAME) or root_generate(method, path, NAME)

    def claims_headers(self, headers: Headers) -> bool:
        return bool(headers.get("anthropic-version") or headers.get("anthropic-beta"))

    def claims_path(self, path: str) -> bool:
        return path.startswith(("/v1/messages/", "/messages/", "/v1/complete"))

    def claims_body(self, body: Any) -> bool:
        """Messages with something only Anthropic's API has (system, stop_sequences, content blocks
        of tool_use / tool_result / thinking); plain messages are OpenAI Chat's."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return False
        if "system" in body or "stop_sequences" in body:
            return True
        return any(isinstance(m, dict) and isinstance(m.get("content"), list)
                   and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking")
                           for b in m["content"]) for m in body["messages"])

    def models(self, models: list[dict[str, Any]]) -> dict[str, Any]:
        data = [self.model(m) for m in models]
        return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}

    def model(self, card: dict[str, Any]) -> dict[str, Any]:
        return {"type": "model", "id": card["id"], "display_name": card["id"], "created_at": "1970-01-01T00:00:00Z",
                "max_input_tokens": card.get("max_model_len")}

    def count_tokens_chat(self, body: Any, route: Route, **context: Any) -> dict[str, Any]:
        return to_chat(body, need_max_tokens=False)[0]

    def count_tokens_response(self, count: int) -> dict[str, Any]:
        return {"input_tokens": count}

    # ``max_tokens: 0`` anywhere (a tool input may hold one too): prewarm_chat decides.
    prewarm_hint: re.Pattern[bytes] | None = re.compile(rb'"max_tokens"\s*:\s*-?0\s*[,}]')

    def prewarm_chat(self, body: Any) -> dict[str, Any] | None:
        """``max_tokens: 0`` populates Anthropic's prompt cache without generating a response. The
        engine caches prefixes by itself, so here it is the call's prompt counted; what the API
        refuses with it (a stream, extended thinking, structured output) is refused alike."""
        if not isinstance(body, dict) or type(body.get("max_tokens")) is not int or body["max_tokens"] != 0:
            return None
        if opt_bool(body, "stream") is True:
            raise BadRequest("max_tokens: 0 (a cache pre-warm) cannot be streamed: set stream to false",
                             param="stream")
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
            raise BadRequest("max_tokens: 0 (a cache pre-warm) cannot be combined with extended thinking (thinking)",
                             param="thinking")
        rest = {k: v for k, v in body.items() if k != "max_tokens"}
        if _output_format(rest):
            raise BadRequest("max_tokens: 0 (a cache pre-warm) cannot be combined with structured output (output_config.format)",
                             param="output_config.format")
        return to_chat(rest, need_max_tokens=False)[0]

    def prewarm_response(self, body: dict[str, Any], count: int) -> dict[str, Any]:
        return {"id": new_id("msg"), "type": "message", "role": "assistant", "model": body.get("model"),
                "content": [], "stop_reason": "max_tokens", "stop_sequence": None,
                "usage": {"input_tokens": count, "output_tokens": 0, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0}}

    def parse(self, body: Any, **context: Any) -> Parsed:
        chat, extra = to_chat(body)
        extra["message_id"] = new_id("msg")  # fixed now: a stream may announce it before the answer
        return Parsed(chat=chat, stream=opt_bool(body, "stream") is True, model=body.get("model"), extra=extra)

    def render(self, turn: Turn, parsed: Parsed) -> dict[str, Any]:
        reason, sequence = stop_reason(turn)
        return {"id": parsed.extra["message_id"], "type": "message", "role": "assistant",
                "model": parsed.model, "content": content_blocks(turn), "stop_reason": reason,
                "stop_sequence": sequence, "usage": usage(turn)}

    def stream(self, parsed: Parsed) -> "AnthropicStream":
        return AnthropicStream(parsed)

    def error(self, err: ProxyError) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
        error: dict[str, Any] = {"type": kind, "message": error_message(err)}
        if err.details:
            error["details"] = err.details
        return {"type": "error", "error": error, "request_id": err.request_id}


def error_message(err: ProxyError) -> str:
    """Anthropic's own wording of a context overflow: Claude Code compacts on a message starting
    "prompt is too long", and lowers max_tokens on the "exceed context limit" one."""
    if not isinstance(err, ContextOverflow):
        return err.message
    if not err.prompt_fits:
        return f"prompt is too long: {err.prompt_tokens} tokens > {err.max_prompt_tokens} maximum"
    return (f"input length and `max_tokens` exceed context limit: {err.prompt_tokens} + {err.output_tokens} > "
            f"{err.context_length}, decrease input length or `max_tokens` and try again")


def usage(turn: Turn) -> dict[str, Any]:
    return {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


class AnthropicStream:
    """``message_start`` … ``message_stop`` with ``event:`` lines (Claude Code needs them)."""

    content_type = "text/event-stream"

    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.message_id: str | None = None

    def head(self, turn: Turn | None = None) -> list[bytes]:
        self.message_id = self.parsed.extra["message_id"]
        u = usage(turn) if turn else {"input_tokens": 0, "output_tokens": 0,
                                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        u["output_tokens"] = min(u["output_tokens"], 1)
        start = {"type": "message_start", "message": {
            "id": self.message_id, "type": "message", "role": "assistant", "model": self.parsed.model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": u}}
        return [named_event("message_start", start), named_event("ping", {"type": "ping"})]

    def keepalive(self) -> bytes | None:
        return named_event("ping", {"type": "ping"})

    def body(self, response: dict[str, Any], turn: Turn) -> list[bytes]:
        out = [] if self.message_id is not None else self.head(turn)
        for i, block in enumerate(response["content"]):
            out += _block_events(i, block)
        out.append(named_event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": response["stop_reason"], "stop_sequence": response["stop_sequence"]},
            "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens}}))
        out.append(named_event("message_stop", {"type": "message_stop"}))
        return out

    def error(self, err: ProxyError) -> list[bytes]:
        return [named_event("error", Anthropic().error(err))]


def _block_events(i: int, block: dict[str, Any]) -> list[bytes]:
    def ev(kind: str, **payload: Any) -> bytes:
        return named_event(kind, {"type": kind, "index": i, **payload})

    kind = block["type"]
    if kind == "thinking":
        return [ev("content_block_start", content_block={"type": "thinking", "thinking": "", "signature": ""}),
                ev("content_block_delta", delta={"type": "thinking_delta", "thinking": block["thinking"]}),
                ev("content_block_delta", delta={"type": "signature_delta", "signature": block["signature"]}),
                ev("content_block_stop")]
    if kind == "tool_use":
        return [ev("content_block_start", content_block={"type": "tool_use", "id": block["id"],
                                                         "name": block["name"], "input": {}}),
                ev("content_block_delta", delta={"type": "input_json_delta",
                                                 "partial_json": json.dumps(block["input"], ensure_ascii=False)}),
                ev("content_block_stop")]
    return [ev("content_block_start", content_block={"type": "text", "text": ""}),
            ev("content_block_delta", delta={"type": "text_delta", "text": block["text"]}),
            ev("content_block_stop")]
