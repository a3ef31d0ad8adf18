"""Flask app speaking vLLM's (default) or SGLang's OpenAI-compatible dialect on top of ModelEngine.

Routes, request flow and output parsing live here; request fields are read by params.py and the
dialect-specific response shapes are built by dialects.py. Errors, context refusals included, are
worded and shaped as the dialect's engine does (vLLM ``{"error": {...}}``, SGLang's top-level
``{"object": "error", ...}``); bad input is a 4xx, never a 500. ``create_app`` returns a
plain Flask (WSGI) app; serve it with any threaded server.
"""

from __future__ import annotations

import json
import time
import uuid

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from .dialects import (
    SGLANG_WEIGHT_VERSION,
    TOKEN_IDS_FIELD,
    ChatResult,
    get_dialect,
    lp,
    prompt_logprobs,
    sorted_top,
    tok,
    usage,
)
from .engine import Generation, ModelEngine
from .hermes import parse_tool_calls
from .params import (
    MAX_LOGPROBS,
    APIError,
    body_json,
    get_bool,
    get_int,
    int_list,
    prompt_logprobs_k,
    render_args,
    resolve_max_tokens,
    sampling_args,
    sglang_context_check,
    sglang_sampling,
    token_ids,
    validate_tools,
)
from .policy import ScriptedPolicy
from .reasoning import split_reasoning

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError",
                413: "RequestEntityTooLargeError", 500: "InternalServerError"}


def _error(shape, message: str, status: int) -> Response:
    body = shape.error_body(message, status, _ERROR_TYPES.get(status, "APIError"))
    return Response(json.dumps(body), status=status, mimetype="application/json")


def _ok(obj) -> Response:
    # Compact, as vLLM's server (Starlette's JSONResponse) writes its answers.
    return Response(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), status=200, mimetype="application/json")


def parse_chat_output(text: str, parse_tools: bool) -> tuple[str | None, str | None, list[dict]]:
    """Generated text -> (reasoning, content, tool_calls): think block first, then hermes calls."""
    reasoning, content = split_reasoning(text)
    calls: list[dict] = []
    if parse_tools:
        content, calls = parse_tool_calls(content)
    if reasoning is not None and not content:
        content = None  # an answer that is only a think block (+ calls) has no content, as in vLLM
    return reasoning, content, calls


# ------------------------------------------------------------------ the app

MAX_REQUEST_BYTES = 64 * 2**20

