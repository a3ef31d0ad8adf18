"""Engine dialects (pure): the prompt-logprob requests and answers the verifier relies on."""

from __future__ import annotations

import pytest

from pipeline.errors import CaptureError, EngineError
from proxy import upstream


def test_vllm_scores_from_prompt_logprobs():
    engine = upstream.create("vllm")
    body = engine.score_request([5, 6, 7], "m")
    assert body["prompt"] == [5, 6, 7] and body["prompt_logprobs"] == 0
    answer = {"choices": [{"prompt_logprobs": [None, {"6": {"logprob": -0.5}}, {"9": {"logprob": -1.0}}]}]}
    assert engine.scores(answer, [5, 6, 7]) == [None, -0.5, None]  # 7 is missing from its entry
    with pytest.raises(CaptureError):
        engine.scores({"choices": [{"prompt_logprobs": [None]}]}, [5, 6, 7])


def test_sglang_scores_from_input_token_logprobs():
    engine = upstream.create("sglang")
    body = engine.score_request([5, 6, 7], "m")
    assert engine.score_path == "/generate" and body["input_ids"] == [5, 6, 7]
    assert body["return_logprob"] is True and body["logprob_start_len"] == 0
    answer = {"meta_info": {"input_token_logprobs": [[None, 5, None], [-0.25, 6, None], [-2.0, 8, None]]}}
    assert engine.scores(answer, [5, 6, 7]) == [None, -0.25, None]  # a tuple for another id is no score
    with pytest.raises(CaptureError):
        engine.scores({"meta_info": {}}, [5, 6, 7])


def test_unknown_engine_is_the_seams_error():
    with pytest.raises(EngineError, match="not available"):
        upstream.create("tgi")


def _vllm_answer(prompt_ids, ids, logprobs=None):
    entries = [{"token": f"t{i}", "logprob": lp} for i, lp in enumerate(logprobs or [-0.5] * len(ids))]
    return {"prompt_token_ids": prompt_ids,
            "choices": [{"token_ids": ids, "logprobs": {"content": entries}, "finish_reason": "stop"}]}


def test_vllm_capture_keeps_integer_ids_and_converts_only_odd_ones():
    engine = upstream.create("vllm")
    prompt = list(range(5000))
    captured = engine.extract(_vllm_answer(prompt, [7, 8]))
    assert captured.prompt_ids is prompt and captured.response_ids == [7, 8]  # checked, not copied
    assert captured.response_logprobs == [-0.5, -0.5] and captured.response_tokens == ["t0", "t1"]
    odd = engine.extract(_vllm_answer([1.0, "2", 3], [7.0, 8]))  # ids written as floats or text
    assert odd.prompt_ids == [1, 2, 3] and odd.response_ids == [7, 8]
    assert all(type(t) is int for t in odd.prompt_ids + odd.response_ids)
    for bad in ([1, "x"], [1, None], [1, [2]]):
        with pytest.raises((ValueError, TypeError)):
            engine.extract(_vllm_answer(bad, [7]))
    with pytest.raises(CaptureError, match="do not align"):
        engine.extract(_vllm_answer([1], [7, 8], logprobs=[-0.5]))


def test_sglang_capture_from_meta_info_triples():
    engine = upstream.create("sglang")
    answer = {"choices": [{"prompt_token_ids": [1, 2, 3], "finish_reason": "stop", "matched_stop": None,
                           "meta_info": {"output_token_logprobs": [[-0.25, 7, "a"], [-1.0, 8, "b"]]}}]}
    captured = engine.extract(answer)
    assert captured.prompt_ids == [1, 2, 3] and captured.response_ids == [7, 8]
    assert captured.response_logprobs == [-0.25, -1.0]
