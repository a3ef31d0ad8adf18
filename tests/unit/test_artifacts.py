"""Session artifacts, without a stack: what is copied out before teardown, the key redacted,
the budget kept, and nothing outside the session pulled in."""

from __future__ import annotations

import os

from workers.stages import artifacts

KEY = "sk-polar-abc-" + "1" * 48


def session(tmp_path):
    root = tmp_path / "sess-1"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "agent.stdout").write_text(f"calling http://proxy/s/{KEY}/v1 ... API Error: 400\n")
    (root / "logs" / "agent.stderr").write_text("boom\n")
    (root / "home" / ".codex" / "sessions" / "2026").mkdir(parents=True)
    (root / "home" / ".codex" / "sessions" / "2026" / "rollout.jsonl").write_text('{"type":"turn"}\n')
    (root / "home" / ".codex" / "config.toml").write_text(f'base_url = "http://proxy/s/{KEY}/v1"\n')
    (root / "workspace").mkdir()
    (root / "workspace" / "big.bin").write_bytes(b"x" * 1000)
    return root


def test_output_logs_and_the_harness_transcripts_are_kept_with_the_key_redacted(tmp_path):
    root = session(tmp_path)
    dest = artifacts.keep(root, tmp_path / "kept", (".codex/sessions",), KEY, 10_000)
    assert dest == tmp_path / "kept"
    kept = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert kept == ["home/.codex/sessions/2026/rollout.jsonl", "logs/agent.stderr", "logs/agent.stdout"]
    out = (dest / "logs" / "agent.stdout").read_text()
    assert KEY not in out and artifacts.REDACTED in out and "API Error: 400" in out


def test_links_out_of_the_session_are_not_followed(tmp_path):
    root = session(tmp_path)
    secret = tmp_path / "host-secret.txt"
    secret.write_text("do not copy")
    os.symlink(secret, root / "logs" / "evil.log")
    os.symlink(tmp_path, root / "home" / ".codex" / "sessions" / "escape")
    dest = artifacts.keep(root, tmp_path / "kept", (".codex/sessions",), KEY, 10_000)
    assert not any("do not copy" in p.read_text() for p in dest.rglob("*") if p.is_file())


def test_what_does_not_fit_the_budget_is_listed_not_copied(tmp_path):
    root = session(tmp_path)
    (root / "logs" / "huge.log").write_bytes(b"y" * 5000)
    dest = artifacts.keep(root, tmp_path / "kept", (), KEY, 1000)
    assert not (dest / "logs" / "huge.log").exists() and "logs/huge.log (5000 bytes)" in (
        dest / "TRUNCATED.txt").read_text()
    assert (dest / "logs" / "agent.stderr").exists()


def test_a_task_id_cannot_place_artifacts_outside_the_folder(tmp_path):
    for task_id in ("..", ".hidden", "a..b", "x y"):
        folder = artifacts.folder_for(tmp_path, task_id, "sess-1")
        assert folder.resolve().is_relative_to((tmp_path / "artifacts").resolve()), task_id
        assert folder.parent.parent == tmp_path / "artifacts"


def test_old_artifact_folders_are_removed(tmp_path):
    old, new = artifacts.folder_for(tmp_path, "t", "sess-old"), artifacts.folder_for(tmp_path, "t", "sess-new")
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    os.utime(old, (1000, 1000))
    assert artifacts.remove_old(tmp_path, 3600, now=new.stat().st_mtime + 10) == 1
    assert new.exists() and not old.exists()


def test_a_file_swapped_for_a_pipe_or_grown_after_the_listing_neither_hangs_nor_overflows(tmp_path, monkeypatch):
    """A container's process still runs while its artifacts are copied: it can swap a listed file
    for a named pipe (the evaluate thread waited on it for good) or grow it past the budget."""
    import threading

    root = session(tmp_path)
    (root / "artifacts").mkdir()
    (root / "artifacts" / "grows.txt").write_text("small")
    listed = artifacts._inside

    def swap_after_listing(path, session_root):
        if path.name == "agent.stderr":
            path.unlink()
            os.mkfifo(path)
        if path.name == "grows.txt":
            path.write_bytes(b"y" * 100_000)
        return listed(path, session_root)

    monkeypatch.setattr(artifacts, "_inside", swap_after_listing)
    done = threading.Event()
    kept: list = []
    worker = threading.Thread(target=lambda: (kept.append(artifacts.keep(root, tmp_path / "kept", (), KEY, 10_000)),
                                              done.set()), daemon=True)
    worker.start()
    assert done.wait(10), "copying the artifacts waited on a named pipe"
    dest = kept[0]
    assert not (dest / "logs" / "agent.stderr").exists() and (dest / "logs" / "agent.stdout").exists()
    grown = dest / "artifacts" / "grows.txt"  # within the budget or listed as over it, never past it
    assert (not grown.exists() and "grows.txt" in (dest / "TRUNCATED.txt").read_text()) or grown.stat().st_size <= 10_000
