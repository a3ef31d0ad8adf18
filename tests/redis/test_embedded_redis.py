"""The embedded server's persistence across restarts: its data and, while free, its port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from infra.embedded_redis import EmbeddedRedis


def test_a_persistent_server_comes_back_on_its_port_with_its_data(tmp_path):
    first = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    try:
        redis.Redis.from_url(first.url).set("k", "v")
    finally:
        first.stop()
    again = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    try:
        assert again.port == first.port and redis.Redis.from_url(again.url).get("k") == b"v"
    finally:
        again.stop()
    with socket.socket() as taken:  # the port is someone else's now: another one, same data
        taken.bind(("127.0.0.1", first.port))
        taken.listen()
        moved = EmbeddedRedis(data_dir=tmp_path / "redis").start()
        try:
            assert moved.port != first.port and redis.Redis.from_url(moved.url).get("k") == b"v"
        finally:
            moved.stop()
    assert EmbeddedRedis(data_dir=tmp_path / "redis").port == moved.port  # remembered in its folder


def test_a_password_is_required_and_stays_off_the_command_line(tmp_path):
    password = 'pa"ss w\\ord:@/'  # quoting in the config line and in the URL
    server = EmbeddedRedis(data_dir=tmp_path / "redis", password=password).start()
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host=server.host, port=server.port).set("k", "v")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(server.address).ping()  # the URL to show: no password
        assert redis.Redis.from_url(server.url).set("k", "v")
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode()
        assert "pa" + '"ss' not in cmdline and "requirepass" not in cmdline
        redis.Redis.from_url(server.url).config_set("appendfsync", "always")
        redis.Redis.from_url(server.url).set("k2", "v2")
        # The append-only file holds session keys and results: nothing in its folder is readable
        # by other users, and the folder itself is the owner's alone.
        assert (tmp_path / "redis").stat().st_mode & 0o077 == 0
        files = [p for p in (tmp_path / "redis").rglob("*") if p.is_file()]
        assert files and all(p.stat().st_mode & 0o077 == 0 for p in files), [oct(p.stat().st_mode) for p in files]
    finally:
        server.stop()
    again = EmbeddedRedis(data_dir=tmp_path / "redis", password=password).start()
    try:
        assert redis.Redis.from_url(again.url).get("k2") == b"v2"
    finally:
        again.stop()
