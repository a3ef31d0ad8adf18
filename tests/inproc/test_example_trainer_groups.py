"""examples/trainer.py's collection of a step's groups over a real Redis stream and the in-process
API: a group not yet whole stays unacked (a trainer that dies mid-step gets its sessions again),
and a whole one is taken once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline import keys
from tests.inproc.test_stream_groups import client, publish, submit  # noqa: F401  (client: the fixture)


@pytest.fixture(scope="module")
def example():
    """examples/trainer.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location("example_trainer", Path(__file__).resolve().parents[2] / "examples" / "trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def given(client, r, **tasks):  # noqa: F811
    """Each task submitted with its number of sessions, then the results of those listed published:
    ``name=(num_samples, [session ids published])``."""
    for task_id, (samples, _) in tasks.items():
        submit(client, task_id, samples)
    for task_id, (_, published) in tasks.items():
        publish(r, task_id, *published)


def test_a_step_that_times_out_leaves_the_unfinished_groups_sessions_unacked(example, client, r):  # noqa: F811
    given(client, r, whole=(2, ["w0", "w1"]), half=(2, ["h0"]))
    done, others = example.collect_groups(client, {"whole": 2, "half": 2}, timeout=0.5)
    assert [(g.task_id, sorted(x.session_id for x in g.results)) for g in done] == [("whole", ["w0", "w1"])]
    assert others == 0
    pending = r.xpending_range(keys.RESULTS_STREAM, "example-trainer", "-", "+", 10)
    assert len(pending) == 1  # h0's entry: its group is not whole, so a restart must see it again
    publish(r, "half", "h1")
    done, _ = example.collect_groups(client, {"half": 2}, timeout=2)
    assert [sorted(x.session_id for x in g.results) for g in done] == [["h0", "h1"]]
    assert r.xpending(keys.RESULTS_STREAM, "example-trainer")["pending"] == 0


def test_other_tasks_groups_are_skipped_and_counted(example, client, r):  # noqa: F811
    given(client, r, old=(2, ["o0", "o1"]), mine=(1, ["m0"]))
    done, others = example.collect_groups(client, {"mine": 1}, timeout=2)
    assert [g.task_id for g in done] == ["mine"] and others == 2
    assert r.xpending(keys.RESULTS_STREAM, "example-trainer")["pending"] == 0
