"""The pure part of the token-in chat route: checking the ids and putting them in place of the
prompt vLLM rendered. No vLLM import here, so it is tested without vLLM (tests/unit/test_vllm_ext.py).

vLLM's ``OpenAIServingChat.create_chat_completion`` renders a request in ``_preprocess_chat``
(messages -> chat template -> tokenizer) and samples after the ``prompt_token_ids`` of the engine
prompt it returns. ``TokenInChatMixin`` overrides that one method: vLLM still parses and renders
the messages (so validation, tool-parser request adjustment and the conversation used for
parsing the answer are vLLM's own), then the engine prompt's ids are replaced with the request's.
Everything after -- sampling params, the context-length default for max_tokens, tool-call and
reasoning parsing, ``return_token_ids``, streaming -- is vLLM's code, unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

TOKENS_ROUTE = "/v1/chat/completions/tokens"  # as the reference server and prime-rl's server
TOKEN_IDS_FIELD = "prompt_token_ids"


class TokenInError(ValueError):
    """Bad token-in input; a ValueError, which vLLM's chat serving answers as a 400."""


def requested_max_tokens(request: Any) -> int | None:
    """The output limit the request names, as vLLM reads it (max_completion_tokens first)."""
    value = getattr(request, "max_completion_tokens", None)
    return getattr(request, "max_tokens", None) if value is None else value


def check_prompt_ids(ids: Any, *, vocab_size: int, max_model_len: int, max_tokens: int | None) -> list[int]:
    """The ids if they can be sampled after; otherwise TokenInError in vLLM's wording."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise TokenInError(f"'{TOKEN_IDS_FIELD}' must be a non-empty list of token ids")
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int):
            raise TokenInError(f"'{TOKEN_IDS_FIELD}' must be a list of integers")
        if not 0 <= t < vocab_size:
            raise TokenInError(f"Token id {t} is out of vocabulary")
    n = len(ids)
    if max_tokens is None and n >= max_model_len:
        raise TokenInError(f"This model's maximum context length is {max_model_len} tokens. However, your request "
                           f"has {n} input tokens. Please reduce the length of the input messages.")
    if max_tokens is not None and n + max_tokens > max_model_len:
        raise TokenInError(f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                           f"{n + max_tokens} tokens ({n} in the messages, {max_tokens} in the completion). "
                           "Please reduce the length of the messages or completion.")
    return list(ids)


def with_prompt_ids(preprocessed: Any, ids: list[int]) -> tuple:
    """``_preprocess_chat``'s result with the engine prompt sampling after ``ids``.

    vLLM <= 0.11 returns ``(conversation, request_prompts, engine_prompts)``, later versions
    ``(conversation, engine_prompts)``; an engine prompt is a ``TokensPrompt`` dict."""
    if not isinstance(preprocessed, tuple) or len(preprocessed) not in (2, 3):
        raise TypeError("unexpected _preprocess_chat result: this vLLM version is not supported by infra/vllm_ext")
    engine_prompts = preprocessed[-1]
    if not isinstance(engine_prompts, list) or len(engine_prompts) != 1 or not isinstance(engine_prompts[0], dict):
        raise TypeError("unexpected engine prompts: this vLLM version is not supported by infra/vllm_ext")
    prompt = dict(engine_prompts[0])
    if prompt.get("multi_modal_data") or prompt.get("prompt_embeds") is not None:
        raise TokenInError("token-in chat takes text-only prompts (multi-modal placeholders are the server's to render)")
    prompt["prompt_token_ids"] = list(ids)
    prompt.pop("prompt", None)  # the re-rendered text is not what is sampled after
    if len(preprocessed) == 3:
        # request_prompts only feed the request log, which takes a list of ids as well as text.
        return preprocessed[0], [list(ids)], [prompt]
    return preprocessed[0], [prompt]


def refusal(serving: Any) -> str | None:
    """Why this chat serving cannot take token-in requests, if it cannot."""
    if getattr(serving, "use_harmony", False):
        # gpt-oss requests are rendered by Harmony, not in _preprocess_chat: the ids would be ignored.
        return "token-in chat is not supported for Harmony (gpt-oss) models"
    return None


class TokenInChatMixin:
    """Put before vLLM's ``OpenAIServingChat`` in a subclass; requests without the ids field
    (vLLM's own route) pass through untouched."""

    async def _preprocess_chat(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        result = await super()._preprocess_chat(request, *args, **kwargs)  # type: ignore[misc]
        ids = getattr(request, TOKEN_IDS_FIELD, None)
        if ids is None:
            return result
        config = self.model_config  # type: ignore[attr-defined]
        max_len = getattr(self, "max_model_len", None) or config.max_model_len
        checked = check_prompt_ids(ids, vocab_size=config.get_vocab_size(), max_model_len=max_len,
                                   max_tokens=requested_max_tokens(request))
        return with_prompt_ids(result, checked)


def token_in_class(base: type) -> type:
    """``base`` (vLLM's chat serving class, or a subclass of it) with the token-in override."""
    return type(f"TokenIn{base.__name__}", (TokenInChatMixin, base), {})


def token_in_serving(state: Any) -> Any:
    """The app's chat serving (``state.openai_serving_chat``) with the token-in override: a
    shallow copy sharing its engine client, parsers and config, so vLLM's own object and route
    stay as they are. Built once per serving object."""
    serving = getattr(state, "openai_serving_chat", None)
    if serving is None:
        return None
    cached = getattr(state, "polar_token_in_chat", None)
    if cached is not None and cached[0] is serving:
        return cached[1]
    clone = copy.copy(serving)
    clone.__class__ = token_in_class(type(serving))
    state.polar_token_in_chat = (serving, clone)
    return clone


def error_status(error: Any) -> int:
    """The HTTP status of a vLLM ErrorResponse (``error.code`` since 0.10.1, ``code`` before)."""
    inner = getattr(error, "error", None)
    code = getattr(inner, "code", None) if inner is not None else getattr(error, "code", None)
    return int(code or 400)


def install_route(api_server: Any, router: Any) -> None:
    """Make ``api_server.build_app`` (looked up by vLLM's own run_server) include ``router``.
    Idempotent; the routes are added after vLLM's, and no vLLM route is replaced."""
    build_app = api_server.build_app
    if getattr(build_app, "_polar_token_in", False):
        return

    def build_app_with_token_in(*args: Any, **kwargs: Any) -> Any:
        app = build_app(*args, **kwargs)
        app.include_router(router)
        return app

    build_app_with_token_in._polar_token_in = True  # type: ignore[attr-defined]
    api_server.build_app = build_app_with_token_in
