"""What every provider module shares: the seam (``Provider``), the route a request takes, the
parsed request, the engine's assistant turn in a provider-neutral shape, and the small helpers
the four translations have in common (their request-field checks are in ``fields``).

A provider module owns everything about its API: which paths it serves and how it recognises
a bare base-URL call (``match``, ``claims_headers``, ``claims_body``), ``parse`` (the harness's
request -> an OpenAI Chat request for the engine), ``render`` (the engine's answer -> the
harness's response), ``stream`` (the same answer in the API's own event grammar), ``error``
(a ProxyError in the API's error shape), its model listing and token counting, and per-session
state (``context`` before a call, ``completed`` after it, ``stored`` reads). Everything but the
three session hooks is pure; the hooks reach Redis only through the ``ProviderScope`` they get.
Adding a provider is one module plus one line in ``proxy/providers/__init__.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol

from proxy.errors import BadRequest, ProxyError, UnsupportedEndpoint

ROOT_PATHS = ("/", "/v1")  # a bare base URL: the API is told by headers, then body


class Headers(Protocol):
    """Request headers, case-insensitive (werkzeug's, or a dict with lower-case names)."""

    def get(self, key: str, /) -> str | None: ...


@dataclass(frozen=True)
class Route:
    """Where a request goes: ``kind`` is generate | count_tokens | models | model | stored |
    delete_stored | input_items | cancel_stored."""

    kind: str
    provider: str
    model: str | None = None  # a Google path names the model
    stream: bool = False  # a Google path decides streaming
    item_id: str | None = None  # a stored object's id (Responses)


class ResponseState(Protocol):
    """Stored Responses-API objects of a session (``pipeline.stores.responses.ResponseStore``)."""

    def save(self, session_id: str, response: dict[str, Any], conversation: list[dict[str, Any]],
             input_items: list[dict[str, Any]] | None = None,
             items: Mapping[str, dict[str, Any]] | None = None) -> None: ...

    def load(self, session_id: str, response_id: str) -> dict[str, Any] | None: ...

    def delete(self, session_id: str, response_id: str) -> bool: ...

    def items(self, session_id: str, item_ids: list[str]) -> dict[str, dict[str, Any]]: ...


@dataclass(frozen=True)
class ProviderScope:
    """The per-session state a provider may keep, and the call's query parameters."""

    session_id: str
    responses: ResponseState
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Parsed:
    """A harness request, translated."""

    chat: dict[str, Any]  # OpenAI Chat Completions request for the engine (no capture fields)
    stream: bool
    model: str | None  # the model name the harness asked for (echoed back)
    top_logprobs: int = 0  # alternatives per sampled token the caller asked for
    extra: dict[str, Any] = field(default_factory=dict)  # read only by the provider that wrote it
    # Responses' truncation "auto": an input over the context loses its oldest messages instead of
    # being refused (proxy/context_fitting.py).
    truncate_input: bool = False


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

    @property
    def reasoning_tokens(self) -> int:
        """How many of the sampled tokens were thinking: up to and including the reasoning
        parser's closing ``</think>`` token (Qwen3 / DeepSeek-R1 style, as the engine split the
        turn); all of them when the turn is reasoning only (cut while thinking); 0 when unknown."""
        if not self.reasoning:
            return 0
        for i, entry in enumerate(self.logprobs or ()):
            if isinstance(entry, dict) and str(entry.get("token", "")).strip() == "</think>":
                return i + 1
        return self.completion_tokens if not self.content and not self.tool_calls else 0


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
    # Whether ``context`` reads per-session state: such a request is translated only once its
    # call is admitted (the others are translated while the admission's round trip runs).
    stateful: bool

    def match(self, method: str, path: str) -> Route | None:
        """The route of a request by its path (``/s/<key>`` removed), if this API serves it."""

    def claims_headers(self, headers: Headers) -> bool:
        """Whether the headers say a shared path (bare base URL, ``/v1/models``) is this API."""

    def claims_body(self, body: Any) -> bool:
        """Whether a bare base-URL POST body is this API's request."""

    def claims_path(self, path: str) -> bool:
        """Whether a path no API here serves is still this API's (``/v1beta/...`` is Gemini's):
        the error then answers in this API's format."""

    def parse(self, body: Any, *, path_model: str | None = None, stream: bool = False,
              **context: Any) -> Parsed:
        """``path_model``/``stream`` come from the route; ``context`` from ``context()``."""

    def render(self, turn: Turn, parsed: Parsed) -> dict[str, Any]: ...

    def stream(self, parsed: Parsed) -> StreamWriter: ...

    def error(self, err: ProxyError) -> dict[str, Any]: ...

    def models(self, models: list[dict[str, Any]]) -> dict[str, Any]:
        """The engine's model cards (OpenAI shape) as this API lists models."""

    def model(self, card: dict[str, Any]) -> dict[str, Any]: ...

    def count_tokens_chat(self, body: Any, route: Route, **context: Any) -> dict[str, Any]:
        """The chat request whose prompt a count-tokens call measures (``context``: as for ``parse``)."""

    def count_tokens_response(self, count: int) -> dict[str, Any]: ...

    # A cache pre-warm (Anthropic's ``max_tokens: 0``) samples nothing: it is answered from a
    # token count, never admitted as a model call. ``prewarm_hint`` finds the candidates in the
    # raw body (so the others are still parsed while their admission's round trip runs).
    prewarm_hint: "re.Pattern[bytes] | None"

    def prewarm_chat(self, body: Any) -> dict[str, Any] | None:
        """The chat whose prompt a pre-warm ``body`` counts; None when ``body`` is no pre-warm."""

    def prewarm_response(self, body: dict[str, Any], count: int) -> dict[str, Any]: ...

    def context(self, body: Any, scope: ProviderScope) -> dict[str, Any]:
        """Extra ``parse`` keywords from per-session state (Responses: the stored history)."""

    def completed(self, parsed: Parsed, response: dict[str, Any], sampled: dict[str, Any],
                  scope: ProviderScope) -> None:
        """After a recorded call: keep whatever the API's later calls may refer to."""

    def stored(self, route: Route, scope: ProviderScope) -> dict[str, Any]:
        """A stored object (Responses: ``GET /v1/responses/{id}``)."""


class ProviderBase:
    """Defaults for the optional parts of ``Provider``: no shared-path claims, OpenAI-shaped
    model listings, no token counting, no per-session state."""

    name: str
    stateful = False

    def claims_headers(self, headers: Headers) -> bool:
        return False

    def claims_body(self, body: Any) -> bool:
        return False

    def claims_path(self, path: str) -> bool:
        return False

    def models(self, models: list[dict[str, Any]]) -> dict[str, Any]:
        return {"object": "list", "data": models}

    def model(self, card: dict[str, Any]) -> dict[str, Any]:
        return dict(card)

    def count_tokens_chat(self, body: Any, route: Route, **context: Any) -> dict[str, Any]:
        raise UnsupportedEndpoint(f"{self.name} has no count-tokens endpoint")

    def count_tokens_response(self, count: int) -> dict[str, Any]:
        return {"count": count}

    prewarm_hint: "re.Pattern[bytes] | None" = None

    def prewarm_chat(self, body: Any) -> dict[str, Any] | None:
        return None

    def prewarm_response(self, body: dict[str, Any], count: int) -> dict[str, Any]:
        raise UnsupportedEndpoint(f"{self.name} has no cache pre-warm")

    def context(self, body: Any, scope: ProviderScope) -> dict[str, Any]:
        return {}

    def completed(self, parsed: Parsed, response: dict[str, Any], sampled: dict[str, Any],
                  scope: ProviderScope) -> None:
        return None

    def stored(self, route: Route, scope: ProviderScope) -> dict[str, Any]:
        raise UnsupportedEndpoint(f"{self.name} stores nothing")


def root_generate(method: str, path: str, name: str) -> Route | None:
    """A POST to a bare base URL is a candidate generate call of every API."""
    return Route("generate", name) if method == "POST" and path in ROOT_PATHS else None


def shared_models_route(method: str, path: str, name: str) -> Route | None:
    """``GET /v1/models`` and ``/v1/models/{id}``: asked by OpenAI, Anthropic and Gemini clients
    alike; the caller's headers say whose listing shape it wants."""
    if method != "GET":
        return None
    if path in ("/v1/models", "/models"):
        return Route("models", name)
    for prefix in ("/v1/models/", "/models/"):
        rest = path[len(prefix):]
        if path.startswith(prefix) and rest and ":" not in rest:  # ids may hold "/": "Qwen/Qwen3-8B"
            return Route("model", name, model=rest)
    return None


# --- helpers -----------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


def logprob_entries(turn: Turn, top: int) -> list[dict[str, Any]]:
    """The engine's logprob of every sampled token (reasoning and tool-call tokens included, as
    vLLM's own chat logprobs are), each with at most ``top`` alternatives; OpenAI's entry shape."""
    return [{"token": e.get("token"), "logprob": e.get("logprob"), "bytes": e.get("bytes"),
             "top_logprobs": (e.get("top_logprobs") or [])[:top]} for e in turn.logprobs or ()]


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
