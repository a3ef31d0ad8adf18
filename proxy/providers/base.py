"""What every provider module shares: the parsed request, the engine's assistant turn in a
provider-neutral shape, and the small helpers the four translations have in common.

A provider is pure (no I/O): ``parse`` turns the harness's request into an OpenAI Chat request
for the engine, ``render`` turns the engine's answer into the harness's response, ``stream``
writes the same answer as the harness's own event grammar, ``error`` renders a ProxyError in
the harness's error shape.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from proxy.errors import BadRequest, ProxyError


@dataclass
class Parsed:
    """A harness request, translated."""

    chat: dict[str, Any]  # OpenAI Chat Completions request for the engine (no capture fields)
    stream: bool
    model: str | None  # the model name the harness asked for (echoed back)
    extra: dict[str, Any] = field(default_factory=dict)  # provider-specific context


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as the engine produced it

    def arguments_object(self) -> Any:
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return {}  # malformed arguments from the model: the harness gets an empty object
        return value if isinstance(value, dict) else {"value": value}


@dataclass
class Turn:
    """The assistant turn the engine produced, independent of any provider's format."""

    id: str
    model: str | None
    created: int
    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish_reason: str  # stop | length | tool_calls | content_filter | abort
    stop_reason: Any  # matched stop string (or token id), None for end of turn
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[dict[str, Any]] | None = None  # chat-style logprobs.content entries

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def stopped_on_sequence(self) -> bool:
        return self.finish_reason == "stop" and isinstance(self.stop_reason, str)


def turn_from_chat(upstream: dict[str, Any], model: str | None) -> Turn:
    """Read an OpenAI-Chat-shaped engine answer (vLLM or SGLang) into a Turn."""
    choice = (upstream.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    calls = [
        ToolCall(id=c.get("id") or new_id("call"), name=(c.get("function") or {}).get("name") or "",
                 arguments=(c.get("function") or {}).get("arguments") or "{}")
        for c in msg.get("tool_calls") or []
    ]
    usage = upstream.get("usage") or {}
    finish = choice.get("finish_reason") or "stop"
    if finish == "stop" and calls:
        finish = "tool_calls"
    stop_reason = choice.get("stop_reason", choice.get("matched_stop"))
    return Turn(
        id=upstream.get("id") or new_id("chatcmpl"),
        model=model or upstream.get("model"),
        created=int(upstream.get("created") or time.time()),
        content=msg.get("content"),
        reasoning=msg.get("reasoning") or msg.get("reasoning_content"),
        tool_calls=calls,
        finish_reason=finish,
        stop_reason=stop_reason,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        logprobs=(choice.get("logprobs") or {}).get("content"),
    )


class StreamWriter(Protocol):
    """Synthesises one streamed answer. ``head`` may be sent before the engine has answered
    (long calls), then ``keepalive`` while waiting, then ``body`` or ``error``."""

    content_type: str  # of the streamed body

    def head(self, turn: Turn | None = None) -> list[bytes]:
        """Opening events; ``turn`` is known unless the head goes out before the answer."""

    def keepalive(self) -> bytes | None: ...

    def body(self, response: dict[str, Any], turn: Turn) -> list[bytes]: ...

    def error(self, err: ProxyError) -> list[bytes]: ...


class Provider(Protocol):
    name: str

    def parse(self, body: Any, **context: Any) -> Parsed:
        """``context``: ``path_model``/``stream`` (from a Google path), ``history`` (Responses)."""

    def render(self, turn: Turn, parsed: Parsed) -> dict[str, Any]: ...

    def stream(self, parsed: Parsed) -> StreamWriter: ...

    def error(self, err: ProxyError) -> dict[str, Any]: ...


# --- helpers -----------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def opt_int(body: dict[str, Any], key: str, *, minimum: int = 0, param: str | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"'{param or key}' must be an integer >= {minimum}", param=param or key)
    return value


def opt_number(body: dict[str, Any], key: str, *, param: str | None = None) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadRequest(f"'{param or key}' must be a number", param=param or key)
    return value


def stop_list(value: Any, param: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise BadRequest(f"'{param}' must be a string or an array of strings", param=param)


def function_tool(name: Any, description: Any, parameters: Any, param: str) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise BadRequest("every tool needs a non-empty 'name'", param=param)
    fn: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        fn["description"] = description
    fn["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def text_of(parts: Iterable[Any], *, keys: tuple[str, ...] = ("text",)) -> str:
    """Concatenated text of content parts (strings or objects with a text-like key)."""
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, dict):
            for k in keys:
                if isinstance(p.get(k), str):
                    out.append(p[k])
                    break
    return "".join(out)


def signature_for(text: str) -> str:
    """An opaque, stable signature for synthesised reasoning (harnesses echo it back; the
    engine has no signatures of its own)."""
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def openai_error(err: ProxyError) -> dict[str, Any]:
    """OpenAI's error body (Chat Completions and Responses share it)."""
    return {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}


def data_url(media_type: str, data: str) -> str:
    return f"data:{media_type};base64,{data}"


def assistant_history_message(text: list[str], reasoning: list[str], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant turn from a harness's history as a chat message (content null when the turn
    is only tool calls, as OpenAI writes it)."""
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg


def assistant_message(turn: Turn) -> dict[str, Any]:
    """The turn as an OpenAI chat assistant message (what traces and stored state hold)."""
    msg: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.reasoning:
        msg["reasoning_content"] = turn.reasoning
    if turn.tool_calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}}
                             for c in turn.tool_calls]
    return msg
