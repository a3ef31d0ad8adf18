"""A service's log past its size is copied aside and truncated in place, while the service
keeps appending through the descriptor it has (logrotate's copytruncate)."""

from __future__ import annotations

import os

from infra.log_rotation import rotate_if_large


def test_a_log_past_its_size_is_copied_aside_and_the_writer_carries_on(tmp_path):
    log = tmp_path / "worker-run.log"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # as the stack opens it for a service
    try:
        os.write(fd, b"a" * 100)
        assert not rotate_if_large(log, 100)  # at the limit: kept
        os.write(fd, b"b" * 10)
        assert rotate_if_large(log, 100)
        assert (tmp_path / "worker-run.log.1").read_bytes() == b"a" * 100 + b"b" * 10 and log.stat().st_size == 0
        os.write(fd, b"after\n")  # the service appends at the new end, not at its old offset
        assert log.read_bytes() == b"after\n"
        for round_ in range(4):  # older copies shift down; three are kept
            os.write(fd, bytes([ord("c") + round_]) * 200)
            assert rotate_if_large(log, 100)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-run.log", "worker-run.log.1",
                                                               "worker-run.log.2", "worker-run.log.3"]
        assert (tmp_path / "worker-run.log.1").read_bytes() == b"f" * 200
        assert (tmp_path / "worker-run.log.3").read_bytes() == b"d" * 200
    finally:
        os.close(fd)


def test_a_link_where_the_copy_goes_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    log = tmp_path / "api.log"
    log.write_bytes(b"x" * 50)
    (tmp_path / "api.log.1").symlink_to(victim)
    assert rotate_if_large(log, 10)
    assert victim.read_text() == "keep" and (tmp_path / "api.log.1").read_bytes() == b"x" * 50
