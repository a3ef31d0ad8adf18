"""Google Gemini ``generateContent`` / ``streamGenerateContent``, both directions (pure).

``systemInstruction``, text/inline-data/file parts, ``functionCall``/``functionResponse``
(ids preserved, or synthesised consistently: a response without an id answers the oldest
unanswered call of that name), ``thought`` parts (history -> ``reasoning_content``; output ->
a thought part when ``includeThoughts``), function declarations with ``parameters`` (OpenAPI
subset, upper-case types) or ``parametersJsonSchema``, ``toolConfig`` and ``generationConfig``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pipeline.codec import json_bytes
from proxy.errors import BadRequest, ContextOverflow, ProxyError, UnsupportedFeature
from proxy.providers.base import (
    Headers,
    Parsed,
    ProviderBase,
    ProviderScope,
    Route,
    Turn,
    assistant_history_message,
    data_url,
    function_tool,
    logprob_entries,
    new_id,
    root_generate,
    shared_models_route,
    signature_for,
)
from proxy.providers.fields import opt_bool, opt_int, opt_number, require_object, stop_list, top_logprobs
from proxy.providers.google_schema import camel, json_schema
from proxy.providers.tool_errors import marked
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


# generationConfig's fields (camelCase): the API's and what google-genai's GenerateContentConfig
# sends as them, for the Gemini API and Vertex. Another name is the client's 400.
_GENERATION_CONFIG = frozenset({
    "stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema",
    "ResponseJsonSchema",  # (_responseJsonSchema, camelCased)
    "responseModalities", "candidateCount", "maxOutputTokens", "temperature", "topP", "topK", "seed",
    "presencePenalty", "frequencyPenalty", "responseLogprobs", "logprobs", "enableEnhancedCivicAnswers",
    "speechConfig", "thinkingConfig", "imageConfig", "mediaResolution", "audioTranscriptionConfig",
    "audioTimestamp", "routingConfig", "modelConfig", "modelSelectionConfig", "enableAffectiveDialog",
    "responseFormat", "translationConfig"})

# Values that are user data (schemas, arguments): their keys are never renamed.
_OPAQUE = {"args", "response", "parameters", "parametersJsonSchema", "responseSchema", "responseJsonSchema",
           "labels"}


def camel_keys(value: Any) -> Any:
    """The API accepts proto field names in both spellings, and the Python SDK sends nested ones
    in snake_case (``include_thoughts``, ``parameters_json_schema``): read everything as camelCase."""
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        name = camel(key)
        out[name] = v if name in _OPAQUE else camel_keys(v)
    return out


def to_chat(body: Any, model: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    body = camel_keys(require_object(body))
    if isinstance(body.get("generateContentRequest"), dict):  # countTokens' wrapped form
        body = body["generateContentRequest"]
    if body.get("cachedContent"):  # answering without it would record a prompt missing its context
        raise UnsupportedFeature("cachedContent is not supported: this endpoint keeps no context caches; "
                                 "send the cached contents in the request", param="cachedContent")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BadRequest("contents is not specified", param="contents")
    messages = _system(body.get("systemInstruction"))
    pending: dict[str, list[str]] = {}  # name -> ids of calls not answered yet
    # Consecutive model contents are one turn: the genai SDK's streaming chat and automatic
    # function calling keep each streamed chunk (thought, text, functionCall) as a Content of its
    # own. As separate assistant messages they would render other tokens than were sampled.
    model_run: list[tuple[int, list[Any]]] = []
    for i, content in enumerate(contents):
        role, parts = _role_parts(content, i)
        if role == "model":
            model_run.append((i, parts))
            continue
        if model_run:
            messages.append(_model_turn(model_run, pending))
            model_run = []
        messages.extend(_user_content(parts, f"contents[{i}]", pending))
    if model_run:
        messages.append(_model_turn(model_run, pending))
    chat: dict[str, Any] = {"model": model, "messages": messages}
    cfg = body.get("generationConfig") or {}
    if not isinstance(cfg, dict):
        raise BadRequest("generationConfig must be an object", param="generationConfig")
    unknown = sorted(set(cfg) - _GENERATION_CONFIG)
    if unknown:  # Google's 400 (a misspelt field would otherwise be dropped unread)
        raise BadRequest(f'Invalid JSON payload received. Unknown name "{unknown[0]}" at \'generation_config\': '
                         "Cannot find field.", param=f"generationConfig.{unknown[0]}")
    if cfg.get("candidateCount", 1) not in (1, None):
        raise UnsupportedFeature("only candidateCount 1 is supported", param="generationConfig.candidateCount")
    for src, dst, within in (("temperature", "temperature", (0.0, 2.0)), ("topP", "top_p", (0.0, 1.0)),
                             ("presencePenalty", "presence_penalty", None),
                             ("frequencyPenalty", "frequency_penalty", None)):
        # Gemini's own ranges for temperature and topP (vLLM's are wider): its 400 outside them
        if opt_number(cfg, src, param=f"generationConfig.{src}", within=within) is not None:
            chat[dst] = cfg[src]
    # (Gemini's seed is an int32, negative ones included)
    for src, dst, low in (("topK", "top_k", 1), ("maxOutputTokens", "max_tokens", 1), ("seed", "seed", -2**31)):
        if (whole := opt_int(cfg, src, minimum=low, param=f"generationConfig.{src}")) is not None:
            chat[dst] = whole
    stops = stop_list(cfg.get("stopSequences"), "generationConfig.stopSequences")
    if stops:
        chat["stop"] = stops
    schema = cfg.get("responseJsonSchema") or json_schema(cfg.get("responseSchema"))
    if cfg.get("responseMimeType") not in (None, "text/plain", "application/json"):
        raise UnsupportedFeature(f"responseMimeType {cfg['responseMimeType']!r} is not supported: text/plain or "
                                 "application/json", param="generationConfig.responseMimeType")
    if cfg.get("responseMimeType") == "application/json":
        chat["response_format"] = ({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
                                   if isinstance(schema, dict) else {"type": "json_object"})
    thinking: dict[str, Any] = cfg["thinkingConfig"] if isinstance(cfg.get("thinkingConfig"), dict) else {}
    if thinking.get("thinkingBudget") == 0:
        chat["chat_template_kwargs"] = {"enable_thinking": False}
    elif thinking:
        chat["chat_template_kwargs"] = {"enable_thinking": True}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
        chat.update(_tool_config(body.get("toolConfig"), chat))
    logprobs = opt_bool(cfg, "responseLogprobs", param="generationConfig.responseLogprobs") is True
    top = top_logprobs(cfg, "logprobs", param="generationConfig.logprobs")
    return chat, {"include_thoughts": bool(thinking.get("includeThoughts")), "logprobs": logprobs, "top": top}


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


def _system(instruction: Any) -> list[dict[str, Any]]:
    if instruction is None:
        return []
    if isinstance(instruction, str):
        return [{"role": "system", "content": instruction}]
    parts = instruction.get("parts") if isinstance(instruction, dict) else None
    if isinstance(parts, list) and all(isinstance(p, dict) and isinstance(p.get("text", ""), str) for p in parts):
        return [{"role": "system", "content": "\n".join(p.get("text", "") for p in parts)}]
    raise BadRequest("systemInstruction must be a Content object", param="systemInstruction")


def _role_parts(content: Any, i: int) -> tuple[str, list[Any]]:
    where = f"contents[{i}]"
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        raise BadRequest(f"{where}.parts must be a list", param=f"{where}.parts")
    role = content.get("role") or "user"
    if role not in ("user", "model", "function", "tool"):
        raise BadRequest(f"{where}.role must be 'user' or 'model'", param=f"{where}.role")
    return role, content["parts"]


def _user_content(parts: list[Any], where: str, pending: dict[str, list[str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    user_parts: list[dict[str, Any]] = []
    for j, p in enumerate(parts):
        pw = f"{where}.parts[{j}]"
        if not isinstance(p, dict):
            raise BadRequest(f"{pw} must be an object", param=pw)
        if isinstance(p.get("functionResponse"), dict):
            out.append(_tool_message(p["functionResponse"], pw, pending))
        elif isinstance(p.get("text"), str):
            user_parts.append({"type": "text", "text": p["text"]})
        elif "inlineData" in p or "fileData" in p:
            user_parts.append(_media(p, pw))
        else:
            raise UnsupportedFeature(f"{pw}: part kind {sorted(p)} is not supported", param=pw)
    if user_parts:
        out.append({"role": "user", "content": user_parts})
    return out


def _model_turn(run: list[tuple[int, list[Any]]], pending: dict[str, list[str]]) -> dict[str, Any]:
    """One assistant message from the parts of one or more consecutive model contents."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, parts in run:
        where = f"contents[{i}]"
        for j, p in enumerate(parts):
            if not isinstance(p, dict):
                raise BadRequest(f"{where}.parts[{j}] must be an object", param=f"{where}.parts[{j}]")
            if isinstance(p.get("functionCall"), dict):
                fc = p["functionCall"]
                if not isinstance(fc.get("name"), str):
                    raise BadRequest(f"{where}.parts[{j}].functionCall.name is required", param=where)
                call_id = fc.get("id") or f"call_{i}_{j}"
                pending.setdefault(fc["name"], []).append(call_id)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": fc["name"], "arguments": json.dumps(fc.get("args") or {}, ensure_ascii=False)}})
            elif isinstance(p.get("text"), str):
                (reasoning if p.get("thought") else text).append(p["text"])
    return assistant_history_message(text, reasoning, calls)


