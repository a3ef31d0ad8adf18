"""Flask app speaking vLLM's OpenAI-compatible dialect on top of ModelEngine.

Field names and shapes follow vLLM (0.10.2+): ``return_token_ids`` adds ``prompt_token_ids`` /
``token_ids``, ``prompt_logprobs`` entries are ``{"<id>": {"logprob", "rank", "decoded_token"}}``,
``stop_reason`` sits next to ``finish_reason``, errors are ``{"error": {...}}``. Bad input is a 4xx,
never a 500. ``create_app`` returns a plain Flask (WSGI) app; serve it with any threaded server.
"""

from __future__ import annotations

import json
import time
import uuid

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from .engine import ContextLengthError, Generation, ModelEngine
from .hermes import parse_tool_calls
from .policy import ScriptedPolicy

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError",
                413: "RequestEntityTooLargeError", 500: "InternalServerError"}


class APIError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


def _error(message: str, status: int) -> Response:
    err = {"message": message, "type": _ERROR_TYPES.get(status, "APIError"), "param": None, "code": status}
    return Response(json.dumps({"error": err}), status=status, mimetype="application/json")


def _ok(obj) -> Response:
    return Response(json.dumps(obj, ensure_ascii=False), status=200, mimetype="application/json")


# ------------------------------------------------------------------ request field validation

