"""Google Gemini ``generateContent`` / ``streamGenerateContent``, both directions (pure): routes,
detection, model listing, token counting, the rendered candidate (``thought`` output as a
thought part when ``includeThoughts``; logprobs), its stream (SSE or one JSON array) and the
error shape. The request's translation (system instruction, parts, function calls and
responses, tools, ``toolConfig``, ``generationConfig``) is in ``google_request``; schemas in
``google_schema``.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.codec import json_bytes
from proxy.errors import ContextOverflow, ProxyError
from proxy.providers.base import (
    Headers,
    Parsed,
    ProviderBase,
    ProviderScope,
    Route,
    Turn,
    logprob_entries,
    new_id,
    root_generate,
    shared_models_route,
    signature_for,
)
from proxy.providers.google_request import to_chat
from proxy.sse import data_event

NAME = "google"
# A model name may hold "/" (vLLM serves a checkpoint by its path: "Qwen/Qwen3-8B") and ":"; the
# method is what follows the last ":".
_CALL = re.compile(r"^/(?:v1beta|v1|v1alpha)/models/(?P<model>.+):"
                   r"(?P<method>generateContent|streamGenerateContent|countTokens)$")
_MODELS = re.compile(r"^/(?:v1beta|v1alpha)/models(?:/(?P<model>[^:]+))?$")
_OWN_PATH = re.compile(r"^/(?:v1beta|v1alpha)(?:/|$)|^/v1/models/.+:")  # Gemini's, served here or not
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE",
           504: "DEADLINE_EXCEEDED"}


def logprobs_result(turn: Turn, top: int) -> dict[str, Any]:
    """Gemini's ``logprobsResult``: the chosen token and the ``top`` alternatives at every step."""
    entries = logprob_entries(turn, top)
    result: dict[str, Any] = {
        "chosenCandidates": [{"token": e["token"], "logProbability": e["logprob"]} for e in entries],
        "logProbabilitySum": sum(e["logprob"] or 0.0 for e in entries)}
    if top:
        result["topCandidates"] = [{"candidates": [{"token": a.get("token"), "logProbability": a.get("logprob")}
                                                   for a in e["top_logprobs"]]} for e in entries]
    return result


def finish_reason(turn: Turn) -> str:
    return {"length": "MAX_TOKENS", "content_filter": "SAFETY"}.get(turn.finish_reason, "STOP")