def _tool_message(fr: dict[str, Any], where: str, pending: dict[str, list[str]]) -> dict[str, Any]:
    name = fr.get("name")
    if not isinstance(name, str):
        raise BadRequest(f"{where}.functionResponse.name is required", param=where)
    queue = pending.get(name) or []
    call_id = fr.get("id")
    if call_id in queue:
        queue.remove(call_id)
    elif call_id is None:
        call_id = queue.pop(0) if queue else f"call_{name}"
    response = fr.get("response")
    failed = False
    if isinstance(response, dict) and set(response) <= {"output", "error"} and response:
        failed = "output" not in response  # {"error": ...}: the call failed (gemini-cli's shape for it)
        value = response.get("output", response.get("error"))
    else:
        value = response
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return {"role": "tool", "tool_call_id": call_id, "content": marked(text, failed)}


def _media(p: dict[str, Any], where: str) -> dict[str, Any]:
    inline, file = p.get("inlineData"), p.get("fileData")
    if isinstance(inline, dict) and str(inline.get("mimeType", "")).startswith("image/"):
        return {"type": "image_url", "image_url": {"url": data_url(inline["mimeType"], inline.get("data", ""))}}
    if isinstance(file, dict) and isinstance(file.get("fileUri"), str):
        return {"type": "image_url", "image_url": {"url": file["fileUri"]}}
    raise UnsupportedFeature(f"{where}: only image inlineData and fileData are supported", param=where)


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list", param="tools")
    out = []
    for i, tool in enumerate(tools):
        decls = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if not isinstance(decls, (list, type(None))) or not all(isinstance(d, dict) for d in decls or []):
            raise BadRequest(f"tools[{i}].functionDeclarations must be a list of objects",
                             param=f"tools[{i}].functionDeclarations")
        for j, decl in enumerate(decls or []):
            params = decl.get("parametersJsonSchema", json_schema(decl.get("parameters")))
            out.append(function_tool(decl.get("name"), decl.get("description"), params,
                                     f"tools[{i}].functionDeclarations[{j}].name"))
        # googleSearch, codeExecution, urlContext ... run at the vendor: dropped
    return out