def _body() -> dict:
    try:
        body = json.loads(request.get_data(cache=False) or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise APIError("Request body must be a JSON object")
    return body


def _bool(body: dict, key: str, default: bool) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise APIError(f"'{key}' must be a boolean")
    return v


def _int(body: dict, key: str, default, lo: int | None = None, hi: int | None = None):
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise APIError(f"'{key}' must be an integer")
    if lo is not None and v < lo:
        raise APIError(f"'{key}' must be at least {lo}, got {v}")
    if hi is not None and v > hi:
        raise APIError(f"'{key}' must be at most {hi}, got {v}")
    return v


def _float(body: dict, key: str, default: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise APIError(f"'{key}' must be a number")
    return float(v)


def _int_list(v, key: str) -> list[int]:
    if not isinstance(v, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in v):
        raise APIError(f"'{key}' must be a list of integers")
    return v


def _sampling(body: dict, engine: ModelEngine) -> dict:
    temperature = _float(body, "temperature", 1.0)
    if temperature < 0:
        raise APIError(f"'temperature' must be non-negative, got {temperature}")
    top_p = _float(body, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise APIError(f"'top_p' must be in (0, 1], got {top_p}")
    top_k = _int(body, "top_k", -1)
    if top_k < -1:
        raise APIError(f"'top_k' must be -1 (disable), 0 (disable) or at least 1, got {top_k}")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    elif stop is None:
        stop = []
    elif not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise APIError("'stop' must be a string or a list of strings")
    stop_ids = _int_list(body.get("stop_token_ids") or [], "stop_token_ids")
    try:
        engine.check_token_ids(stop_ids)
    except ValueError as exc:
        raise APIError(f"'stop_token_ids': {exc}") from None
    return {
        "temperature": temperature, "top_p": top_p, "top_k": top_k,
        "seed": _int(body, "seed", None), "stop": stop, "stop_token_ids": stop_ids,
        "ignore_eos": _bool(body, "ignore_eos", False),
        "include_stop_str_in_output": _bool(body, "include_stop_str_in_output", False),
    }


def _prompt_logprobs_k(body: dict):
    return _int(body, "prompt_logprobs", None, 0, MAX_LOGPROBS)


def _validate_tools(body: dict):
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            raise APIError("'tools' must be a non-empty list when given ([] is too short - 'tools')")
        for i, t in enumerate(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise APIError(f"'tools[{i}]' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
    if choice is None:
        return tools, "auto" if tools else "none"
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if not isinstance(name, str):
            raise APIError("'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}")
        if not tools or name not in {t["function"]["name"] for t in tools}:
            raise APIError(f"Tool '{name}' has not been passed in `tools`.")
    elif choice not in ("none", "auto", "required"):
        raise APIError("'tool_choice' must be 'none', 'auto', 'required' or a named function object")
    elif choice != "none" and not tools:
        raise APIError("When using `tool_choice`, `tools` must be set.")
    return tools, choice


def _render_args(body: dict) -> dict:
    """Validated chat-template inputs shared by /v1/chat/completions and /tokenize."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError("Field required: 'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(f"'messages[{i}]' must be an object with a string 'role'")
    tools, _ = _validate_tools(body)
    add_gen = _bool(body, "add_generation_prompt", True)
    cont = _bool(body, "continue_final_message", False)
    if add_gen and cont:
        raise APIError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise APIError("'chat_template_kwargs' must be an object")
    return {"messages": messages, "tools": tools, "add_generation_prompt": add_gen,
            "continue_final_message": cont, "chat_template_kwargs": kwargs}


def _resolve_max_tokens(engine: ModelEngine, prompt_len: int, requested, default: int) -> int:
    if requested is not None:
        engine.check_context(prompt_len, requested)
        return requested
    remaining = engine.max_model_len - prompt_len
    if remaining <= 0:
        raise ContextLengthError(
            f"This model's maximum context length is {engine.max_model_len} tokens. However, your request has "
            f"{prompt_len} input tokens. Please reduce the length of the input messages.")
    return min(default, remaining)


# ------------------------------------------------------------------ response pieces

def _lp(v: float) -> float:
    return max(float(v), -9999.0)


def _tok(engine: ModelEngine, tid: int, as_ids: bool) -> str:
    return f"token_id:{tid}" if as_ids else engine.token_text(tid)


def _sorted_top(entry: dict, k: int) -> list[tuple[int, float]]:
    """The k best of an engine top-logprobs entry, best first."""
    return sorted(((t, v[0]) for t, v in entry.items()), key=lambda x: (-x[1], x[0]))[:k]


def _chat_logprobs(engine: ModelEngine, gen: Generation, k: int, as_ids: bool) -> dict:
    content = []
    for i, (tid, lp) in enumerate(zip(gen.token_ids, gen.logprobs)):
        top = _sorted_top(gen.top_logprobs[i], k) if gen.top_logprobs else []
        text = engine.token_text(tid)
        content.append({
            "token": _tok(engine, tid, as_ids), "logprob": _lp(lp),
            "bytes": list(text.encode("utf-8", errors="replace")),
            "top_logprobs": [{"token": _tok(engine, t, as_ids), "logprob": _lp(v),
                              "bytes": list(engine.token_text(t).encode("utf-8", errors="replace"))}
                             for t, v in top],
        })
    return {"content": content}


def _prompt_logprobs(engine: ModelEngine, prompt_ids: list[int], k: int) -> list:
    entries = engine.score_top(prompt_ids, 1, k) if len(prompt_ids) > 1 else []
    return [None] + [
        {str(t): {"logprob": _lp(lp), "rank": rank, "decoded_token": engine.token_text(t)}
         for t, (lp, rank) in e.items()}
        for e in entries
    ]


def _usage(prompt_len: int, completion_len: int) -> dict:
    return {"prompt_tokens": prompt_len, "completion_tokens": completion_len,
            "total_tokens": prompt_len + completion_len}


# ------------------------------------------------------------------ the app

def create_app(engine: ModelEngine, *, served_model_name: str = "tiny",
               policies: dict[str, ScriptedPolicy] | None = None, default_max_tokens: int = 256) -> Flask:
    policies = dict(policies or {})
    if served_model_name in policies:
        raise ValueError(f"policy name {served_model_name!r} collides with the served model name")
    app = Flask("refserver")
    created = int(time.time())

    def resolve_model(body: dict) -> tuple[str, ScriptedPolicy | None]:
        model = body.get("model")
        if model is None:
            return served_model_name, None
        if not isinstance(model, str):
            raise APIError("'model' must be a string")
        if model == served_model_name or model in policies:
            return model, policies.get(model)
        raise APIError(f"The model `{model}` does not exist.", 404)

    @app.errorhandler(APIError)
    def _api_error(exc: APIError):
        return _error(exc.message, exc.status)

    @app.errorhandler(ValueError)
    def _value_error(exc: ValueError):  # ContextLengthError, ChatTemplateError, token-id checks
        return _error(str(exc), 400)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        return _error(exc.description or exc.name, exc.code or 500)

    @app.errorhandler(Exception)
    def _internal(exc: Exception):
        app.logger.exception("internal error")
        return _error(f"Internal server error: {type(exc).__name__}: {exc}", 500)

    @app.get("/health")
    def health():
        return Response(status=200)

    @app.get("/v1/models")
    def models():
        ids = [served_model_name, *policies]
        data = [{"id": m, "object": "model", "created": created, "owned_by": "vllm",
                 "root": engine.model_dir or served_model_name, "parent": None,
                 "max_model_len": engine.max_model_len, "permission": []} for m in ids]
        return _ok({"object": "list", "data": data})

    @app.post("/v1/chat/completions")
    def chat_completions():
        body = _body()
        model, policy = resolve_model(body)
        render = _render_args(body)
        messages, tools = render["messages"], render["tools"]
        _, tool_choice = _validate_tools(body)
        if _int(body, "n", 1) != 1:
            raise APIError("'n' must be 1: the reference server returns a single choice")
        if _bool(body, "stream", False):
            raise APIError("'stream': streaming is not supported by the reference server")
        want_lp = _bool(body, "logprobs", False)
        n_top = _int(body, "top_logprobs", None, 0, MAX_LOGPROBS)
        if n_top is not None and not want_lp:
            raise APIError("when using `top_logprobs`, `logprobs` must be set to true")
        prompt_k = _prompt_logprobs_k(body)
        as_ids = _bool(body, "return_tokens_as_token_ids", False)
        return_ids = _bool(body, "return_token_ids", False)
        sampling = _sampling(body, engine)
        max_tokens = _int(body, "max_completion_tokens", None, 1)
        if max_tokens is None:
            max_tokens = _int(body, "max_tokens", None, 1)

        prompt_ids = engine.tokenize_chat(**render)
        top = (n_top or 0) if want_lp else None
        gen = None
        if policy is not None and policy.turn_for(messages) is not None:
            # A script turn is not cut to default_max_tokens: only an explicit limit truncates it.
            limit = _resolve_max_tokens(engine, len(prompt_ids), max_tokens, engine.max_model_len)
            gen = policy.respond(engine, messages, prompt_ids, max_tokens=limit, top_logprobs=top)
        if gen is None:
            limit = _resolve_max_tokens(engine, len(prompt_ids), max_tokens, default_max_tokens)
            gen = engine.generate(prompt_ids, max_tokens=limit, top_logprobs=top, **sampling)

        content, calls = gen.text, []
        if tools and tool_choice != "none":
            content, calls = parse_tool_calls(gen.text)
        finish = "tool_calls" if calls and gen.finish_reason == "stop" else gen.finish_reason
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        message["reasoning"] = None
        choice: dict = {"index": 0, "message": message,
                        "logprobs": _chat_logprobs(engine, gen, top or 0, as_ids) if want_lp else None,
                        "finish_reason": finish, "stop_reason": gen.stop_reason}
        if return_ids:
            choice["token_ids"] = gen.token_ids
        resp = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [choice], "usage": _usage(len(prompt_ids), len(gen.token_ids)),
                "prompt_logprobs": _prompt_logprobs(engine, prompt_ids, prompt_k) if prompt_k is not None else None}
        if return_ids:
            resp["prompt_token_ids"] = prompt_ids
        return _ok(resp)

    @app.post("/v1/completions")
    def completions():
        body = _body()
        model, _ = resolve_model(body)  # scripts only drive chat; the id is still a valid name here
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of exactly one prompt
        if isinstance(prompt, str):
            if not prompt:
                raise APIError("'prompt' must not be empty")
            prompt_ids = engine.tokenize_text(prompt, _bool(body, "add_special_tokens", True))
            prompt_text = prompt
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            engine.check_token_ids(prompt)
            prompt_ids, prompt_text = list(prompt), engine.decode(prompt, skip_special_tokens=False)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise APIError("'prompt': only one prompt per request is supported")
        else:
            raise APIError("'prompt' must be a non-empty string or a non-empty list of token ids")
        if _int(body, "n", 1) != 1:
            raise APIError("'n' must be 1: the reference server returns a single choice")
        if _bool(body, "stream", False):
            raise APIError("'stream': streaming is not supported by the reference server")
        k = _int(body, "logprobs", None, 0, MAX_LOGPROBS)
        prompt_k = _prompt_logprobs_k(body)
        echo = _bool(body, "echo", False)
        as_ids = _bool(body, "return_tokens_as_token_ids", False)
        return_ids = _bool(body, "return_token_ids", False)
        sampling = _sampling(body, engine)
        if "max_tokens" in body and body["max_tokens"] is None:
            requested = None  # explicit null: whatever the context allows, as in vLLM
        else:
            requested = _int(body, "max_tokens", 16, 0)
        limit = _resolve_max_tokens(engine, len(prompt_ids), requested, engine.max_model_len)
        if limit > 0:
            gen = engine.generate(prompt_ids, max_tokens=limit, top_logprobs=k, **sampling)
        else:
            gen = Generation([], [], "length", None, "", [] if k is not None else None)

        logprobs = None
        if k is not None:
            ids, lps, tops = list(gen.token_ids), list(gen.logprobs), list(gen.top_logprobs or [])
            if echo:
                entries = engine.score_top(prompt_ids, 1, k) if len(prompt_ids) > 1 else []
                ids = prompt_ids + ids
                lps = [None] + [e[t][0] for e, t in zip(entries, prompt_ids[1:])] + lps
                tops = [None] + entries + tops
            tokens = [_tok(engine, t, as_ids) for t in ids]
            offsets, pos = [], 0
            for s in tokens:
                offsets.append(pos)
                pos += len(s)
            logprobs = {
                "tokens": tokens, "token_logprobs": [None if v is None else _lp(v) for v in lps],
                "top_logprobs": [None if e is None else
                                 {_tok(engine, t, as_ids): _lp(v[0]) for t, v in e.items()} for e in tops],
                "text_offset": offsets,
            }
        choice: dict = {"index": 0, "text": (prompt_text if echo else "") + gen.text, "logprobs": logprobs,
                        "finish_reason": gen.finish_reason, "stop_reason": gen.stop_reason,
                        "prompt_logprobs": _prompt_logprobs(engine, prompt_ids, prompt_k) if prompt_k is not None else None}
        if return_ids:
            choice["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = gen.token_ids
        return _ok({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                    "model": model, "choices": [choice], "usage": _usage(len(prompt_ids), len(gen.token_ids))})

    @app.post("/tokenize")
    def tokenize():
        body = _body()
        resolve_model(body)
        if "messages" in body:
            ids = engine.tokenize_text(engine.render_chat(**_render_args(body)),
                                       _bool(body, "add_special_tokens", False))
        elif isinstance(body.get("prompt"), str):
            ids = engine.tokenize_text(body["prompt"], _bool(body, "add_special_tokens", True))
        else:
            raise APIError("Field required: 'prompt' (a string) or 'messages'")
        out = {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids}
        if _bool(body, "return_token_strs", False):
            out["token_strs"] = engine.token_strs(ids)
        return _ok(out)

    @app.post("/detokenize")
    def detokenize():
        body = _body()
        resolve_model(body)
        ids = _int_list(body.get("tokens"), "tokens")
        engine.check_token_ids(ids)
        return _ok({"prompt": engine.decode(ids, skip_special_tokens=False)})

    return app