def create_app(engine: ModelEngine, *, served_model_name: str = "tiny",
               policies: dict[str, ScriptedPolicy] | None = None, default_max_tokens: int = 256,
               dialect: str = "vllm", generate_policy: str | None = None) -> Flask:
    """dialect: "vllm" or "sglang", the engine whose response fields the app imitates.
    generate_policy: the policy SGLang's ``/generate`` plays (its requests name no model)."""
    shape = get_dialect(dialect)
    policies = dict(policies or {})
    if served_model_name in policies:
        raise ValueError(f"policy name {served_model_name!r} collides with the served model name")
    if generate_policy and generate_policy not in policies:
        raise ValueError(f"generate_policy {generate_policy!r} is not one of the policies")
    app = Flask("refserver")

    def chat_check(engine: ModelEngine, prompt_len: int, requested) -> None:
        shape.check_context(engine, prompt_len, requested, chat=True)
    # (a body the proxy would never send: its own limit is POLAR_MAX_REQUEST_BYTES, 64 MB)
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
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
        return _error(shape, exc.message, exc.status)

    @app.errorhandler(ValueError)
    def _value_error(exc: ValueError):  # ContextLengthError, ChatTemplateError, token-id checks
        return _error(shape, str(exc), 400)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        return _error(shape, exc.description or exc.name, exc.code or 500)

    @app.errorhandler(Exception)
    def _internal(exc: Exception):
        app.logger.exception("internal error")
        return _error(shape, f"Internal server error: {type(exc).__name__}: {exc}", 500)

    @app.get("/health")
    def health():
        return Response(status=200)

    @app.get("/v1/models")
    def models():
        data = [shape.model_card(m, engine, created) for m in [served_model_name, *policies]]
        return _ok({"object": "list", "data": data})

    def chat(body: dict, token_prompt: list[int] | None) -> Response:
        """One chat completion; ``token_prompt`` (token-in) replaces the rendered prompt ids, while
        the messages still choose a scripted turn and are still rendered, so a request the normal
        route would refuse (bad messages, tools, template kwargs) is refused here too."""
        model, policy = resolve_model(body)
        render = render_args(body)
        messages, tools = render["messages"], render["tools"]
        _, tool_choice = validate_tools(body)
        if get_int(body, "n", 1) != 1:
            raise APIError("'n' must be 1: the reference server returns a single choice")
        if get_bool(body, "stream", False):
            raise APIError("'stream': streaming is not supported by the reference server")
        want_lp = get_bool(body, "logprobs", False)
        n_top = get_int(body, "top_logprobs", None, 0, MAX_LOGPROBS)
        if n_top is not None and not want_lp:
            raise APIError("when using `top_logprobs`, `logprobs` must be set to true")
        opts = shape.chat_options(body)
        sampling = sampling_args(body, engine)
        max_tokens = get_int(body, "max_completion_tokens", None, 1)
        if max_tokens is None:
            max_tokens = get_int(body, "max_tokens", None, 1)

        rendered = engine.tokenize_chat(**render)
        prompt_ids = rendered if token_prompt is None else token_prompt
        top = (n_top or 0) if want_lp else None
        gen = None
        if policy is not None and policy.turn_for(messages) is not None:
            # A script turn is not cut to default_max_tokens: only an explicit limit truncates it.
            limit = resolve_max_tokens(engine, len(prompt_ids), max_tokens, engine.max_model_len, chat_check)
            gen = policy.respond(engine, messages, prompt_ids, max_tokens=limit, top_logprobs=top,
                                 stop=sampling["stop"], include_stop=sampling["include_stop_str_in_output"])
        if gen is None:
            limit = resolve_max_tokens(engine, len(prompt_ids), max_tokens, default_max_tokens, chat_check)
            gen = engine.generate(prompt_ids, max_tokens=limit, top_logprobs=top, **sampling)

        # Ids and logprobs cover everything sampled, think block included; only the text is split.
        reasoning, content, calls = parse_chat_output(gen.text, bool(tools) and tool_choice != "none")
        if body.get("parallel_tool_calls") is False:  # as vLLM: calls after the first are dropped (still sampled)
            calls = calls[:1]
        result = ChatResult(model, prompt_ids, gen, reasoning, content, calls, top, isinstance(tool_choice, dict))
        return _ok(shape.chat_response(engine, result, opts, int(time.time())))

    @app.post("/v1/chat/completions")
    def chat_completions():
        body = body_json()
        field = shape.chat_token_field  # SGLang's chat takes input_ids; vLLM ignores unknown fields
        ids = token_ids(body, field, engine) if field and body.get(field) is not None else None
        return chat(body, ids)

    if shape.tokens_route:
        @app.post(shape.tokens_route)
        def chat_completions_tokens():
            """Token-in chat (the vLLM extension's route): the chat request plus the prompt's ids."""
            body = body_json()
            return chat(body, token_ids(body, TOKEN_IDS_FIELD, engine))

    @app.post("/v1/completions")
    def completions():
        body = body_json()
        model, policy = resolve_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of exactly one prompt
        if isinstance(prompt, str):
            if not prompt:
                raise APIError("'prompt' must not be empty")
            prompt_ids = engine.tokenize_text(prompt, get_bool(body, "add_special_tokens", True))
            prompt_text = prompt
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            engine.check_token_ids(prompt)
            prompt_ids, prompt_text = list(prompt), engine.decode(prompt, skip_special_tokens=False)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise APIError("'prompt': only one prompt per request is supported")
        else:
            raise APIError("'prompt' must be a non-empty string or a non-empty list of token ids")
        if get_int(body, "n", 1) != 1:
            raise APIError("'n' must be 1: the reference server returns a single choice")
        if get_bool(body, "stream", False):
            raise APIError("'stream': streaming is not supported by the reference server")
        k = get_int(body, "logprobs", None, 0, MAX_LOGPROBS)
        prompt_k = prompt_logprobs_k(body)
        echo = get_bool(body, "echo", False)
        as_ids = get_bool(body, "return_tokens_as_token_ids", False)
        return_ids = get_bool(body, "return_token_ids", False)
        sampling = sampling_args(body, engine)
        if "max_tokens" in body and body["max_tokens"] is None:
            requested = None  # explicit null: whatever the context allows, as in vLLM
        else:
            requested = get_int(body, "max_tokens", 16, 0)
        limit = resolve_max_tokens(engine, len(prompt_ids), requested, engine.max_model_len, shape.check_context)
        gen = scripted(policy, prompt_ids, limit, k, sampling)
        if gen is None and limit > 0:
            gen = engine.generate(prompt_ids, max_tokens=limit, top_logprobs=k, **sampling)
        elif gen is None:
            gen = Generation([], [], "length", None, "", [] if k is not None else None)

        logprobs = None
        if k is not None:
            ids, lps, tops = list(gen.token_ids), list(gen.logprobs), list(gen.top_logprobs or [])
            if echo:
                entries = engine.score_top(prompt_ids, 1, k) if len(prompt_ids) > 1 else []
                ids = prompt_ids + ids
                lps = [None] + [e[t][0] for e, t in zip(entries, prompt_ids[1:])] + lps
                tops = [None] + entries + tops
            tokens = [tok(engine, t, as_ids) for t in ids]
            offsets, pos = [], 0
            for s in tokens:
                offsets.append(pos)
                pos += len(s)
            logprobs = {
                "tokens": tokens, "token_logprobs": [None if v is None else lp(v) for v in lps],
                "top_logprobs": [None if e is None else
                                 {tok(engine, t, as_ids): lp(v[0]) for t, v in e.items()} for e in tops],
                "text_offset": offsets,
            }
        choice: dict = {"index": 0, "text": (prompt_text if echo else "") + gen.text, "logprobs": logprobs,
                        "finish_reason": gen.finish_reason, "stop_reason": gen.stop_reason,
                        "prompt_logprobs": prompt_logprobs(engine, prompt_ids, prompt_k) if prompt_k is not None else None}
        if return_ids:
            choice["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = gen.token_ids
        return _ok({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                    "model": model, "choices": [choice], "usage": usage(len(prompt_ids), len(gen.token_ids))})

    @app.post("/generate")
    def generate():
        """SGLang's native API (token ids in, ``meta_info`` logprob tuples out): what the verifier
        scores with under the SGLang engine (``logprob_start_len`` 0 = every input token) and the
        proxy's token-in path for SGLang. It names no model: ``generate_policy`` plays here."""
        body = body_json()
        ids = body.get("input_ids")
        if isinstance(body.get("text"), str) and ids is None:
            ids = engine.tokenize_text(body["text"], True)
        ids = int_list(ids, "input_ids")
        if not ids:
            raise APIError("'input_ids' must be a non-empty list of token ids")
        engine.check_token_ids(ids)
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise APIError("'sampling_params' must be an object")
        # Absent: SGLang's default of 128; an explicit null: the room left, as SGLang's scheduler fills it.
        requested = None if "max_new_tokens" in params and params["max_new_tokens"] is None else \
            get_int(params, "max_new_tokens", 128, 0)
        limit = resolve_max_tokens(engine, len(ids), requested, engine.max_model_len, sglang_context_check)
        sampling = sampling_args(sglang_sampling(params), engine)
        want_lp = get_bool(body, "return_logprob", False)
        k = get_int(body, "top_logprobs_num", 0, 0, MAX_LOGPROBS) if want_lp else 0
        gen = scripted(policies.get(generate_policy) if generate_policy else None, ids, limit, k or None, sampling)
        if gen is None:
            gen = (engine.generate(ids, max_tokens=limit, top_logprobs=k or None, **sampling) if limit > 0
                   else Generation([], [], "length", None, "", None))
        # SGLang names the id it matched, the tokenizer's EOS included (vLLM leaves that null).
        matched = gen.stop_reason if gen.stop_reason is not None or not gen.token_ids else gen.token_ids[-1]
        meta: dict = {"id": uuid.uuid4().hex, "prompt_tokens": len(ids), "completion_tokens": len(gen.token_ids),
                      "cached_tokens": 0, "weight_version": SGLANG_WEIGHT_VERSION,
                      "finish_reason": ({"type": "length", "length": limit} if gen.finish_reason == "length"
                                        else {"type": "stop", "matched": matched})}
        if want_lp:
            text_of = engine.token_text if get_bool(body, "return_text_in_logprobs", False) else (lambda t: None)
            start = get_int(body, "logprob_start_len", -1)
            if start >= 0:
                scored = engine.score(ids, max(1, start)) if len(ids) > max(1, start) else []
                values = ([None] if start == 0 else []) + scored
                meta["input_token_logprobs"] = [[None if v is None else lp(v), t, text_of(t)]
                                                for v, t in zip(values, ids[start:])]
            meta["output_token_logprobs"] = [[lp(v), t, text_of(t)] for v, t in zip(gen.logprobs, gen.token_ids)]
            if k:
                meta["output_top_logprobs"] = [[[lp(v), t, text_of(t)] for t, v in sorted_top(e, k)]
                                               for e in gen.top_logprobs or []]
        return _ok({"text": gen.text, "output_ids": gen.token_ids, "meta_info": meta})

    @app.post("/tokenize")
    def tokenize():
        body = body_json()
        resolve_model(body)
        if "messages" in body:
            render = render_args(body, read_effort=shape.tokenize_reads_effort)
            ids = engine.tokenize_text(engine.render_chat(**render), get_bool(body, "add_special_tokens", False))
        elif isinstance(body.get("prompt"), str):
            ids = engine.tokenize_text(body["prompt"], get_bool(body, "add_special_tokens", True))
        else:
            raise APIError("Field required: 'prompt' (a string) or 'messages'")
        return _ok(shape.tokenize_response(engine, ids, body))

    @app.post("/detokenize")
    def detokenize():
        body = body_json()
        resolve_model(body)
        ids = int_list(body.get("tokens"), "tokens")
        engine.check_token_ids(ids)
        return _ok(shape.detokenize_response(engine, ids, body))

    def scripted(policy: ScriptedPolicy | None, prompt_ids: list[int], limit: int, k: int | None, sampling: dict):
        """A script's turn for a token-id prompt (turn read from its ChatML text), or None."""
        if policy is None or limit <= 0:
            return None
        turn = policy.turn_for_prompt(engine.decode(prompt_ids, skip_special_tokens=False))
        return None if turn is None else policy.play(engine, turn, prompt_ids, max_tokens=limit, top_logprobs=k,
                                                     stop=sampling["stop"],
                                                     include_stop=sampling["include_stop_str_in_output"])

    return app

