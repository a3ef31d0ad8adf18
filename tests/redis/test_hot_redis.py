"""The proxy's hot-path Redis client against a real server, including a server restart."""

import time

import pytest

from infra.embedded_redis import EmbeddedRedis
from proxy.hot_redis import HotRedis, NoScript, RedisReplyError


def test_pipeline_replies_and_errors(r, redis_url):
    hot = HotRedis(redis_url)
    assert hot.pipeline([("SET", "a", b"1"), ("INCR", "a"), ("GET", "a"), ("GET", "missing")]) == [b"OK", 2, b"2", None]
    with pytest.raises(NoScript):
        hot.pipeline([("EVALSHA", "0" * 40, 0)])
    with pytest.raises(RedisReplyError):
        hot.pipeline([("INCR", "a"), ("LPUSH", "a", "x")])  # wrong type
    assert hot.pipeline([("GET", "a")]) == [b"3"]  # the connection is still usable, and INCR ran


def test_a_restarted_server_is_reconnected_without_double_execution():
    server = EmbeddedRedis().start()
    try:
        hot = HotRedis(server.url)
        hot.pipeline([("SET", "n", 0)])
        port = server.port
        server.stop()
        server = EmbeddedRedis(port=port).start()  # same address, stale pooled socket
        assert hot.pipeline([("INCR", "n")]) == [1]
        assert hot.pipeline([("INCR", "n")]) == [2]
    finally:
        server.stop()


def test_sent_commands_run_before_their_replies_are_read(r, redis_url):
    hot = HotRedis(redis_url)
    pending = hot.send([("SET", "k", b"v"), ("INCR", "n")])
    other = hot.send([("INCR", "n")])  # a second caller meanwhile gets a connection of its own
    deadline = time.monotonic() + 5
    while r.get("n") != b"2" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert r.get("k") == b"v" and r.get("n") == b"2"  # both ran, no reply read yet
    assert sorted([pending.replies()[1], other.replies()[0]]) == [1, 2]
    with pytest.raises(RuntimeError):
        pending.replies()  # read once
    assert len(hot._idle) == 2  # both connections back in the pool


def test_error_replies_are_raised_after_every_reply_is_read(r, redis_url):
    hot = HotRedis(redis_url)
    pending = hot.send([("LPUSH", "l", "x"), ("INCR", "l"), ("SET", "after", 1)])
    with pytest.raises(RedisReplyError):
        pending.replies()
    assert r.get("after") == b"1"
    assert hot.pipeline([("GET", "after")]) == [b"1"]  # its connection went back clean


def test_a_discarded_send_closes_its_connection(redis_url):
    hot = HotRedis(redis_url)
    hot.pipeline([("PING",)])
    pending = hot.send([("PING",)])
    assert hot._idle == []  # the pooled connection is the pending send's
    pending.discard()
    assert hot._idle == []  # not returned: its reply was never read
    assert hot.pipeline([("PING",)]) == [b"PONG"]


def test_a_send_on_a_stale_connection_is_resent_once_on_a_new_one():
    server = EmbeddedRedis().start()
    try:
        hot = HotRedis(server.url)
        hot.pipeline([("SET", "n", 0)])
        port = server.port
        server.stop()
        server = EmbeddedRedis(port=port).start()
        pending = hot.send([("INCR", "n")])
        assert pending.replies() == [1]
        assert hot.pipeline([("GET", "n")]) == [b"1"]  # ran exactly once
    finally:
        server.stop()
