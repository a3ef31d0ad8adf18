"""``polar generate``'s pure parts: reading instances, the task each becomes, the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra import generate as gen
from pipeline.schemas import TaskRequest

SWE = {"instance_id": "acme__calc-1", "repo": "acme/calc", "problem_statement": "add() subtracts",
       "base_commit": "abc123", "version": "0.1"}


def run(tmp_path: Path, **kw) -> gen.Run:
    return gen.Run(harness="pi", model="m", out=tmp_path / "out", **kw)


@pytest.mark.parametrize("content, message", [
    ('{"instance_id": "a"}\nnot json\n', ":2: not JSON"), ('["x"]\n', ":1: expected an object"),
    ('{"repo": "r"}\n', ":1: needs an 'instance_id'"), ('{"instance_id": "a"}\n{"instance_id": "a"}\n', "twice"),
])
def test_a_bad_instances_file_names_the_line(tmp_path, content, message):
    path = tmp_path / "i.jsonl"
    path.write_text(content)
    with pytest.raises(gen.GenerateError, match=message):
        gen.read_instances(path)


def test_a_swebench_instance_becomes_a_valid_task_in_its_image(tmp_path):
    r = run(tmp_path, image_template="localhost/polar-swe-{instance_id}")
    task = gen.task_for(SWE, r)
    TaskRequest.model_validate(task)  # the API would take it
    assert task["runtime"]["image"] == "localhost/polar-swe-acme__calc-1"
    assert task["evaluator"]["strategy"] == "swebench_harness" and task["evaluator"]["config"]["instance"] == SWE
    assert task["task_id"] == r.task_id("acme__calc-1") == gen.task_for(SWE, r)["task_id"]  # stable: resumable
    assert run(tmp_path / "elsewhere").task_id("acme__calc-1") != task["task_id"]  # another run, another id
    with pytest.raises(gen.GenerateError, match="no image"):
        gen.task_for(SWE, run(tmp_path))


def test_instances_whose_ids_clean_alike_get_distinct_task_ids(tmp_path):
    """``x/1`` and ``x_1`` both cleaned to ``x_1``: one task id for two instances, one silently
    dropped and, on resume, recorded with the other's trajectories. Each is its own now; an id
    needing no cleaning keeps its plain task id (what a run started earlier resumes by)."""
    r = run(tmp_path)
    ids = ["x/1", "x_1", "x 1", "é", "è", "a" * 200, "a" * 201]
    task_ids = [r.task_id(i) for i in ids]
    assert len(set(task_ids)) == len(ids) and task_ids[1] == f"gen-{r.key}-x_1"
    assert all(r.task_id(i) == t for i, t in zip(ids, task_ids))  # stable: resumable
    for t in task_ids:
        TaskRequest.model_validate({**gen.task_for(SWE, run(tmp_path, image_template="i")), "task_id": t})


def test_an_image_template_naming_a_missing_field_or_a_non_utf8_file_is_a_clear_error(tmp_path):
    for template in ("localhost/{nosuch}", "localhost/{0}", "localhost/{"):
        with pytest.raises(gen.GenerateError, match="cannot be filled"):
            gen.task_for(SWE, run(tmp_path, image_template=template))
    path = tmp_path / "i.jsonl"
    path.write_bytes(b'{"instance_id": "\xff\xfe"}\n\xff\n')
    with pytest.raises(gen.GenerateError, match="not UTF-8"):
        gen.read_instances(path)


def test_a_task_payload_line_keeps_its_evaluator_and_takes_the_runs_agent(tmp_path):
    line = {"instance_id": "t1", "instruction": "x", "evaluator": {"strategy": "command", "config": {"command": "true"}},
            "agent": {"custom_shell": "echo"}, "metadata": {"repo": "r"}}
    task = gen.task_for(line, run(tmp_path))
    assert task["agent"] == {"harness": "pi", "model_name": "m"} and task["metadata"]["repo"] == "r"
    TaskRequest.model_validate(task)


def test_the_acceptance_table_per_repository_and_total():
    state = {"a": {"repo": "r1", "attempts": 2, "accepted": 1}, "b": {"repo": "r1", "attempts": 2, "accepted": 2},
             "c": {"repo": "r2", "attempts": 4, "accepted": 0}}
    assert gen.acceptance_table(state) == [("r1", 4, 3, 0.75), ("r2", 4, 0, 0.0), ("total", 8, 3, 0.375)]


def test_a_state_line_cut_by_the_interruption_is_not_finished(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / gen.STATE_FILE).write_text(json.dumps({"instance_id": "a", "repo": "r", "attempts": 1, "accepted": 1})
                                      + '\n{"instance_id": "b", "rep')
    assert list(gen.read_state(out)) == ["a"]
