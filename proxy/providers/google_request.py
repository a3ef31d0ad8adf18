"""Google Gemini ``generateContent`` request -> OpenAI Chat request for the engine (pure: no
I/O): the translation ``google.Google`` parses and counts with. Kept apart from ``google``
(routes, detection, the rendered candidate, its stream, errors) so the request side is read in
one file.

``systemInstruction``, text/inline-data/file parts, ``functionCall``/``functionResponse``
(ids preserved, or synthesised consistently: a response without an id answers the oldest
unanswered call of that name; one answering no call is Gemini's 400), ``thought`` parts (history -> ``reasoning_content``), function
declarations with ``parameters`` (OpenAPI subset, upper-case types) or
``parametersJsonSchema``, ``toolConfig`` and ``generationConfig``; camelCase and snake_case
field names alike (``camel_keys``).
"""

from __future__ import annotations

import json
from typing import Any

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers.base import assistant_history_message, data_url, function_tool
from proxy.providers.fields import opt_bool, opt_int, opt_number, require_object, stop_list, top_logprobs
from proxy.providers.google_schema import camel, json_schema
from proxy.providers.tool_errors import marked

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


# Fields whose type decides what is asked for: one of another type is the client's 400, never
# read as absent (responseModalities "AUDIO" as a string was answered in text, a schema given as
# a string fell back to plain JSON mode).
_SHAPES: tuple[tuple[tuple[str, ...], type | tuple[type, ...], str], ...] = (
    (("generationConfig", "responseModalities"), list, "a list"),
    (("generationConfig", "thinkingConfig"), dict, "an object"),
    (("generationConfig", "responseSchema"), dict, "an object"),
    (("generationConfig", "responseJsonSchema"), (dict, bool), "a JSON schema"),
    (("toolConfig",), dict, "an object"),
    (("toolConfig", "functionCallingConfig"), dict, "an object"),
    (("toolConfig", "functionCallingConfig", "allowedFunctionNames"), list, "a list"))


def _check_shapes(body: dict[str, Any]) -> None:
    for path, kind, named in _SHAPES:
        value: Any = body
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, kind):
            where = ".".join(path)
            raise BadRequest(f"Invalid value at '{where}': must be {named}", param=where)


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
    _check_shapes(body)
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
    # Asked for, these change what the caller gets back: refused rather than answered in text.
    modalities = cfg.get("responseModalities")
    if isinstance(modalities, list) and {str(m).upper() for m in modalities} - {"TEXT"}:
        raise UnsupportedFeature(f"responseModalities {modalities} is not supported: this model answers in text",
                                 param="generationConfig.responseModalities")
    if cfg.get("speechConfig") is not None:
        raise UnsupportedFeature("speechConfig is not supported: this model answers in text, not audio",
                                 param="generationConfig.speechConfig")
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
    if schema is not None and cfg.get("responseMimeType") != "application/json":
        # Google's 400 (a schema needs a compatible responseMimeType): answered, the schema
        # would be ignored without a word and the caller get unconstrained text.
        raise BadRequest("generationConfig.responseMimeType must be application/json when a response schema "
                         "(responseSchema or responseJsonSchema) is set", param="generationConfig.responseMimeType")
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
    elif _tool_config(body.get("toolConfig"), {"tools": []}).get("tool_choice") == "required":
        # ANY forces a function call: with no function declared, Google's 400 (it
        # would otherwise be answered in text as if never asked for).
        raise BadRequest("Function calling config is set without function_declarations.",
                         param="toolConfig.functionCallingConfig.mode")
    logprobs = opt_bool(cfg, "responseLogprobs", param="generationConfig.responseLogprobs") is True
    top = top_logprobs(cfg, "logprobs", param="generationConfig.logprobs")
    return chat, {"include_thoughts": bool(thinking.get("includeThoughts")), "logprobs": logprobs, "top": top}


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
    media_after_tools: list[dict[str, Any]] = []
    for j, p in enumerate(parts):
        pw = f"{where}.parts[{j}]"
        if not isinstance(p, dict):
            raise BadRequest(f"{pw} must be an object", param=pw)
        if isinstance(p.get("functionResponse"), dict):
            out.append(_tool_message(p["functionResponse"], pw, pending))
            media_after_tools += _response_media(p["functionResponse"], f"{pw}.functionResponse")
        elif isinstance(p.get("text"), str):
            user_parts.append({"type": "text", "text": p["text"]})
        elif "inlineData" in p or "fileData" in p:
            user_parts.append(_media(p, pw))
        else:
            raise UnsupportedFeature(f"{pw}: part kind {sorted(p)} is not supported", param=pw)
    # A function response's own parts (a screenshot, a file it read): chat tool messages hold
    # text only, so they are shown right after the tool messages, as Anthropic tool_result images.
    user_parts = media_after_tools + user_parts
    if user_parts:
        out.append({"role": "user", "content": user_parts})
    return out


