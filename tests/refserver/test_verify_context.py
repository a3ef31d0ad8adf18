"""The verifier on a trace that fills the engine's context: scoring asks the engine for one token
more than the sequence, which vLLM and SGLang both refuse. The reference server refuses it in
each engine's own words (vLLM: prompt + output over the context; SGLang: reaching it)."""

from __future__ import annotations

import httpx
import pytest

from infra.refserver import ModelEngine, create_app
from pipeline.schemas import TokenLogprob, Trace
from proxy.verify import Verifier

CONTEXT = 64


@pytest.fixture(scope="module")
def small(model_dir):
    return ModelEngine.load(model_dir, max_model_len=CONTEXT)


def filled_trace(engine: ModelEngine, room: int) -> Trace:
    prompt = engine.tokenize_chat([{"role": "user", "content": "count to one hundred"}])
    gen = engine.generate(prompt, max_tokens=room - len(prompt), ignore_eos=True, seed=1)
    assert len(gen.token_ids) == room - len(prompt)  # a last turn cut at the length limit
    return Trace(prompt_ids=prompt, response_ids=gen.token_ids, loss_mask=[1.0] * len(gen.token_ids),
                 response_logprobs=[TokenLogprob(token_id=t, logprob=v) for t, v in zip(gen.token_ids, gen.logprobs)])


@pytest.mark.parametrize("dialect, room", [("vllm", CONTEXT), ("sglang", CONTEXT - 1)])
def test_a_trace_that_fills_the_context_is_scored_but_its_last_token(small, dialect, room):
    verifier = Verifier("http://engine.test", engine=dialect,
                        transport=httpx.WSGITransport(app=create_app(small, dialect=dialect)))
    trace = filled_trace(small, room)
    report = verifier.verify_trace(0, trace)
    assert report.error is None and report.ok, report
    assert report.unscored == 1 and report.max_abs_diff <= 1e-4
    # The tokens it did score are checked: a wrong logprob before the last token is still caught.
    bad = trace.model_copy(deep=True)
    bad.response_logprobs[-2].logprob += 0.01
    assert verifier.verify_trace(0, bad).violations == 1
    # A trace with room left is scored whole.
    shorter = filled_trace(small, room - 1)
    whole = verifier.verify_trace(0, shorter)
    assert whole.ok and whole.unscored == 0
