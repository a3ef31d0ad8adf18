"""The proxy's hot-path Redis client against a real server, including a server restart."""

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
