"""Scenarios for the proxy's shared Redis connection (proxy/hot_redis_mux.py), each run in a
process of its own with gevent's monkey patching, as a proxy worker runs (the test process is not
patched): ``python -m tests.redis.mux_scenarios NAME`` prints one JSON object."""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

from infra.embedded_redis import EmbeddedRedis  # noqa: E402
from proxy.hot_redis import HotRedis, NoScript, RedisReplyError  # noqa: E402

# Keeps Redis busy until the scenario stops it (SCRIPT KILL, or killing the server): a script's TIME
# is frozen while it runs, so it counts, and 10^12 steps outlast any test on any machine. A bounded
# count would not: 10^8 steps took 1-3 s on one machine and under 0.3 s on another.
SPIN = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1"
STEPS = 10**12


def concurrent(server: EmbeddedRedis) -> dict:
    """50 callers, 100 sends each, yielding between send and replies: each gets its own."""
    hot, plain = HotRedis(server.url), redis.Redis.from_url(server.url)
    clients = plain.info("clients")["connected_clients"]
    hot.pipeline([("SET", "n", 0)])
    reads = plain.info("stats")["total_reads_processed"]
    mixed = []

    def caller(i: int) -> list[int]:
        got = []
        for j in range(100):
            pending = hot.send([("INCR", "n"), ("ECHO", f"{i}:{j}")])
            gevent.sleep(0)
            n, echo = pending.replies()
            if echo != f"{i}:{j}".encode():
                mixed.append((i, j, echo.decode()))
            got.append(n)
        return got

    callers = [gevent.spawn(caller, i) for i in range(50)]
    gevent.joinall(callers, raise_error=True)
    values = [n for c in callers for n in c.value]
    return {"sends": len(values), "distinct": len(set(values)), "max": max(values), "mixed": mixed[:5],
            "connections": plain.info("clients")["connected_clients"] - clients,
            "redis_reads": plain.info("stats")["total_reads_processed"] - reads - 2}


def errors(server: EmbeddedRedis) -> dict:
    """Error replies reach the caller whose command failed, and only it."""
    hot = HotRedis(server.url)
    hot.pipeline([("SET", "s", "x")])
    outcome: dict[str, str] = {}

    def run(name: str, commands: list) -> None:
        try:
            outcome[name] = repr(hot.send(commands).replies())
        except NoScript:
            outcome[name] = "NoScript"
        except RedisReplyError:
            outcome[name] = "RedisReplyError"

    gevent.joinall([gevent.spawn(run, "noscript", [("EVALSHA", "0" * 40, 0)]),
                    gevent.spawn(run, "wrongtype", [("INCR", "s"), ("SET", "after", 1)]),
                    gevent.spawn(run, "fine", [("GET", "s")])])
    outcome["after"] = repr(hot.pipeline([("GET", "after")]))
    return outcome


def restart_idle(server: EmbeddedRedis) -> dict:
    """A server restarted while the connection idles: the next call reconnects, runs once."""
    hot = HotRedis(server.url)
    hot.pipeline([("SET", "n", 0)])
    port = server.port
    server.stop()
    server.__init__(port=port)
    server.start()
    gevent.sleep(0.2)  # the reader has seen the old connection close
    return {"first": hot.pipeline([("INCR", "n")]), "second": hot.pipeline([("INCR", "n")])}  # once each


def kill_in_flight(server: EmbeddedRedis) -> dict:
    """Redis killed while a call's script runs and others wait behind it: all of them fail with
    ConnectionError; after a restart, calls go through again."""
    hot = HotRedis(server.url)
    hot.pipeline([("PING",)])
    waiting = [hot.send([("EVAL", SPIN, 0, STEPS)])] + [hot.send([("INCR", "n")]) for _ in range(5)]
    gevent.sleep(0.3)
    server.kill()
    failures = []
    for pending in waiting:
        try:
            pending.replies()
            failures.append("answered")
        except ConnectionError:
            failures.append("ConnectionError")
    port = server.port
    server.__init__(port=port)
    server.start()
    return {"failures": failures, "after": hot.pipeline([("INCR", "n")])}


def timeout(server: EmbeddedRedis) -> dict:
    """A reply later than the timeout fails the call (and the connection, out of step now); the
    next call has a new connection."""
    hot, plain = HotRedis(server.url, timeout=0.3), redis.Redis.from_url(server.url)
    plain.config_set("busy-reply-threshold", 100)  # so SCRIPT KILL is heard 0.1 s into the script
    hot.pipeline([("PING",)])
    started = time.monotonic()
    try:
        hot.send([("EVAL", SPIN, 0, STEPS)]).replies()
        slow = "answered"
    except ConnectionError as exc:
        slow = f"ConnectionError: {exc}"
    waited = time.monotonic() - started
    plain.script_kill()
    deadline = time.monotonic() + 30
    while True:  # once the script has ended, a new connection answers
        try:
            return {"slow": slow, "waited": round(waited, 2), "after": repr(hot.pipeline([("PING",)]))}
        except (ConnectionError, RedisReplyError) as exc:
            # (killed, the script ends at its next check: a PING just before that is told BUSY)
            if time.monotonic() > deadline or (isinstance(exc, RedisReplyError) and not str(exc).startswith("BUSY")):
                raise
            time.sleep(0.01)


def discard(server: EmbeddedRedis) -> dict:
    """A discarded call's replies are taken off the connection; the next call gets its own."""
    hot = HotRedis(server.url)
    hot.pipeline([("SET", "n", 0)])
    hot.send([("INCR", "n"), ("INCR", "n")]).discard()
    return {"next": repr(hot.pipeline([("ECHO", "mine"), ("GET", "n")]))}


def out_of_order(server: EmbeddedRedis) -> dict:
    """Callers reading in another order than they sent, one of them never reading: whoever reads
    first reads for the others, and each still gets its own replies."""
    hot = HotRedis(server.url)
    hot.pipeline([("SET", "n", 0)])
    first = hot.send([("INCR", "n"), ("ECHO", "first")])
    dropped = hot.send([("INCR", "n")])
    last = hot.send([("INCR", "n"), ("ECHO", "last")])
    dropped.discard()
    got: dict[str, str] = {}
    readers = [gevent.spawn(lambda: got.__setitem__("last", repr(last.replies()))),
               gevent.spawn(lambda: got.__setitem__("first", repr(first.replies())))]
    gevent.joinall(readers, raise_error=True)
    got["after"] = repr(hot.pipeline([("GET", "n")]))
    return got


if __name__ == "__main__":
    srv = EmbeddedRedis().start()
    try:
        print(json.dumps(globals()[sys.argv[1]](srv)), flush=True)
    finally:
        srv.stop()