def parts(turn: Turn, include_thoughts: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if turn.reasoning and include_thoughts:
        out.append({"text": turn.reasoning, "thought": True})
    if turn.content or not (turn.tool_calls or out):
        out.append({"text": turn.content or ""})
    for c in turn.tool_calls:
        out.append({"functionCall": {"name": c.name, "args": c.arguments_object(), "id": c.id}})
    if turn.reasoning:  # harnesses echo it on later turns; Gemini 3 requires it on calls
        out[-1]["thoughtSignature"] = signature_for(turn.reasoning)
    return out


class Google(ProviderBase):
    name = NAME

    def match(self, method: str, path: str) -> Route | None:
        m = _CALL.match(path) if method == "POST" else None
        if m:
            kind = "count_tokens" if m["method"] == "countTokens" else "generate"
            return Route(kind, NAME, model=m["model"], stream=m["method"] == "streamGenerateContent")
        m = _MODELS.match(path)
        if m and method == "GET":
            return Route("model" if m["model"] else "models", NAME, model=m["model"])
        return shared_models_route(method, path, NAME) or root_generate(method, path, NAME)

    def claims_headers(self, headers: Headers) -> bool:
        return bool(headers.get("x-goog-api-key") or headers.get("x-goog-api-client"))

    def claims_path(self, path: str) -> bool:
        return bool(_OWN_PATH.match(path))

    def claims_body(self, body: Any) -> bool:
        return isinstance(body, dict) and "contents" in body

    def models(self, models: list[dict[str, Any]]) -> dict[str, Any]:
        return {"models": [self.model(m) for m in models]}

    def model(self, card: dict[str, Any]) -> dict[str, Any]:
        return {"name": f"models/{card['id']}", "baseModelId": card["id"], "version": "1", "displayName": card["id"],
                "inputTokenLimit": card.get("max_model_len"), "outputTokenLimit": card.get("max_model_len"),
                "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}

    def count_tokens_chat(self, body: Any, route: Route, **context: Any) -> dict[str, Any]:
        return to_chat(body, route.model)[0]

    def count_tokens_response(self, count: int) -> dict[str, Any]:
        return {"totalTokens": count}

    def context(self, body: Any, scope: ProviderScope) -> dict[str, Any]:
        # Without ?alt=sse a streamed answer is one JSON array (the REST default).
        return {"sse": scope.query.get("alt") == "sse"}

    def parse(self, body: Any, *, path_model: str | None = None, stream: bool = False, sse: bool = True,
              **context: Any) -> Parsed:
        chat, extra = to_chat(body, path_model)
        extra["sse"] = sse
        extra["response_id"] = new_id("resp")
        return Parsed(chat=chat, stream=stream, model=path_model, top_logprobs=extra["top"], extra=extra)

    def render(self, turn: Turn, parsed: Parsed) -> dict[str, Any]:
        thoughts = turn.reasoning_tokens  # Gemini counts thinking apart from the candidates
        usage = {"promptTokenCount": turn.prompt_tokens, "candidatesTokenCount": turn.completion_tokens - thoughts,
                 "totalTokenCount": turn.total_tokens}
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts(turn, parsed.extra["include_thoughts"])},
                                     "finishReason": finish_reason(turn), "index": 0}
        if parsed.extra["logprobs"]:
            candidate["logprobsResult"] = result = logprobs_result(turn, parsed.extra["top"])
            chosen = result["chosenCandidates"]
            candidate["avgLogprobs"] = result["logProbabilitySum"] / len(chosen) if chosen else 0.0
        return {"candidates": [candidate],
                "usageMetadata": usage, "modelVersion": parsed.model, "responseId": parsed.extra["response_id"]}

    def stream(self, parsed: Parsed) -> "GoogleStream":
        return GoogleStream(sse=parsed.extra.get("sse", True))

    def error(self, err: ProxyError) -> dict[str, Any]:
        status = _STATUS.get(err.status, "INTERNAL" if err.status >= 500 else "INVALID_ARGUMENT")
        return {"error": {"code": err.status, "message": error_message(err), "status": status}}


def error_message(err: ProxyError) -> str:
    """Gemini's wording of a prompt over its input limit (Gemini has no combined input + output
    limit; a refused output limit is worded the same way)."""
    if not isinstance(err, ContextOverflow):
        return err.message
    if not err.prompt_fits:
        return (f"The input token count ({err.prompt_tokens}) exceeds the maximum number of tokens allowed "
                f"({err.max_prompt_tokens}).")
    return (f"The input token count ({err.prompt_tokens}) plus maxOutputTokens ({err.output_tokens}) exceeds "
            f"the maximum number of tokens allowed ({err.context_length}).")


class GoogleStream:
    """``data:`` events, each a GenerateContentResponse with the new parts; the last one carries
    ``finishReason`` and ``usageMetadata`` (Gemini CLI retries without a finish reason).
    Without ``?alt=sse`` Google streams the same objects as one JSON array instead."""

    def __init__(self, sse: bool = True) -> None:
        self.sse = sse
        self.content_type = "text/event-stream" if sse else "application/json"

    def head(self, turn: Turn | None = None) -> list[bytes]:
        return []  # nothing meaningful to send before the answer

    def keepalive(self) -> bytes | None:
        return None  # the genai SDK parses every line as JSON: no comments

    def body(self, response: dict[str, Any], turn: Turn) -> list[bytes]:
        candidate = response["candidates"][0]
        chunks = []
        for part in candidate["content"]["parts"][:-1]:
            chunks.append({"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
                           "modelVersion": response["modelVersion"], "responseId": response["responseId"]})
        last = dict(response)
        last["candidates"] = [{**candidate, "content": {"role": "model", "parts": candidate["content"]["parts"][-1:]}}]
        chunks.append(last)
        return [data_event(c) for c in chunks] if self.sse else [json_bytes(chunks)]

    def error(self, err: ProxyError) -> list[bytes]:
        body = Google().error(err)
        return [data_event(body)] if self.sse else [json_bytes([body])]
