"""Anthropic Messages, both directions (pure: no I/O): routes, detection, token counting and
cache pre-warms, the rendered message (``thinking`` output as a block with a synthesised
signature), its event stream and the error shape. The request's translation (system prompts,
blocks, tools, thinking history, prefill) is in ``anthropic_request``; tools in
``anthropic_tools``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.errors import BadRequest, ContextOverflow, ProxyError
from proxy.providers.anthropic_request import _output_format, to_chat
from proxy.providers.base import (
    Headers,
    Parsed,
    ProviderBase,
    Route,
    Turn,
    new_id,
    root_generate,
    shared_models_route,
    signature_for,
)
from proxy.providers.fields import opt_bool
from proxy.sse import named_event

NAME = "anthropic"
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                504: "timeout_error", 529: "overloaded_error"}


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
