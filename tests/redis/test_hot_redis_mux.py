"""The proxy's shared Redis connection under gevent (proxy/hot_redis_mux.py), against a real
server: each scenario of tests/redis/mux_scenarios.py runs in a monkey-patched process of its own,
as a proxy worker does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def scenario(name: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.redis.mux_scenarios", name], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_concurrent_calls_share_one_connection_get_their_own_replies_and_are_batched():
    got = scenario("concurrent")
    assert got["mixed"] == []  # every caller read its own ECHO
    assert got["distinct"] == got["sends"] == got["max"] == 5000  # every INCR ran exactly once
    assert got["connections"] == 1
    # 5,000 sends from 50 callers reached Redis in far fewer reads than sends: writes were batched
    assert got["redis_reads"] < got["sends"] / 4, got


def test_error_replies_reach_only_their_caller():
    assert scenario("errors") == {"noscript": "NoScript", "wrongtype": "RedisReplyError", "fine": "[b'x']",
                                  "after": "[b'1']"}  # the failed call's later command still ran


def test_a_server_restarted_while_idle_is_reconnected_and_nothing_runs_twice():
    assert scenario("restart_idle") == {"first": [1], "second": [2]}


def test_redis_killed_mid_call_fails_every_waiting_call_then_recovers():
    got = scenario("kill_in_flight")
    assert got["failures"] == ["ConnectionError"] * 6
    assert got["after"] == [1]  # the INCRs queued behind the killed script never ran


def test_a_late_reply_fails_the_call_at_the_timeout_and_a_new_connection_serves_the_next():
    got = scenario("timeout")
    assert got["slow"].startswith("ConnectionError") and "0.3 s" in got["slow"]
    assert 0.25 <= got["waited"] < 1.0
    assert got["after"] == "[b'PONG']"


def test_a_discarded_calls_replies_do_not_reach_the_next_call():
    assert scenario("discard") == {"next": "[b'mine', b'2']"}


def test_callers_reading_out_of_order_or_not_at_all_each_get_their_own_replies():
    assert scenario("out_of_order") == {"last": "[3, b'last']", "first": "[1, b'first']", "after": "[b'3']"}
