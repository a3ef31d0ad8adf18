"""One question through each vendor's official SDK with an explicit output limit, spelt as each
API spells it (Chat's ``max_completion_tokens`` as pi sends it, Responses' ``max_output_tokens``,
Anthropic's ``max_tokens``, Gemini's ``maxOutputTokens``); and what each SDK raises on a context
overflow. Used by tests/inproc (SDKs over WSGI) and tests/proxy (real processes)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt

KINDS = ["chat", "responses", "anthropic", "google"]
PROVIDER_OF = {"chat": "openai_chat", "responses": "openai_responses", "anthropic": "anthropic", "google": "google"}
# What a harness of each API would name (the proxy may serve another model: records keep both).
VENDOR_MODEL = {"chat": "gpt-5", "responses": "gpt-5-codex", "anthropic": "claude-sonnet-4-5",
                "google": "gemini-2.5-pro"}
LONG_TEXT = "lorem ipsum dolor " * 100  # ~800 tokens with the tiny model's tokenizer


def real_clients(base: str, key: str) -> dict[str, Any]:
    """The official SDKs pointed at a running proxy (no retries: every call is counted)."""
    return {
        "openai": openai.OpenAI(base_url=f"{base}/s/{key}/v1", api_key=key, max_retries=0),
        # An explicit timeout: the SDK refuses a non-streamed 32000-token call under its default one.
        "anthropic": anthropic.Anthropic(base_url=f"{base}/s/{key}", api_key=key, max_retries=0, timeout=120),
        "google": genai.Client(api_key=key, http_options=gt.HttpOptions(
            base_url=f"{base}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1))),
    }


def ask(kind: str, c: dict[str, Any], model: str, max_tokens: int | None, *, text: str = "6*7?",
        stream: bool = False) -> str:
    """The answer's visible text (reasoning excluded)."""
    user = [{"role": "user", "content": text}]
    if kind == "chat":
        kw: dict[str, Any] = {"max_completion_tokens": max_tokens} if max_tokens is not None else {}
        if stream:
            chunks = c["openai"].chat.completions.create(model=model, messages=user, stream=True, **kw)
            return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        return c["openai"].chat.completions.create(model=model, messages=user, **kw).choices[0].message.content
    if kind == "responses":
        kw = {"max_output_tokens": max_tokens} if max_tokens is not None else {}
        if stream:
            with c["openai"].responses.stream(model=model, input=text, **kw) as s:
                return s.get_final_response().output_text
        return c["openai"].responses.create(model=model, input=text, **kw).output_text
    if kind == "anthropic":
        kw = {"model": model, "max_tokens": max_tokens, "messages": user}
        if stream:
            with c["anthropic"].messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = c["anthropic"].messages.create(**kw)
        return "".join(b.text for b in msg.content if b.type == "text")
    config = gt.GenerateContentConfig(max_output_tokens=max_tokens)
    if stream:
        parts = [p for ch in c["google"].models.generate_content_stream(model=model, contents=text, config=config)
                 for p in ch.candidates[0].content.parts]
    else:
        parts = c["google"].models.generate_content(model=model, contents=text, config=config).candidates[0].content.parts
    return "".join(p.text or "" for p in parts if not p.thought)


def overflow_seen(kind: str, err: BaseException, *, prompt_fits: bool) -> str:
    """Check that ``err`` is the SDK's own error for the vendor's context-overflow answer; returns
    its message."""
    if kind in ("chat", "responses"):
        assert isinstance(err, openai.BadRequestError), repr(err)
        assert err.status_code == 400 and err.code == "context_length_exceeded" and err.type == "invalid_request_error"
        return str(err.message)
    if kind == "anthropic":
        assert isinstance(err, anthropic.BadRequestError), repr(err)
        body = err.body
        assert isinstance(body, dict) and body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
        assert message.startswith("input length and `max_tokens` exceed context limit: " if prompt_fits
                                  else "prompt is too long: "), message
        return str(message)
    assert isinstance(err, genai_errors.ClientError), repr(err)
    assert err.code == 400 and err.status == "INVALID_ARGUMENT"
    assert err.message and err.message.startswith("The input token count ("), err.message
    return str(err.message)


def shown_message(kind: str, err: BaseException) -> str:
    """The message of an error answer as the caller's API put it (no SDK decoration)."""
    if kind in ("chat", "responses"):
        assert isinstance(err, openai.APIStatusError), repr(err)
        return str(err.body["message"])  # type: ignore[index]
    if kind == "anthropic":
        assert isinstance(err, anthropic.APIStatusError), repr(err)
        return str(err.body["error"]["message"])  # type: ignore[index]
    assert isinstance(err, genai_errors.APIError), repr(err)
    return str(err.message)
