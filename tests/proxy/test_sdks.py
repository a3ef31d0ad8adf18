"""The vendors' own SDKs against the proxy and the reference model: multi-turn tool round trips
and reasoning turns, streaming and not, with every captured number checked independently."""

from __future__ import annotations

import json

import pytest
import redis
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline import keys
from pipeline.codec import unpack
from tests.proxy.sdk_drivers import DRIVERS
from tests.support import running_session, sid_of

SCRIPT = json.loads((__import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" /
                     "sdk_tools_policy.json").read_text())["turns"]
EXPECTED_CALLS = [(c["name"], c["arguments"]) for c in SCRIPT[0]["tool_calls"]]


@pytest.fixture(scope="module")
def hf(model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32).eval()
    return tok, model


def records(stack, key):
    r = redis.Redis.from_url(stack.settings.redis_url)
    return [unpack(b) for b in r.lrange(keys.session_completions(sid_of(key)), 0, -1)]


def check_capture(rec, hf):
    """prompt ids = the chat template's rendering of the request the engine got; every response
    logprob = the model's, recomputed here by teacher forcing."""
    tok, model = hf
    req = rec["normalized_request"]
    kwargs = req.get("chat_template_kwargs") or {}
    rendered = tok.apply_chat_template(req["messages"], tools=req.get("tools"), add_generation_prompt=True,
                                       tokenize=False, **kwargs)
    assert rec["prompt_ids"] == tok(rendered, add_special_tokens=False).input_ids
    ids = torch.tensor([rec["prompt_ids"] + rec["response_ids"]])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    start = len(rec["prompt_ids"])
    want = [lp[start - 1 + i, t].item() for i, t in enumerate(rec["response_ids"])]
    diffs = [abs(a - b) for a, b in zip(rec["response_logprobs"], want)]
    assert max(diffs) <= 1e-4, (f"seq {rec['seq']}: max |dlogprob| {max(diffs):.2e} at {diffs.index(max(diffs))} "
                                f"of {len(diffs)}; finish {rec['finish_reason']}; {rec['response_message']}")
    assert rec["response_ids"][-1] == tok.convert_tokens_to_ids("<|im_end|>")


@pytest.fixture(scope="module")
def outcomes(ref_stack):
    """Every SDK, streaming and not, through the same conversations (run once, checked below)."""
    out = {}
    for driver in DRIVERS:
        for stream in (False, True):
            key = running_session(ref_stack.settings.redis_url)
            d = driver(ref_stack.settings.proxy_url, key)
            out[(driver.name, stream)] = (key, d.weather(stream), d.think(stream))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("name", [d.name for d in DRIVERS])
def test_tool_round_trip_and_reasoning(outcomes, name, stream):
    _, weather, think = outcomes[(name, stream)]
    assert weather.calls == EXPECTED_CALLS  # both parallel calls, arguments exact
    assert len(set(weather.call_ids)) == 2 and all(weather.call_ids)
    assert weather.reasoning == SCRIPT[0]["reasoning"]
    assert weather.final_text == SCRIPT[1]["content"]
    assert think.reasoning == "Six times seven is forty-two." and think.text == "42"


@pytest.mark.parametrize("name", [d.name for d in DRIVERS])
def test_stream_accumulates_to_the_non_streaming_answer(outcomes, name):
    _, plain, plain_think = outcomes[(name, False)]
    _, streamed, streamed_think = outcomes[(name, True)]
    for a, b in ((plain, streamed), (plain_think, streamed_think)):
        assert (a.calls, a.reasoning, a.text, a.final_text) == (b.calls, b.reasoning, b.text, b.final_text)


@pytest.mark.parametrize("name", [d.name for d in DRIVERS])
def test_captured_ids_and_logprobs_are_the_servers(outcomes, ref_stack, hf, name):
    for stream in (False, True):
        key = outcomes[(name, stream)][0]
        recs = records(ref_stack, key)
        assert len(recs) == 3 and all(r["provider"] == name for r in recs)
        for rec in recs:
            check_capture(rec, hf)
        # The tool turn's history re-renders to exactly what was sampled: the second prompt
        # extends the first prompt plus the sampled answer (ids, reasoning, calls round-tripped).
        first, second = recs[0], recs[1]
        assert second["prompt_ids"][: len(first["prompt_ids"]) + len(first["response_ids"])] == \
            first["prompt_ids"] + first["response_ids"]


def test_every_provider_renders_the_same_conversation_to_the_same_ids(outcomes, ref_stack):
    prompts = {name: [r["prompt_ids"] for r in records(ref_stack, outcomes[(name, False)][0])[:2]]
               for name in (d.name for d in DRIVERS)}
    first = next(iter(prompts.values()))
    for name, ids in prompts.items():
        assert ids == first, f"{name} renders the conversation differently"


@pytest.mark.parametrize("name", ["openai_chat", "anthropic"])
def test_sglang_engine_captures_the_same_way(sglang_stack, hf, name):
    driver = next(d for d in DRIVERS if d.name == name)
    key = running_session(sglang_stack.settings.redis_url)
    out = driver(sglang_stack.settings.proxy_url, key).weather(stream=True)
    assert out.calls == EXPECTED_CALLS and out.final_text == SCRIPT[1]["content"]
    recs = records(sglang_stack, key)
    assert len(recs) == 2
    for rec in recs:
        check_capture(rec, hf)
        assert "meta_info" not in json.dumps(rec["upstream_response"]["choices"])  # bulky ids not stored twice
