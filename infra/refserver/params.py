"""Request parsing shared by every route and dialect: body decoding, typed fields, sampling.

Validation follows vLLM's messages where clients depend on them (the context-length wording,
"`tools` must be set", ...). Anything invalid raises APIError, which the app turns into a 4xx.
"""

from __future__ import annotations

import json

from flask import request

from .engine import ContextLengthError, ModelEngine

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs


class APIError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


# ------------------------------------------------------------------ request field validation

def body_json() -> dict:
    try:
        body = json.loads(request.get_data(cache=False) or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise APIError("Request body must be a JSON object")
    return body


def get_bool(body: dict, key: str, default: bool) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise APIError(f"'{key}' must be a boolean")
    return v


def get_int(body: dict, key: str, default, lo: int | None = None, hi: int | None = None):
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


def get_float(body: dict, key: str, default: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise APIError(f"'{key}' must be a number")
    return float(v)


def int_list(v, key: str) -> list[int]:
    if not isinstance(v, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in v):
        raise APIError(f"'{key}' must be a list of integers")
    return v


def token_ids(body: dict, key: str, engine: ModelEngine) -> list[int]:
    """A token-id prompt field: required, a non-empty list of in-vocabulary ids."""
    if body.get(key) is None:
        raise APIError(f"Field required: '{key}'")
    ids = int_list(body[key], key)
    if not ids:
        raise APIError(f"'{key}' must be a non-empty list of token ids")
    engine.check_token_ids(ids)  # ValueError -> 400 "Token id ... is out of vocabulary"
    return list(ids)


def sglang_sampling(params: dict) -> dict:
    """SGLang's sampling_params spellings (``sampling_seed``, ``no_stop_trim``) as the vLLM
    names sampling_args reads; the vLLM names are accepted too."""
    out = dict(params)
    if out.get("sampling_seed") is not None:
        out["seed"] = out.pop("sampling_seed")
    if out.get("no_stop_trim") is not None:
        out["include_stop_str_in_output"] = out.pop("no_stop_trim")
    return out


def sampling_args(body: dict, engine: ModelEngine) -> dict:
    temperature = get_float(body, "temperature", 1.0)
    if temperature < 0:
        raise APIError(f"'temperature' must be non-negative, got {temperature}")
    top_p = get_float(body, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise APIError(f"'top_p' must be in (0, 1], got {top_p}")
    top_k = get_int(body, "top_k", -1)
    if top_k < -1:
        raise APIError(f"'top_k' must be -1 (disable), 0 (disable) or at least 1, got {top_k}")
    _check_unapplied(body)
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    elif stop is None:
        stop = []
    elif not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise APIError("'stop' must be a string or a list of strings")
    stop_ids = int_list(body.get("stop_token_ids") or [], "stop_token_ids")
    try:
        engine.check_token_ids(stop_ids)
    except ValueError as exc:
        raise APIError(f"'stop_token_ids': {exc}") from None
    return {
        "temperature": temperature, "top_p": top_p, "top_k": top_k,
        "seed": get_int(body, "seed", None), "stop": stop, "stop_token_ids": stop_ids,
        "ignore_eos": get_bool(body, "ignore_eos", False),
        "include_stop_str_in_output": get_bool(body, "include_stop_str_in_output", False),
    }


def _check_unapplied(body: dict) -> None:
    """Sampling fields this server does not apply, refused out of vLLM's ranges with vLLM's
    words (SamplingParams' checks): what vLLM refuses must not pass here."""
    for key in ("presence_penalty", "frequency_penalty"):
        if not -2.0 <= (v := get_float(body, key, 0.0)) <= 2.0:
            raise APIError(f"{key} must be in [-2, 2], got {v}.")
    if (v := get_float(body, "repetition_penalty", 1.0)) <= 0.0:
        raise APIError(f"repetition_penalty must be greater than zero, got {v}.")
    if not 0.0 <= (v := get_float(body, "min_p", 0.0)) <= 1.0:
        raise APIError(f"min_p must be in [0, 1], got {v}.")
    min_tokens = get_int(body, "min_tokens", 0)
    if min_tokens < 0:
        raise APIError(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(limit, int) and not isinstance(limit, bool) and min_tokens > limit:
        raise APIError(f"min_tokens must be less than or equal to max_tokens={limit}, got {min_tokens}.")


def prompt_logprobs_k(body: dict):
    return get_int(body, "prompt_logprobs", None, 0, MAX_LOGPROBS)


def validate_tools(body: dict):
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


# Content parts only a multimodal model reads. The tiny model is text-only, and vLLM refuses these
# for a text-only model (400) rather than rendering the prompt without them, so must we: a prompt
# silently missing its screenshot would be recorded as what the policy saw.
MEDIA_PARTS = frozenset({"image_url", "image", "image_embeds", "input_image", "input_audio", "audio_url",
                         "video_url", "video", "file"})


def refuse_media(content, i: int) -> None:
    for j, part in enumerate(content if isinstance(content, list) else ()):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA_PARTS:
            raise APIError(f"this model is not a multimodal model: messages[{i}].content[{j}] is an "
                           f"'{kind}' part, which only a multimodal model can read")


def render_args(body: dict, *, read_effort: bool = True) -> dict:
    """Validated chat-template inputs shared by /v1/chat/completions and /tokenize.
    ``read_effort``: ``reasoning_effort`` reaches the template as both engines' chat routes hand
    it over (the kwarg ``reasoning_effort`` and, unless given, ``enable_thinking`` = effort !=
    "none"); vLLM's /tokenize has no such field and ignores it."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError("Field required: 'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(f"'messages[{i}]' must be an object with a string 'role'")
        refuse_media(m.get("content"), i)
    tools, _ = validate_tools(body)
    add_gen = get_bool(body, "add_generation_prompt", True)
    cont = get_bool(body, "continue_final_message", False)
    if add_gen and cont:
        raise APIError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise APIError("'chat_template_kwargs' must be an object")
    effort = body.get("reasoning_effort")
    if read_effort and effort is not None:
        if not isinstance(effort, str):
            raise APIError("'reasoning_effort' must be a string")
        kwargs = {**(kwargs or {}), "reasoning_effort": effort}
        kwargs.setdefault("enable_thinking", effort != "none")
    return {"messages": messages, "tools": tools, "add_generation_prompt": add_gen,
            "continue_final_message": cont, "chat_template_kwargs": kwargs}


def resolve_max_tokens(engine: ModelEngine, prompt_len: int, requested, default: int, check=None) -> int:
    """The output limit to generate with; ``check(engine, prompt_len, requested)`` refuses what
    does not fit, in its engine's words (the dialect's ``check_context``; vLLM's by default)."""
    (check or vllm_context_check)(engine, prompt_len, requested)
    if requested is not None:
        return requested
    return min(default, engine.max_model_len - prompt_len)


def vllm_context_check(engine: ModelEngine, prompt_len: int, requested) -> None:
    """vLLM's refusals: prompt + output over the context; with no output limit, a prompt that
    leaves no room."""
    if requested is not None:
        engine.check_context(prompt_len, requested)
    elif engine.max_model_len - prompt_len <= 0:
        raise ContextLengthError(
            f"This model's maximum context length is {engine.max_model_len} tokens. However, your request has "
            f"{prompt_len} input tokens. Please reduce the length of the input messages.")


def sglang_context_check(engine: ModelEngine, prompt_len: int, requested, *, chat: bool = False) -> None:
    """SGLang's refusals (tokenizer_manager's request validation), in its words: a prompt of the
    whole context, then prompt + output reaching it (SGLang keeps one token of the context free);
    its chat route first refuses an output limit over the whole context, before the prompt is read."""
    context = engine.max_model_len
    if chat and requested is not None and requested > context:
        raise ContextLengthError(f"max_completion_tokens is too large: {requested}.This model supports at most "
                                 f"{context} completion tokens.")
    if prompt_len >= context:
        raise ContextLengthError(f"The input ({prompt_len} tokens) is longer than the model's context length "
                                 f"({context} tokens).")
    if requested is not None and prompt_len + requested >= context:
        raise ContextLengthError(
            f"Requested token count exceeds the model's maximum context length of {context} tokens. You requested "
            f"a total of {prompt_len + requested} tokens: {prompt_len} tokens from the input messages and "
            f"{requested} tokens for the completion. Please reduce the number of tokens in the input messages or "
            "the completion to fit within the limit.")
