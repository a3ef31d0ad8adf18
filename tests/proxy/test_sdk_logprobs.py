"""Logprobs asked for through each vendor's own SDK come back in that vendor's shape, and they are
the very numbers the proxy recorded for training (the Chat API's ``logprobs``/``top_logprobs``,
the Responses API's ``include=["message.output_text.logprobs"]`` with ``top_logprobs``, Gemini's
``response_logprobs``/``logprobs``). Not asked for, none are returned."""

from __future__ import annotations

import openai
import pytest
from google import genai
from google.genai import types as gt

from tests.proxy.test_sdks import records
from tests.support import running_session

TOP = 3
MAX_TOKENS = 12
QUESTION = [{"role": "user", "content": "Say something about the sea."}]


def chat(base: str, key: str, stream: bool, asked: bool) -> list[tuple[float, list[float]]]:
    sdk = openai.OpenAI(base_url=f"{base}/s/{key}/v1", api_key=key, max_retries=0)
    kw = dict(logprobs=True, top_logprobs=TOP) if asked else {}
    args = dict(model="tiny", messages=QUESTION, max_tokens=MAX_TOKENS, **kw)
    if stream:  # (the SDK's stream helper refuses an answer cut at max_tokens)
        entries = [e for chunk in sdk.chat.completions.create(stream=True, **args) if chunk.choices
                   for e in (chunk.choices[0].logprobs.content if chunk.choices[0].logprobs else None) or []]
    else:
        lp = sdk.chat.completions.create(**args).choices[0].logprobs
        entries = (lp.content if lp else None) or []
    return [(e.logprob, [a.logprob for a in e.top_logprobs]) for e in entries]


def responses(base: str, key: str, stream: bool, asked: bool) -> list[tuple[float, list[float]]]:
    sdk = openai.OpenAI(base_url=f"{base}/s/{key}/v1", api_key=key, max_retries=0)
    kw = dict(include=["message.output_text.logprobs"], top_logprobs=TOP) if asked else {}
    args = dict(model="tiny", input=QUESTION, max_output_tokens=MAX_TOKENS, **kw)
    if stream:
        deltas, r = [], None
        for event in sdk.responses.create(stream=True, **args):  # (the helper wants `completed`; a cut is `incomplete`)
            if event.type == "response.output_text.delta":
                deltas += event.logprobs or []
            elif event.type in ("response.completed", "response.incomplete"):
                r = event.response
        assert r is not None
        part = next(o for o in r.output if o.type == "message").content[0]
        assert [d.logprob for d in deltas] == [e.logprob for e in part.logprobs or []]  # the deltas carry them too
    else:
        r = sdk.responses.create(**args)
        part = next(o for o in r.output if o.type == "message").content[0]
    assert r.top_logprobs == (TOP if asked else 0)
    return [(e.logprob, [a.logprob for a in e.top_logprobs]) for e in part.logprobs or []]


def google(base: str, key: str, stream: bool, asked: bool) -> list[tuple[float, list[float]]]:
    sdk = genai.Client(api_key=key, http_options=gt.HttpOptions(
        base_url=f"{base}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    config = gt.GenerateContentConfig(max_output_tokens=MAX_TOKENS,
                                      **(dict(response_logprobs=True, logprobs=TOP) if asked else {}))
    contents = [gt.Content(role="user", parts=[gt.Part(text=QUESTION[0]["content"])])]
    if stream:
        candidate = list(sdk.models.generate_content_stream(model="tiny", contents=contents, config=config))[-1].candidates[0]
    else:
        candidate = sdk.models.generate_content(model="tiny", contents=contents, config=config).candidates[0]
    result = candidate.logprobs_result
    if result is None:
        return []
    chosen = [c.log_probability for c in result.chosen_candidates]
    assert candidate.avg_logprobs == pytest.approx(sum(chosen) / len(chosen))
    assert result.log_probability_sum == pytest.approx(sum(chosen))
    return [(c, [a.log_probability for a in top.candidates]) for c, top in zip(chosen, result.top_candidates)]


CALLERS = {"openai_chat": chat, "openai_responses": responses, "google": google}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("name", list(CALLERS))
def test_asked_for_logprobs_are_the_recorded_ones(ref_stack, name, stream):
    base = ref_stack.settings.proxy_url
    key = running_session(ref_stack.settings.redis_url)
    got = CALLERS[name](base, key, stream, asked=True)
    (rec,) = records(ref_stack, key)
    assert rec["provider"] == name
    recorded = rec["response_logprobs"]
    assert got, "no logprobs came back"
    assert [lp for lp, _ in got] == pytest.approx(recorded[:len(got)], abs=1e-6)
    assert len(got) >= len(recorded) - 1  # every sampled token (the end-of-turn token aside)
    for chosen, alternatives in got:
        assert len(alternatives) == TOP
        assert alternatives == sorted(alternatives, reverse=True)
        assert chosen <= alternatives[0] + 1e-6  # nothing beats the most likely alternative


@pytest.mark.parametrize("name", list(CALLERS))
def test_not_asked_for_none_come_back(ref_stack, name):
    key = running_session(ref_stack.settings.redis_url)
    assert CALLERS[name](ref_stack.settings.proxy_url, key, False, asked=False) == []
    (rec,) = records(ref_stack, key)
    assert rec["response_logprobs"]  # recorded for training all the same


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_turn_of_tool_calls_only_streams_its_logprobs_too(ref_stack, stream):
    """No text to hang them on: the stream still carries every sampled token's logprob, once."""
    key = running_session(ref_stack.settings.redis_url)
    sdk = openai.OpenAI(base_url=f"{ref_stack.settings.proxy_url}/s/{key}/v1", api_key=key, max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    args = dict(model="sdk-tools", messages=[{"role": "user", "content": "Weather in Paris and Rome?"}],
                tools=tools, logprobs=True)
    if stream:
        chunks = [c for c in sdk.chat.completions.create(stream=True, **args) if c.choices]
        assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
        got = [e.logprob for c in chunks for e in (c.choices[0].logprobs.content if c.choices[0].logprobs else None) or []]
    else:
        choice = sdk.chat.completions.create(**args).choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        got = [e.logprob for e in choice.logprobs.content]
    (rec,) = records(ref_stack, key)
    assert got and got == pytest.approx(rec["response_logprobs"][:len(got)], abs=1e-6)
    assert len(got) >= len(rec["response_logprobs"]) - 1
