"""The embedded server's persistence across restarts: its data and, while free, its port."""

from __future__ import annotations

import socket

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
