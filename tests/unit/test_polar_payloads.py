"""Polar's own field names and budgets, accepted and honoured (or refused with a reason)."""

from __future__ import annotations

import math

import pytest

from pipeline.schemas import TaskRequest
from pipeline.schemas.results import TaskStatus
from pipeline.status import TaskState


def task(**agent):
    return {"instruction": "x", "agent": agent}


def test_agent_mcp_servers_and_skills_path_become_preset_settings():
    t = TaskRequest.model_validate(task(harness="claude_code", skills_path="/skills", mcp_servers=[
        {"name": "docs", "type": "http", "url": "http://127.0.0.1:9/mcp"}]))
    assert t.agent.settings == {"skills_dir": "/skills", "mcp_servers": [
        {"name": "docs", "type": "http", "url": "http://127.0.0.1:9/mcp"}]}


def test_import_path_names_a_custom_harness():
    t = TaskRequest.model_validate(task(import_path="my_lab.agents:MyHarness"))
    assert t.agent.harness == "my_lab.agents:MyHarness"
    with pytest.raises(ValueError, match="not both"):
        TaskRequest.model_validate(task(import_path="my_lab.agents:MyHarness", harness="pi"))


@pytest.mark.parametrize("agent, message", [
    ({"custom_shell": "true", "mcp_servers": [{"name": "a", "command": "x"}]}, "for the CLI presets"),
    ({"harness": "pi", "skills_path": "/s", "settings": {"skills_dir": "/t"}}, "give it once"),
    ({"harness": "codex", "mcp_servers": [{"name": "a", "type": "sse"}]}, "url"),
])
def test_polar_fields_that_cannot_be_honoured_are_refused_with_a_reason(agent, message):
    with pytest.raises(ValueError, match=message):
        TaskRequest.model_validate(task(**agent))


@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan, "60", True])
def test_agent_timeout_must_be_a_positive_finite_number(value):
    with pytest.raises(ValueError, match="agent_timeout"):
        TaskRequest.model_validate({**task(custom_shell="true"), "metadata": {"agent_timeout": value}})
    ok = TaskRequest.model_validate({**task(custom_shell="true"), "metadata": {"agent_timeout": 12.5}})
    assert ok.metadata["agent_timeout"] == 12.5


def test_task_status_carries_polars_completed_sessions():
    status = TaskStatus(task_id="t", status=TaskState.RUNNING, total_sessions=4, finished_sessions=3)
    dumped = status.model_dump(mode="json")
    assert dumped["completed_sessions"] == 3 and dumped["finished_sessions"] == 3
    assert TaskStatus.model_validate(dumped).completed_sessions == 3  # and it reads back


def test_early_stop_must_fit_the_group():
    with pytest.raises(ValueError, match="more than num_samples"):
        TaskRequest.model_validate({**task(custom_shell="true"), "num_samples": 2, "early_stop_min_usable_sessions": 3})
    with pytest.raises(ValueError, match="early_stop_min_usable_sessions"):
        TaskRequest.model_validate({**task(custom_shell="true"), "early_stop_min_usable_sessions": 0})
    ok = TaskRequest.model_validate({**task(custom_shell="true"), "num_samples": 4, "early_stop_min_usable_sessions": 2})
    assert ok.early_stop_min_usable_sessions == 2


def test_a_cancelled_task_is_failed_on_the_wire_for_polars_pollers_and_cancelled_when_read_back():
    status = TaskStatus(task_id="t", status=TaskState.CANCELLED, total_sessions=2)
    wire = status.model_dump(mode="json")
    assert wire["status"] == "failed" and wire["cancelled"] is True  # Polar's pollers stop on it
    assert TaskStatus.model_validate(wire).status == TaskState.CANCELLED  # ours read it back
    running = TaskStatus(task_id="t", status=TaskState.RUNNING, total_sessions=2).model_dump(mode="json")
    assert running["status"] == "running" and running["cancelled"] is False


def test_dispatch_priority_maps_onto_the_brokers_priorities_highest_first():
    from pipeline.messages import init_priority

    assert [init_priority(p) for p in (100, 67, 50, 34, 0)] == [0, 3, 5, 6, 9]  # Redis serves 0 first
    assert TaskRequest.model_validate({**task(custom_shell="true"), "dispatch_priority": 80}).dispatch_priority == 80
    with pytest.raises(ValueError, match="dispatch_priority"):
        TaskRequest.model_validate({**task(custom_shell="true"), "dispatch_priority": 101})
