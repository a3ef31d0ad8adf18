"""Prepare uploads are bounded: a folder (counted whole, links not followed) or file larger than
``POLAR_UPLOAD_MAX_MB`` is refused before anything is copied, as a payload naming a big folder
would otherwise copy it once per session. And they never copy through a link an earlier step of
the session planted where the copy goes."""

from __future__ import annotations

import os
import time

import pytest

from pipeline.schemas import PrepareAction, RuntimeSpec
from workers import runtimes
from workers.stages.prepare import StepFailed, run_prepare


@pytest.fixture(params=["local"])
def rt(request, tmp_path):
    if request.param == "bwrap":
        request.getfixturevalue("bwrap_available")
    runtime = runtimes.create(RuntimeSpec(backend=request.param), "sess-uploads",
                              runtimes.RuntimeHost(root=tmp_path / "s"))
    runtime.start()
    yield runtime
    runtime.stop()


def upload(rt, src, kind, limit):
    run_prepare(rt, [PrepareAction(type=kind, src=str(src), dst="/polar/session/workspace/in")],
                deadline=time.time() + 60, cancelled=lambda: False, upload_roots=[src.parent.resolve()],
                upload_excluded=[], upload_max_bytes=limit)


def test_a_folder_over_the_upload_limit_is_refused_before_anything_is_copied(rt, tmp_path):
    big = tmp_path / "data" / "repo"
    (big / "sub").mkdir(parents=True)
    (big / "a.bin").write_bytes(b"x" * 600)
    (big / "sub" / "b.bin").write_bytes(b"x" * 600)
    with pytest.raises(StepFailed, match="POLAR_UPLOAD_MAX_MB"):
        upload(rt, big, "upload_dir", 1000)
    assert not (rt.root / "workspace" / "in").exists()
    upload(rt, big, "upload_dir", 1200)  # within it: copied
    assert (rt.root / "workspace" / "in" / "sub" / "b.bin").stat().st_size == 600


def test_links_are_not_counted_and_a_single_file_is_measured_too(rt, tmp_path):
    folder = tmp_path / "data" / "small"
    folder.mkdir(parents=True)
    huge = tmp_path / "huge.bin"
    huge.write_bytes(b"x" * 5000)
    (folder / "link").symlink_to(huge)  # copied as a link, so not its target's size
    (folder / "f.txt").write_text("hi")
    upload(rt, folder, "upload_dir", 100)
    with pytest.raises(StepFailed, match="more than"):
        upload(rt, huge, "upload_file", 1000)


@pytest.mark.parametrize("rt", ["local", "bwrap"], indirect=True)
def test_an_upload_never_writes_through_links_the_session_planted(rt, tmp_path):
    """A prepare exec step ran first and left links where the folder's files would land: the
    probe's upload overwrote a 0600 host file with an example's content (through a file link) and
    created files in a host folder (through a folder link). The links are replaced; the host's
    files stay as they were; links inside the uploaded folder still arrive as links."""
    victim, victim_dir = tmp_path / "victim.txt", tmp_path / "victim_dir"
    victim.write_text("ORIGINAL")
    victim.chmod(0o600)
    victim_dir.mkdir()
    src = tmp_path / "data" / "examples"
    (src / "nested").mkdir(parents=True)
    (src / "agent.py").write_text("print('agent')")
    (src / "nested" / "tool.sh").write_text("echo tool")
    (src / "agent.py").chmod(0o755)
    (src / "latest").symlink_to("agent.py")
    plant = PrepareAction(type="exec", command=f"mkdir -p in && ln -s {victim} in/agent.py && ln -s {victim_dir} in/nested",
                          cwd="/polar/session/workspace")
    run_prepare(rt, [plant, PrepareAction(type="upload_dir", src=str(src), dst="/polar/session/workspace/in")],
                deadline=time.time() + 60, cancelled=lambda: False, upload_roots=[src.parent.resolve()],
                upload_excluded=[], upload_max_bytes=None)
    assert victim.read_text() == "ORIGINAL" and oct(victim.stat().st_mode & 0o777) == "0o600"
    assert list(victim_dir.iterdir()) == []
    landed = rt.root / "workspace" / "in"
    assert not (landed / "agent.py").is_symlink() and (landed / "agent.py").read_text() == "print('agent')"
    assert (landed / "agent.py").stat().st_mode & 0o777 == 0o755
    assert not (landed / "nested").is_symlink() and (landed / "nested" / "tool.sh").read_text() == "echo tool"
    assert os.readlink(landed / "latest") == "agent.py"


def test_a_file_onto_a_folder_goes_into_it_and_an_upload_replaces_a_hard_link(rt, tmp_path):
    src = tmp_path / "data" / "one.txt"
    src.parent.mkdir()
    src.write_text("new")
    (rt.root / "workspace" / "in").mkdir(parents=True)
    upload(rt, src, "upload_file", None)
    assert (rt.root / "workspace" / "in" / "one.txt").read_text() == "new"
    outside = tmp_path / "outside.txt"  # a hard link to a file of the host's, where the file goes
    outside.write_text("HOST")
    (rt.root / "workspace" / "in" / "one.txt").unlink()
    os.link(outside, rt.root / "workspace" / "in" / "one.txt")
    upload(rt, src, "upload_file", None)
    assert outside.read_text() == "HOST" and (rt.root / "workspace" / "in" / "one.txt").read_text() == "new"


def test_a_named_pipe_in_the_upload_is_an_error_not_a_hang(rt, tmp_path):
    import shutil
    import threading

    src = tmp_path / "data" / "repo"
    src.mkdir(parents=True)
    (src / "a.txt").write_text("a")
    os.mkfifo(src / "pipe")
    failed = []
    worker = threading.Thread(target=lambda: failed.append(pytest.raises(
        (StepFailed, shutil.SpecialFileError), upload, rt, src, "upload_dir", None)), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the upload blocked on a named pipe"
    assert failed
