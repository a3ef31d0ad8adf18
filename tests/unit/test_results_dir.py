"""The results directory: Polar's layout, safe folder names, atomic and idempotent writes, both
formats, retention."""

from __future__ import annotations

import os
import time

import pytest

from pipeline import results_dir
from pipeline.schemas import CompletionRecord, SessionResult, TokenLogprob, Trace, Trajectory
from pipeline.status import SessionStatus


def session(task_id="t1", sid="sess-1") -> SessionResult:
    trace = Trace(prompt_ids=[1, 2], response_ids=[3], loss_mask=[1.0], reward=1.0,
                  response_logprobs=[TokenLogprob(token_id=3, logprob=-0.5)])
    return SessionResult(session_id=sid, task_id=task_id, status=SessionStatus.COMPLETED, reward=1.0,
                         trajectory=Trajectory(traces=[trace]))


def record(sid="sess-1") -> CompletionRecord:
    return CompletionRecord(completion_id="c1", session_id=sid, provider="openai_chat", started_at=1.0,
                            finished_at=2.0, upstream_latency_ms=3.0, prompt_ids=[1, 2], response_ids=[3],
                            response_logprobs=[-0.5])


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_one_file_per_session_in_polars_layout_rewritten_in_place(tmp_path, fmt):
    path = results_dir.write(tmp_path, session(), [record()], [], 0, fmt)
    assert path == tmp_path / "task_t1" / f"ses_sess-1.{fmt}"
    again = results_dir.write(tmp_path, session(), [record()], [], 0, fmt)  # a redelivered stage
    assert again == path and sorted(p.name for p in (tmp_path / "task_t1").iterdir()) == [path.name]
    data = results_dir.read(path)
    assert data["result"] == session() and data["completions"][0]["response_ids"] == [3]
    assert data["format"] == "polar-session/1" and results_dir.find(tmp_path, "sess-1") == path
    assert results_dir.find(tmp_path, "sess-1", "t1") == path and results_dir.find(tmp_path, "nope") is None


@pytest.mark.parametrize("task_id", ["../../etc", "..", ".", "a/b", "/abs", "x" * 400, "é\x00\n"])
def test_a_task_id_is_never_a_path_escape(tmp_path, task_id):
    path = results_dir.write(tmp_path, session(task_id=task_id), [], [], 0)
    assert path.parent.parent == tmp_path and path.parent.name.startswith("task_")
    assert len(path.parent.name) < 200 and results_dir.find(tmp_path, "sess-1", task_id) == path


def test_ids_that_sanitise_alike_get_distinct_folders(tmp_path):
    assert results_dir.task_folder(tmp_path, "a/b") != results_dir.task_folder(tmp_path, "a_b")


def back_date(*paths, days: float = 7) -> None:
    then = time.time() - days * 86400
    for p in paths:
        os.utime(p, (then, then))


def test_retention_removes_old_files_and_empty_task_folders(tmp_path):
    old = results_dir.write(tmp_path, session("old", "s-old"), [], [], 0)
    new = results_dir.write(tmp_path, session("new", "s-new"), [], [], 0)
    leftover = old.parent / ".ses_x.json.dead.tmp"  # a writer killed before its rename
    leftover.write_text("{")
    back_date(old, leftover, old.parent)
    assert results_dir.remove_old(tmp_path, 86400, time.time()) == 1
    assert not old.parent.exists() and new.exists() and not leftover.exists()
    assert results_dir.remove_old(tmp_path / "missing", 1, time.time()) == 0


def test_retention_looks_only_into_task_folders_old_enough_to_hold_old_files(tmp_path, monkeypatch):
    """Every file of every task folder was stat'ed every ten minutes by every worker (3.5 s a
    pass at 400,000 files, growing with the weeks kept). A folder's own time is its newest
    file's (they arrive by rename): one written to lately is not looked into."""
    young = results_dir.write(tmp_path, session("young", "s-young"), [], [], 0)
    old = results_dir.write(tmp_path, session("old", "s-old"), [], [], 0)
    back_date(old, old.parent)
    looked: list = []
    iterdir = type(tmp_path).iterdir
    monkeypatch.setattr(type(tmp_path), "iterdir", lambda self: looked.append(self.name) or iterdir(self))
    assert results_dir.remove_old(tmp_path, 86400, time.time()) == 1
    assert looked == [old.parent.name] and young.exists() and not old.exists()


def test_a_session_is_found_through_the_index_without_looking_in_other_task_folders(tmp_path, monkeypatch):
    path = results_dir.write(tmp_path, session("t-a/b", "sess-9"), [], [], 0)
    for i in range(5):
        results_dir.write(tmp_path, session(f"other-{i}", f"sess-o{i}"), [], [], 0)
    looked: list = []
    glob = type(tmp_path).glob
    monkeypatch.setattr(type(tmp_path), "glob", lambda self, pattern: looked.append(pattern) or glob(self, pattern))
    assert results_dir.find(tmp_path, "sess-9") == path and looked == []
    # A file written before the index (or an index entry lost) is still found by the scan.
    (tmp_path / results_dir.INDEX / "sess-9").unlink()
    assert results_dir.find(tmp_path, "sess-9") == path and looked == ["task_*"]
    # An index entry naming something that is not a task folder of this root is not followed.
    (tmp_path / results_dir.INDEX / "sess-9").write_text("../elsewhere")
    assert results_dir.find(tmp_path, "sess-9") == path  # by the scan


def test_retention_prunes_the_index_with_the_files(tmp_path):
    old = results_dir.write(tmp_path, session("old", "s-old"), [], [], 0)
    orphan = tmp_path / results_dir.INDEX / "s-crashed"  # an entry whose file went another way
    orphan.write_text("task_gone")
    back_date(old, old.parent, tmp_path / results_dir.INDEX / "s-old", orphan)
    assert results_dir.remove_old(tmp_path, 86400, time.time()) == 1
    assert not (tmp_path / results_dir.INDEX / "s-old").exists() and results_dir.find(tmp_path, "s-old") is None
    assert orphan.exists()  # the whole index is walked only when asked (once a day)
    results_dir.remove_old(tmp_path, 86400, time.time(), whole_index=True)
    assert not orphan.exists()
