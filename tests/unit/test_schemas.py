"""The wire schemas: the paper's payload parses as is; typos and bad values are refused."""

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.schemas import SessionSpec, TaskRequest, TokenLogprob, Trace

# Verbatim from the Polar paper's appendix (A.3 task payload, A.4 trace; "..." elisions removed).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def paper_payload() -> dict:
    return json.loads((FIXTURES / "paper_a3_task.json").read_text())


MINIMAL = {"instruction": "do it", "agent": {"custom_shell": "echo {{INSTRUCTION}}"}}


def test_paper_a3_payload_parses_unchanged():
    raw = paper_payload()
    task = TaskRequest.model_validate(raw)
    assert task.task_id == raw["task_id"]  # placeholders kept verbatim
    assert task.runtime.image == "{sample.metadata.runtime_image}"
    assert task.agent.harness == "codex"
    assert task.evaluator.strategy == "swebench_harness" and task.evaluator.refresh_runtime is True
    assert task.evaluator.config["instance"] == "{sample.metadata.instance}"
    assert task.metadata == raw["metadata"]
    assert task.callback_url == raw["callback_url"]
    assert task.runtime.prepare[0].type == "exec"


@pytest.mark.parametrize("patch, field", [
    ({"timout_seconds": 5}, "timout_seconds"),
    ({"runtime": {"backend": "dokcer"}}, "runtime.backend"),
    ({"runtime": {"prepare": [{"type": "exec"}]}}, "runtime.prepare.0"),
    ({"agent": {"harness": "codexx"}}, "agent.harness"),
    ({"agent": {"harness": "shell"}}, "agent"),
    ({"agent": {}}, "agent"),
    ({"builder": {"strategy": "prefix_merge"}}, "builder.strategy"),
    ({"evaluator": {"strategy": "exact", "refresh_runtime": "yes"}}, "evaluator.strategy"),
    ({"num_samples": "8"}, "num_samples"),
    ({"num_samples": 0}, "num_samples"),
    ({"task_id": "a/b"}, "task_id"),
    ({"callback_url": "ftp://x"}, "callback_url"),
])
def test_invalid_fields_are_named(patch, field):
    with pytest.raises(ValidationError) as info:
        TaskRequest.model_validate({**MINIMAL, **patch})
    locs = {".".join(str(p) for p in e["loc"]) for e in info.value.errors()}
    assert any(loc == field or loc.startswith(field + ".") for loc in locs), locs


def test_defaults_and_shell_inference():
    task = TaskRequest.model_validate(MINIMAL)
    assert task.agent.harness == "shell"
    assert task.builder.strategy == "per_request"
    assert task.evaluator.strategy == "session_completed"
    assert re.match(r"^task-[0-9a-f]{12}$", task.task_id)


def test_import_paths_are_accepted_for_plugins():
    task = TaskRequest.model_validate({**MINIMAL, "builder": {"strategy": "my.pkg:Builder"},
                                       "evaluator": {"strategy": "my.pkg:Grader"}})
    assert task.builder.strategy == "my.pkg:Builder"


def test_expand_gives_unique_session_ids_and_sample_indexes():
    task = TaskRequest.model_validate({**MINIMAL, "num_samples": 5, "metadata": {"group_id": "g"}})
    specs = SessionSpec.expand(task)
    assert [s.sample_index for s in specs] == list(range(5))
    assert len({s.session_id for s in specs}) == 5
    assert all(s.metadata == {"group_id": "g"} and s.task_id == task.task_id for s in specs)


def test_trace_lengths_and_alignment_are_enforced():
    ok = Trace(prompt_ids=[1], response_ids=[5, 6], loss_mask=[1.0, 0.0],
               response_logprobs=[TokenLogprob(token_id=5, logprob=-0.1), TokenLogprob(token_id=6, logprob=0.0)])
    assert ok.trainable_tokens == 1
    with pytest.raises(ValidationError):
        Trace(prompt_ids=[1], response_ids=[5, 6], loss_mask=[1.0],
              response_logprobs=[TokenLogprob(token_id=5, logprob=-0.1), TokenLogprob(token_id=6, logprob=0.0)])
    with pytest.raises(ValidationError):
        Trace(prompt_ids=[1], response_ids=[5], loss_mask=[1.0],
              response_logprobs=[TokenLogprob(token_id=7, logprob=-0.1)])


def test_trace_has_the_paper_a4_shape():
    a4 = json.loads((FIXTURES / "paper_a4_trace.json").read_text())
    trace = Trace.model_validate(a4)
    assert set(a4) <= set(trace.model_dump())
    assert trace.response_logprobs[2].token is None and trace.reward == 1.0