def _tool_config(config: Any, chat: dict[str, Any]) -> dict[str, Any]:
    fcc = (config or {}).get("functionCallingConfig") if isinstance(config, dict) else None
    if not isinstance(fcc, dict):
        return {}
    mode = str(fcc.get("mode", "AUTO")).upper()
    if mode not in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"):
        raise BadRequest(f"toolConfig.functionCallingConfig.mode: {fcc.get('mode')!r} is not AUTO, ANY, NONE or "
                         "VALIDATED", param="toolConfig.functionCallingConfig.mode")
    allowed = fcc.get("allowedFunctionNames")
    if mode == "NONE":
        return {"tool_choice": "none"}
    if mode in ("ANY", "VALIDATED") and isinstance(allowed, list) and allowed:
        chat["tools"] = [t for t in chat["tools"] if t["function"]["name"] in allowed]
        if not chat["tools"]:
            raise BadRequest(f"allowedFunctionNames {allowed!r} names no declared function",
                             param="toolConfig.functionCallingConfig.allowedFunctionNames")
        if len(chat["tools"]) == 1:
            return {"tool_choice": {"type": "function", "function": {"name": chat["tools"][0]["function"]["name"]}}}
    return {"tool_choice": "required" if mode in ("ANY", "VALIDATED") else "auto"}


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
