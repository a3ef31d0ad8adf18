"""The pure parts of fitting a call into the engine's context: reading engines' refusals (verbatim
wordings of the releases named), the clamp arithmetic, the context-length cache, and each
provider's own shape of the overflow error (as its vendor words it)."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import Settings
from proxy.context_limits import (
    CLAMP,
    REFUSE,
    ContextLengths,
    EngineRefusal,
    cut_input,
    fit_output,
    no_prompt_fits,
    read_refusal,
    truncation_cuts,
    truncation_target,
)
from proxy.errors import ContextOverflow, UpstreamError
from proxy.providers import PROVIDERS, Parsed

# --- reading an engine's refusal ----------------------------------------------------------------


@pytest.mark.parametrize("message, refusal", [
    # vLLM <= 0.10 (serving_engine.py) and the reference server (infra/refserver/engine.py)
    ("This model's maximum context length is 8192 tokens. However, you requested 9064 tokens (9000 in the "
     "messages, 64 in the completion). Please reduce the length of the messages or completion.",
     EngineRefusal(8192, 9000, True)),
    # vLLM 0.11: the prompt alone, and max_tokens over the rest
    ("This model's maximum context length is 8192 tokens. However, your request has 9000 input tokens. "
     "Please reduce the length of the input messages.", EngineRefusal(8192, 9000, True)),
    ("'max_tokens' or 'max_completion_tokens' is too large: 64. This model's maximum context length is 8192 "
     "tokens and your request has 8150 input tokens (64 > 8192 - 8150).", EngineRefusal(8192, 8150, True)),
    # vLLM's renderer (2026): exact, truncated (a lower bound), characters only, output over the context
    ("This model's maximum context length is 8192 tokens. However, you requested 64 output tokens and your "
     "prompt contains 10000 input tokens, for a total of 10064 tokens.", EngineRefusal(8192, 10000, True)),
    ("This model's maximum context length is 32768 tokens. However, you requested 32000 output tokens and your "
     "prompt contains at least 769 input tokens, for a total of at least 32769 tokens. Please reduce the length "
     "of the input prompt or the number of requested output tokens.", EngineRefusal(32768, 769, False)),
    ("This model's maximum context length is 8192 tokens. However, you requested 64 output tokens and your prompt "
     "contains 100000 characters (more than 81280 characters, which is the upper bound for 8128 input tokens).",
     EngineRefusal(8192, None, False)),
    ("You passed 8129 input tokens and requested 64 output tokens. However, the model's context length is only "
     "8192 tokens, resulting in a maximum input length of 8128 tokens.", EngineRefusal(8192, 8129, False)),
    ("max_completion_tokens=131072 cannot be greater than max_model_len=max_total_tokens=65536. Please request "
     "fewer output tokens.", EngineRefusal(65536, None, False)),
    # SGLang (tokenizer_manager.py): prompt + output, the prompt alone
    ("Requested token count exceeds the model's maximum context length of 64000 tokens. You requested a total of "
     "71897 tokens: 7897 tokens from the input messages and 64000 tokens for the completion.",
     EngineRefusal(64000, 7897, True)),
    ("The input (10009 tokens) is longer than the model's context length (128 tokens).",
     EngineRefusal(128, 10009, True)),
    # SGLang's chat route (serving_chat._validate_request): an output limit over the context, its
    # own spacing; the prompt is not read yet
    ("max_completion_tokens is too large: 32000.This model supports at most 4096 completion tokens.",
     EngineRefusal(4096, None, False)),
    # vLLM's engine-level check (the processor's _validate_model_input)
    ("The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that "
     "`max_model_len` is no smaller than the number of text tokens.", EngineRefusal(8192, 9000, True)),
])
def test_engine_refusals_are_read(message, refusal):
    assert read_refusal(message) == refusal


@pytest.mark.parametrize("message", [
    "The model `gpt-5` does not exist.", "'messages' must be a non-empty list",
    "max_tokens must be at least 1, got 0", "top_logprobs cannot be greater than 20",
    # OpenAI's refusal of an output limit over a model's output cap: not its context length
    "max_tokens is too large: 32000. This model supports at most 16384 completion tokens, whereas you "
    "provided 32000.",
])
def test_other_refusals_are_not_about_the_context(message):
    assert read_refusal(message) is None


# --- the arithmetic -------------------------------------------------------------------------------

@pytest.mark.parametrize("requested, prompt, reserve, expected", [
    (100, 50, 0, 100),  # fits: untouched
    (206, 50, 0, 206),  # fills the context exactly
    (32000, 50, 0, 206),  # clamped to the room left
    (32000, 50, 1, 205),  # SGLang keeps one token free
    (None, 50, 0, 206),  # no limit asked: the room left
    (32000, 255, 0, 1),  # one token of room is still room
])
def test_clamp(requested, prompt, reserve, expected):
    assert fit_output(requested, prompt, 256, reserve=reserve, mode=CLAMP) == expected


@pytest.mark.parametrize("prompt, reserve", [(256, 0), (300, 0), (255, 1)])
def test_a_prompt_that_leaves_no_room_overflows_whatever_the_mode(prompt, reserve):
    for mode in (CLAMP, REFUSE):
        with pytest.raises(ContextOverflow) as info:
            fit_output(10, prompt, 256, reserve=reserve, mode=mode)
        err = info.value
        assert not err.prompt_fits and err.prompt_tokens == prompt and err.max_prompt_tokens == 255 - reserve
        assert err.status == 400 and err.code == "context_length_exceeded" and err.type == "invalid_request_error"


def test_refuse_keeps_what_fits_and_refuses_what_does_not():
    assert fit_output(100, 50, 256, mode=REFUSE) == 100
    with pytest.raises(ContextOverflow) as info:
        fit_output(32000, 50, 256, mode=REFUSE)
    assert info.value.prompt_fits and (info.value.prompt_tokens, info.value.output_tokens) == (50, 32000)
    assert "you requested 32050 tokens (50 in the messages, 32000 in the completion)" in info.value.message


def test_a_limit_no_prompt_can_fit():
    assert no_prompt_fits(256, 256) and no_prompt_fits(255, 256, reserve=1)
    assert not no_prompt_fits(255, 256) and not no_prompt_fits(None, 256)


# --- where the context length comes from -----------------------------------------------------------

def test_the_setting_wins_without_asking_the_engine():
    asked = []
    lengths = ContextLengths(4096, lambda e: asked.append(e) or [])
    assert lengths.known("http://a", "m") == 4096 and lengths.learn("http://a", "m", 8192) == 4096
    assert asked == []


def test_model_cards_are_asked_once_per_endpoint_and_cached_per_model():
    asked = []
    cards = {"http://a": [{"id": "m", "max_model_len": 256}, {"id": "n", "max_model_len": 512}],
             "http://b": [{"id": "served-name", "max_model_len": 1024}]}
    lengths = ContextLengths(None, lambda e: asked.append(e) or cards[e])
    assert lengths.known("http://a", "m") is None  # nothing learnt before a refusal
    assert lengths.learn("http://a", "m", 999) == 256 and lengths.learn("http://a", "n", None) == 512
    assert lengths.learn("http://b", "alias", None) == 1024  # one engine behind another name
    assert lengths.learn("http://a", "other", 300) == 300  # not listed, cards disagree: the refusal's
    assert lengths.known("http://a", "m") == 256 and asked == ["http://a", "http://b"]


def test_an_engine_without_cards_falls_back_to_what_its_refusal_said():
    def fail(endpoint):
        raise UpstreamError("no /v1/models")

    lengths = ContextLengths(None, fail)
    assert lengths.learn("http://a", "m", 2048) == 2048 and lengths.known("http://a", "m") == 2048
    assert ContextLengths(None, fail).learn("http://a", "m", None) is None


def test_settings_read_both_variables():
    s = Settings.from_env({"POLAR_UPSTREAM_CONTEXT_LENGTH": "4096", "POLAR_CONTEXT_OVERFLOW": "refuse"})
    assert (s.upstream_context_length, s.context_overflow) == (4096, "refuse")
    assert (Settings.from_env({}).upstream_context_length, Settings.from_env({}).context_overflow) == (None, "clamp")
    with pytest.raises(ConfigError, match="POLAR_CONTEXT_OVERFLOW"):
        Settings.from_env({"POLAR_CONTEXT_OVERFLOW": "truncate"})


# --- each provider's own shape of the overflow --------------------------------------------------------

PROMPT_TOO_LONG = ContextOverflow(prompt_tokens=900, context_length=256, max_prompt_tokens=255)
OUTPUT_TOO_LONG = ContextOverflow(prompt_tokens=50, context_length=256, max_prompt_tokens=255, output_tokens=32000)


def test_openai_chat_words_it_as_openai_does():
    assert PROVIDERS["openai_chat"].error(PROMPT_TOO_LONG) == {"error": {
        "message": "This model's maximum context length is 256 tokens. However, your messages resulted in 900 "
                   "tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
    assert PROVIDERS["openai_chat"].error(OUTPUT_TOO_LONG)["error"]["message"] == (
        "This model's maximum context length is 256 tokens. However, you requested 32050 tokens (50 in the "
        "messages, 32000 in the completion). Please reduce the length of the messages or completion.")


def test_openai_responses_words_it_as_the_responses_api_does():
    assert PROVIDERS["openai_responses"].error(PROMPT_TOO_LONG) == {"error": {
        "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}
    assert PROVIDERS["openai_responses"].error(OUTPUT_TOO_LONG)["error"]["code"] == "context_length_exceeded"


def test_anthropic_words_it_as_anthropic_does():
    assert PROVIDERS["anthropic"].error(PROMPT_TOO_LONG) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 900 tokens > 255 maximum"}, "request_id": None}
    assert PROVIDERS["anthropic"].error(OUTPUT_TOO_LONG)["error"]["message"] == (
        "input length and `max_tokens` exceed context limit: 50 + 32000 > 256, decrease input length or "
        "`max_tokens` and try again")


def test_gemini_words_it_as_gemini_does():
    assert PROVIDERS["google"].error(PROMPT_TOO_LONG) == {"error": {
        "code": 400, "message": "The input token count (900) exceeds the maximum number of tokens allowed (255).",
        "status": "INVALID_ARGUMENT"}}
    assert PROVIDERS["google"].error(OUTPUT_TOO_LONG)["error"]["message"].startswith("The input token count (50) ")


def _events(chunks):
    return [json.loads(line[6:]) for c in chunks for line in c.decode().splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_an_overflow_after_a_stream_began_keeps_the_vendors_code():
    responses = PROVIDERS["openai_responses"]
    parsed = responses.parse({"model": "m", "input": "hi", "stream": True})
    error, failed = _events(responses.stream(parsed).error(PROMPT_TOO_LONG))
    assert error["type"] == "error" and error["code"] == "context_length_exceeded"
    assert failed["response"]["error"]["code"] == "context_length_exceeded"
    anthropic = PROVIDERS["anthropic"]
    parsed = anthropic.parse({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    [event] = _events(anthropic.stream(parsed).error(PROMPT_TOO_LONG))
    assert event["error"]["message"].startswith("prompt is too long: 900 tokens")
    chat = PROVIDERS["openai_chat"]
    event = _events(chat.stream(Parsed(chat={}, stream=True, model="m")).error(PROMPT_TOO_LONG))[0]
    assert event["error"]["code"] == "context_length_exceeded"


def test_truncation_cuts_keep_the_system_prompt_the_newest_message_and_every_call_with_its_result():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u0"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "r1"}, {"role": "tool", "tool_call_id": "c1", "content": "r2"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "u1"}]
    cuts = truncation_cuts(messages)
    assert cuts == [2, 5, 6]  # never before a tool result; never dropping the system prompt or the last
    chat = {"model": "m", "messages": messages, "max_tokens": 8}
    cut, dropped = cut_input(chat, 5)
    assert cut["messages"] == [messages[0], messages[5], messages[6]] and dropped == 4 and cut["max_tokens"] == 8
    assert chat["messages"] is messages and len(messages) == 7  # the request itself is left as it was
    assert truncation_cuts([{"role": "user", "content": "only"}]) == []
    assert truncation_cuts([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) == []
    overflow = ContextOverflow(prompt_tokens=900, context_length=256, max_prompt_tokens=255)
    assert truncation_target(overflow, 32) == 223 and truncation_target(overflow, 32000) == 127
    assert truncation_target(overflow, None) == 127

