"""Prepare uploads are bounded: a folder (counted whole, links not followed) or file larger than
``POLAR_UPLOAD_MAX_MB`` is refused before anything is copied, as a payload naming a big folder
would otherwise copy it once per session."""

from __future__ import annotations

import time

import pytest

from pipeline.schemas import PrepareAction, RuntimeSpec
from workers import runtimes
from workers.stages.prepare import StepFailed, run_prepare


@pytest.fixture
def rt(tmp_path):
    runtime = runtimes.create(RuntimeSpec(backend="local"), "sess-uploads", runtimes.RuntimeHost(root=tmp_path / "s"))
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
