"""OpenAI Chat Completions, both directions (pure: no I/O).

Requests are close to the upstream's own dialect; normalising means validating, renaming the
``developer`` role and ``max_completion_tokens``, and dropping OpenAI-platform fields an
inference server does not know. Responses are rebuilt from the upstream's, minus the token-id
fields the proxy added, in the shape the official SDK parses; streaming is synthesised from the
one non-streaming upstream answer.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from proxy.errors import BadRequest, ProxyError

NAME = "openai_chat"

# Sampling/tooling fields forwarded upstream as they are.
_FORWARD = (
    "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "stop", "seed",
    "presence_penalty", "frequency_penalty", "response_format", "reasoning_effort", "logit_bias",
    # vLLM / SGLang extras a harness may set deliberately
    "top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "ignore_eos",
    "chat_template_kwargs", "skip_special_tokens", "include_stop_str_in_output",
)
_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def normalize(body: Any) -> dict[str, Any]:
    """Validate a Chat Completions request and return the upstream (non-streaming) request."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    out_messages = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise BadRequest(f"messages[{i}] must be an object with a valid 'role'", param=f"messages[{i}].role")
        if m["role"] == "developer":
            m = {**m, "role": "system"}
        out_messages.append(m)
    n = body.get("n", 1)
    if n not in (1, None):
        raise BadRequest("only n=1 is supported (each sample is its own session)", param="n")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise BadRequest("'tools' must be an array of objects", param="tools")
    out: dict[str, Any] = {"model": body.get("model"), "messages": out_messages}
    for key in _FORWARD:
        if key in body and body[key] is not None:
            out[key] = body[key]
    if tools == []:
        # An empty list is legal for OpenAI but rejected by vLLM; so is tool_choice without tools.
        out.pop("tools", None)
        out.pop("tool_choice", None)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise BadRequest("'max_tokens' must be a positive integer", param="max_tokens")
        out["max_tokens"] = max_tokens
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20):
        raise BadRequest("'top_logprobs' must be an integer between 0 and 20", param="top_logprobs")
    return out


def wants_logprobs(body: dict[str, Any]) -> tuple[bool, int]:
    return bool(body.get("logprobs")), int(body.get("top_logprobs") or 0)


def include_usage_in_stream(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def assistant_message(upstream: dict[str, Any]) -> dict[str, Any]:
    """The sampled assistant turn as a chat message (also what the trace's response_messages hold)."""
    msg = (upstream.get("choices") or [{}])[0].get("message") or {}
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id") or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or "{}"}}
            for c in msg["tool_calls"]
        ]
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    if reasoning:
        out["reasoning_content"] = reasoning
    return out


def to_response(upstream: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    choice = (upstream.get("choices") or [{}])[0]
    logprobs, top = wants_logprobs(request)
    message = assistant_message(upstream)
    message.setdefault("refusal", None)
    return {
        "id": upstream.get("id") or f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": upstream.get("created") or int(time.time()),
        "model": request.get("model") or upstream.get("model"),
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": _client_logprobs(choice, top) if logprobs else None,
            "finish_reason": finish_reason(choice, message),
        }],
        "usage": usage(upstream),
        "system_fingerprint": None,
    }


def finish_reason(choice: dict[str, Any], message: dict[str, Any]) -> str:
    reason = choice.get("finish_reason") or "stop"
    if reason == "stop" and message.get("tool_calls"):
        return "tool_calls"
    return reason if reason in ("stop", "length", "tool_calls", "content_filter") else "stop"


def usage(upstream: dict[str, Any]) -> dict[str, int]:
    u = upstream.get("usage") or {}
    p, c = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": int(u.get("total_tokens") or p + c)}


def _client_logprobs(choice: dict[str, Any], top: int) -> dict[str, Any] | None:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or lp.get("content") is None:
        return None
    return {"content": [
        {"token": e.get("token"), "logprob": e.get("logprob"), "bytes": e.get("bytes"),
         "top_logprobs": (e.get("top_logprobs") or [])[:top]}
        for e in lp["content"]
    ], "refusal": None}


def stream_chunks(response: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The chunk sequence a streaming call would have produced, from the finished response."""
    base = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"], "system_fingerprint": None}
    if include_usage:
        base["usage"] = None
    choice = response["choices"][0]
    msg = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

    # OpenAI opens a tool-call-only answer with content null, a text answer with "".
    out = [chunk({"role": "assistant", "content": "" if msg.get("content") else None})]
    if msg.get("reasoning_content"):
        out.append(chunk({"reasoning_content": msg["reasoning_content"]}))
    if msg.get("content"):
        out.append(chunk({"content": msg["content"]}, logprobs=choice.get("logprobs")))
    for i, call in enumerate(msg.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}))
    out.append(chunk({}, finish=choice["finish_reason"]))
    if include_usage:
        out.append({**base, "choices": [], "usage": response["usage"]})
    return out


def error_body(err: ProxyError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}