def _response_media(fr: dict[str, Any], where: str) -> list[dict[str, Any]]:
    parts = fr.get("parts")
    if parts is None:
        return []
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise BadRequest(f"{where}.parts must be a list of objects", param=f"{where}.parts")
    return [_media(p, f"{where}.parts[{j}]") for j, p in enumerate(parts)]


# Model parts with content of their own that an assistant message cannot hold (a part holding
# only a thoughtSignature, or an empty one, carries nothing to render and is skipped).
_UNRENDERED = frozenset({"executableCode", "codeExecutionResult", "inlineData", "fileData", "functionResponse"})


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
                if not isinstance(fc.get("args"), (dict, type(None))):
                    raise BadRequest(f"{where}.parts[{j}].functionCall.args must be an object",
                                     param=f"{where}.parts[{j}].functionCall.args")
                call_id = fc.get("id") or f"call_{i}_{j}"
                pending.setdefault(fc["name"], []).append(call_id)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": fc["name"], "arguments": json.dumps(fc.get("args") or {}, ensure_ascii=False)}})
            elif isinstance(p.get("text"), str):
                (reasoning if p.get("thought") else text).append(p["text"])
            elif _UNRENDERED.intersection(p):
                # Code the vendor ran, media it made: the engine's template has no place for them,
                # and dropped, the turn would be sampled on as if the model had said nothing of it.
                raise UnsupportedFeature(f"{where}.parts[{j}]: a model part of kind {sorted(_UNRENDERED.intersection(p))} "
                                         "is not supported", param=f"{where}.parts[{j}]")
    return assistant_history_message(text, reasoning, calls)


def _tool_message(fr: dict[str, Any], where: str, pending: dict[str, list[str]]) -> dict[str, Any]:
    name = fr.get("name")
    if not isinstance(name, str):
        raise BadRequest(f"{where}.functionResponse.name is required", param=where)
    queue = pending.get(name) or []
    call_id = fr.get("id")
    if call_id in queue:
        queue.remove(call_id)
    elif not queue:  # answers no call of the model's: Gemini's 400 (sampled, it would be trained on)
        raise BadRequest("Please ensure that function response turn comes immediately after a function call turn.",
                         param=where)
    else:  # an id of its own (or none): it answers the oldest call of its name
        oldest = queue.pop(0)
        call_id = oldest if call_id is None else call_id
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
        return {"type": "image_url", "image_url": {"url": data_url(inline["mimeType"], _standard_base64(inline.get("data"), where))}}
    # A file is an image URL only if it is an image: a PDF or a video passed on as one would be
    # read as a picture (or refused as one); its type is the caller's mimeType (or none given).
    if (isinstance(file, dict) and isinstance(file.get("fileUri"), str)
            and str(file.get("mimeType") or "image/").startswith("image/")):
        return {"type": "image_url", "image_url": {"url": file["fileUri"]}}
    raise UnsupportedFeature(f"{where}: only image inlineData and fileData are supported", param=where)


def _standard_base64(data: Any, where: str) -> str:
    """Gemini's bytes fields take base64 in either alphabet, and google-genai sends the URL-safe
    one (``-``, ``_``); a data URL is standard base64, which vLLM decodes strictly (an image
    passed on as sent would fail there, or reach the model as other bytes)."""
    if not isinstance(data, str):
        raise BadRequest(f"{where}.inlineData.data must be a base64 string", param=f"{where}.inlineData.data")
    data = data.strip().rstrip("=").replace("-", "+").replace("_", "/")
    return data + "=" * (-len(data) % 4)


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
            if not isinstance(decl.get("parameters"), (dict, type(None))):
                raise BadRequest(f"tools[{i}].functionDeclarations[{j}].parameters must be an object",
                                 param=f"tools[{i}].functionDeclarations[{j}].parameters")
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
        if len(chat["tools"]) == 1 and mode == "ANY":
            return {"tool_choice": {"type": "function", "function": {"name": chat["tools"][0]["function"]["name"]}}}
    # Only ANY forces a call. VALIDATED lets the model answer in text or call one of the
    # (allowed) functions: the engine's "auto" over those, never "required".
    return {"tool_choice": "required" if mode == "ANY" else "auto"}
