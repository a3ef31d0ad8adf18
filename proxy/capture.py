"""Build the completion record of one model call (pure, on the hot path: plain dicts + msgpack).

Token ids and logprobs go in as packed arrays and the requests and the engine's answer as JSON
text (``pipeline.codec``'s extension types; readers get plain lists and dicts back): packing
them value by value was the largest single cost of a recorded call."""

from __future__ import annotations

import os
from typing import Any

from pipeline.codec import f64_array, json_doc, pack, u32_array
from proxy.upstream.base import Captured
from proxy.upstream.ids_text import IdsText

# Already captured as structured fields; not stored twice.
_BULKY = ("prompt_token_ids", "prompt_logprobs", "sglext")
_BULKY_CHOICE = ("token_ids", "logprobs", "prompt_token_ids", "response_token_ids", "meta_info")


def build_record(*, session_id: str, seq: int, provider: str, stream: bool, model: str | None, captured: Captured,
                 original: dict[str, Any], normalized: dict[str, Any], upstream: dict[str, Any],
                 response_message: dict[str, Any], started_at: float, finished_at: float,
                 latency_ms: float, upstream_url: str, policy_version: str | None,
                 normalizations: list[str] | None = None, requested_max_tokens: int | None = None,
                 completion_id: str | None = None, token_in: dict[str, Any] | None = None,
                 original_json: bytes | None = None) -> bytes:
    """``original_json``: the request's body as the client sent it, when at hand (``original`` is
    its parse): stored as sent, without serialising it again."""
    slim = {k: v for k, v in upstream.items() if k not in _BULKY}
    slim["choices"] = [{k: v for k, v in c.items() if k not in _BULKY_CHOICE}
                       for c in upstream.get("choices") or []]
    return pack({
        "completion_id": completion_id or new_completion_id(),
        "session_id": session_id,
        "seq": seq,
        "provider": provider,
        "stream": stream,
        "model": model if model is not None else original.get("model"),  # Gemini names it in the path
        "upstream_model": normalized.get("model"),
        "upstream_url": upstream_url,
        "policy_version": policy_version,
        "started_at": started_at,
        "finished_at": finished_at,
        "upstream_latency_ms": latency_ms,
        "prompt_ids": (json_doc(None, captured.prompt_ids.text) if isinstance(captured.prompt_ids, IdsText)
                       else u32_array(captured.prompt_ids)),
        "response_ids": u32_array(captured.response_ids),
        "response_logprobs": f64_array(captured.response_logprobs),
        "response_tokens": captured.response_tokens,
        "finish_reason": captured.finish_reason,
        "stop_reason": captured.stop_reason,
        "usage": upstream.get("usage") or {},
        "response_message": response_message,
        "original_request": json_doc(original, original_json),
        "normalized_request": json_doc(normalized),
        "upstream_response": json_doc(slim),
        "normalizations": normalizations or [],
        # The output limit the harness asked for and the one sent: they differ when the call was
        # fitted into the engine's context (proxy/context_limits.py).
        "requested_max_tokens": requested_max_tokens,
        "sent_max_tokens": normalized.get("max_tokens"),
        "token_in": token_in,
    })


def new_completion_id() -> str:
    return f"cmpl-{os.urandom(16).hex()}"


def build_error_record(*, session_id: str, seq: int, provider: str, status: int, error_type: str, message: str,
                       original: dict[str, Any], started_at: float, finished_at: float) -> bytes:
    return pack({"session_id": session_id, "seq": seq, "provider": provider, "status_code": status,
                 "error_type": error_type, "message": message, "original_request": original,
                 "started_at": started_at, "finished_at": finished_at})
