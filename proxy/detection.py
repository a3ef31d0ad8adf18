"""Which provider API a request speaks: by path, then headers, then body (pure).

Paths are matched after the ``/s/<session_id>`` prefix is removed, with or without ``/v1``
(base URLs differ per harness: Claude Code appends ``/v1/messages`` to a root URL, Codex
appends ``/responses`` to one ending in ``/v1``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

_GOOGLE = re.compile(r"^/(?:v1beta|v1|v1alpha)/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent|countTokens)$")
_GOOGLE_MODELS = re.compile(r"^/(?:v1beta|v1alpha)/models(?:/(?P<model>[^/:]+))?$")
_RESPONSE_ID = re.compile(r"^(?:/v1)?/responses/(?P<id>[^/]+)$")
_MODEL_ID = re.compile(r"^(?:/v1)?/models/(?P<id>[^/:]+)$")


@dataclass(frozen=True)
class Route:
    kind: str  # generate | count_tokens | models | model | get_response | health
    provider: str  # openai_chat | anthropic | openai_responses | google
    model: str | None = None  # a Google path names the model
    stream: bool = False  # a Google path decides streaming
    item_id: str | None = None


def detect(method: str, path: str, headers: Mapping[str, str], body: Any = None) -> Route | None:
    path = "/" + path.strip("/")
    m = _GOOGLE.match(path)
    if m:
        kind = "count_tokens" if m["method"] == "countTokens" else "generate"
        return Route(kind, "google", model=m["model"], stream=m["method"] == "streamGenerateContent")
    if method == "GET":
        return _get_route(path, headers)
    if path.endswith("/messages/count_tokens"):
        return Route("count_tokens", "anthropic")
    if path in ("/v1/messages", "/messages"):
        return Route("generate", "anthropic")
    if path in ("/v1/chat/completions", "/chat/completions"):
        return Route("generate", "openai_chat")
    if path in ("/v1/responses", "/responses"):
        return Route("generate", "openai_responses")
    if path not in ("/", "/v1"):
        return None
    provider = _by_headers(headers) or _by_body(body)
    return Route("generate", provider) if provider else None


def _get_route(path: str, headers: Mapping[str, str]) -> Route | None:
    m = _GOOGLE_MODELS.match(path)
    if m:
        return Route("model" if m["model"] else "models", "google", model=m["model"])
    if path in ("/v1/models", "/models"):
        return Route("models", _by_headers(headers) or "openai_chat")
    m = _MODEL_ID.match(path)
    if m:
        return Route("model", _by_headers(headers) or "openai_chat", model=m["id"])
    m = _RESPONSE_ID.match(path)
    if m:
        return Route("get_response", "openai_responses", item_id=m["id"])
    if path in ("/", "/health"):
        return Route("health", "openai_chat")
    return None


def _by_headers(headers: Mapping[str, str]) -> str | None:
    if headers.get("anthropic-version") or headers.get("anthropic-beta"):
        return "anthropic"
    if headers.get("x-goog-api-key") or headers.get("x-goog-api-client"):
        return "google"
    return None


def _by_body(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    if "contents" in body:
        return "google"
    if "input" in body:
        return "openai_responses"
    if "messages" in body:
        anthropic_only = "system" in body or "stop_sequences" in body or any(
            isinstance(m, dict) and isinstance(m.get("content"), list)
            and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking") for b in m["content"])
            for m in body["messages"] if isinstance(body["messages"], list))
        return "anthropic" if anthropic_only else "openai_chat"
    return None
