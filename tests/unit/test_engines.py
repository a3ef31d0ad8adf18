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
