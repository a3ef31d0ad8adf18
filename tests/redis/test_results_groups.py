"""Consumer groups of the results stream: a group created after the stream was trimmed (what it
missed, reported), a dead consumer's pending entries (its own restart, another consumer), and a
group Redis lost under a reading trainer."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from pipeline import keys
from pipeline.stores.results_stream import TRIM_SLACK, ResultsStream
from tests.redis.test_results_delivery import client, publish


def test_a_group_created_after_the_stream_was_trimmed_reports_what_it_missed(r, redis_url, caplog):
    """The first results() of a new trainer group created it at id 0 on a stream the producer had
    already trimmed (no group held the trim back): the trimmed entries were silently never seen."""
    stream = ResultsStream(r, maxlen=10)
    publish(stream, "before")
    stream.ensure_group("early")  # a group that existed before the trim: it misses nothing
    list(client(redis_url).results(group="early", consumer="c", block_ms=20, stop_after=0.1))
    r.xgroup_destroy(keys.RESULTS_STREAM, "early")  # (gone again, so the trim is not held back)
    publish(stream, *[f"s{i}" for i in range(3 * TRIM_SLACK)])
    kept = r.xlen(keys.RESULTS_STREAM)
    assert kept < 3 * TRIM_SLACK + 1  # trimmed
    c = client(redis_url)
    assert c.missed_entries("late") == 0  # (no such group yet)
    with caplog.at_level(logging.WARNING, logger="polar.results"):
        got = [i.result.session_id for i in c.results(group="late", consumer="c", block_ms=20, stop_after=0.2)
               if not i.ack()]
    missed = 3 * TRIM_SLACK + 1 - kept
    assert len(got) == kept and c.missed_entries("late") == missed
    assert stream.stats()["groups"]["late"]["missed_entries"] == missed  # (GET /rollout/status shows it)
    assert f"consumer group late was created after {missed} entries had been trimmed" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="polar.results"):  # a restart of the group: no new warning
        list(c.results(group="late", consumer="c", block_ms=20, stop_after=0.1))
    assert "trimmed" not in caplog.text and c.missed_entries("late") == missed
    r.delete(keys.RESULTS_STREAM)  # a group created on a stream that lost nothing: nothing missed
    assert stream.ensure_group("fresh") == 0 and stream.missed("fresh") == 0


def test_missed_entries_cannot_be_told_before_redis_7():
    """Redis 6.2's XINFO STREAM has no entries-added: the count is unknown (None), not 0, unless
    the stream never had an entry."""
    from pipeline.stores.results_stream import missed_before

    assert missed_before({"length": 3, "last-generated-id": b"5-0", "first-entry": (b"3-0", {})}) is None
    assert missed_before({"length": 0, "last-generated-id": b"0-0"}) == 0
    assert missed_before({"length": 3, "entries-added": 5, "max-deleted-entry-id": b"2-0"}) == 2


HOLDER = """
import sys, time
from pipeline.client import RolloutClient
url, name, idle, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
it = RolloutClient("http://unused", redis_url=url).results(group="g", consumer=name, block_ms=50,
                                                            claim_idle_ms=idle, count=n + 2)
for _ in range(n):
    print(next(it).result.session_id, flush=True)
import redis
from pipeline import keys
while not redis.Redis.from_url(url).exists(keys.results_alive("g", name)):
    time.sleep(0.01)  # (the first beat, from a thread of the iterator's)
print("holding", flush=True)
time.sleep(600)
"""


def _killed_holding(redis_url: str, name: str, claim_idle_ms: int, n: int) -> list[str]:
    """A trainer process that takes ``n`` results (and reads two more ahead), then is killed -9."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, redis_url, name, str(claim_idle_ms), str(n)],
                            stdout=subprocess.PIPE, text=True, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert proc.stdout is not None
    taken = []
    try:
        for line in proc.stdout:
            if line.strip() == "holding":
                break
            taken.append(line.strip())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return taken


def test_a_killed_consumer_restarted_under_its_name_gets_its_pending_entries_at_once(r, redis_url):
    """Its own pending entries are re-read (XREADGROUP 0) on start: neither its beat, still there
    for its claim_idle_ms, nor any idle time is waited for."""
    stream = ResultsStream(r)
    publish(stream, *[f"s{i}" for i in range(5)])
    taken = _killed_holding(redis_url, "rank0", 600_000, 2)
    assert taken == ["s0", "s1"] and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 4
    assert r.exists(keys.results_alive("g", "rank0"))  # its beat outlives it: 10 minutes
    got = []
    for item in client(redis_url).results(group="g", consumer="rank0", block_ms=20, claim_idle_ms=600_000,
                                          stop_after=0.2):
        got.append((item.result.session_id, item.deliveries))
        item.ack()
    assert got == [("s0", 2), ("s1", 2), ("s2", 1), ("s3", 1), ("s4", 1)]


def test_another_consumer_waits_for_a_killed_ones_beat_then_its_own_claim_idle_ms(r, redis_url):
    """The bound on another consumer's wait for a killed one's entries: its beat lapses within the
    killed consumer's claim_idle_ms (D), and then the entries are claimed once idle the claimer's
    own (I), at its next claim round (every I / 2): at most max(D, I) + I / 2 after the kill."""
    stream = ResultsStream(r)
    publish(stream, *[f"s{i}" for i in range(4)])
    dead_ms, own_ms = 600_000, 1_000
    taken = _killed_holding(redis_url, "dead", dead_ms, 2)
    assert taken == ["s0", "s1"]
    beat = keys.results_alive("g", "dead")
    assert 0 < r.pttl(beat) <= dead_ms  # D: the longest the beat can outlive the kill
    ids = [e[0] for e in r.xrange(keys.RESULTS_STREAM)]
    r.xclaim(keys.RESULTS_STREAM, "g", "dead", 0, ids, idle=10 * dead_ms, justid=True)  # (idle for ages)
    assert stream.claim_stale("g", "other", 0) == []  # beating: nothing claimed, whatever the idle time
    r.delete(beat)  # (the beat lapsed: what D of waiting does)
    r.xclaim(keys.RESULTS_STREAM, "g", "dead", 0, ids, idle=own_ms - 100, justid=True)
    assert stream.claim_stale("g", "other", own_ms) == []  # not idle I yet
    r.xclaim(keys.RESULTS_STREAM, "g", "dead", 0, ids, idle=own_ms, justid=True)
    got = sorted(e.session_id for e in stream.claim_stale("g", "other", own_ms))
    assert got == ["s0", "s1", "s2", "s3"]  # idle I, no beat: all of it, the read-ahead too


def test_another_consumer_takes_all_of_a_dead_ones_entries_in_one_claim_round_not_a_hundred(r, redis_url):
    """claim_stale takes 100 entries a call, and the iterator called it once per claim_idle_ms / 2:
    a dead trainer that held 250 (iter_groups fills many groups) took three rounds -- 7.5 min at
    the default 300 s, not the bound above. A full page is followed by the next at once."""
    stream = ResultsStream(r)
    sids = [f"s{i:03d}" for i in range(250)]
    publish(stream, *sids)
    stream.ensure_group("g")
    ids = [e.entry_id for e in stream.read("g", "dead", pending=False, count=250, block_ms=None)]
    r.xclaim(keys.RESULTS_STREAM, "g", "dead", 0, ids, idle=600_000, justid=True)  # dead, no beat, idle long
    got = [i.result.session_id for i in client(redis_url).results(group="g", consumer="other", block_ms=20,
                                                                  claim_idle_ms=600_000, stop_after=0.5)
           if not i.ack()]
    assert sorted(got) == sids  # one claim round (the next would be 300 s later)


@pytest.mark.parametrize("loss", ["group destroyed", "stream deleted", "redis restarted empty"])
def test_a_group_redis_lost_under_a_reading_trainer_is_made_again_and_nothing_is_trained_twice(
        r, redis_url, tmp_path, loss, caplog):
    """Redis comes back without the group (no persistence, a failover to a lagging replica, a
    flush) or an operator destroyed it: the trainer's ack of what it held and its next read
    raised NOGROUP, and the iterator -- which rides out a Redis restart -- ended the trainer. Now
    the group is made again (an error log), what it acked before is skipped, new results come."""
    from infra.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis().start() if loss == "redis restarted empty" else None
    url = server.url if server else redis_url
    try:
        rds = redis.Redis.from_url(url)
        stream = ResultsStream(rds)
        publish(stream, "s0", "s1")
        it = client(url).results(group="g", consumer="rank0", block_ms=20, stop_after=1.0)
        first = next(it)
        first.ack()
        held = next(it)  # in the trainer's hands, unacked, when the group goes
        if loss == "group destroyed":
            rds.xgroup_destroy(keys.RESULTS_STREAM, "g")
        elif loss == "stream deleted":
            rds.delete(keys.RESULTS_STREAM)
        else:
            assert server is not None
            server.kill()
            server.start()
        with caplog.at_level(logging.WARNING, logger="polar.results"):
            held.ack()
        publish(stream, "s2")
        rest = []
        with caplog.at_level(logging.ERROR, logger="polar.client"):
            for item in it:
                rest.append(item.result.session_id)
                item.ack()
        assert [first.result.session_id, held.result.session_id, *rest] == ["s0", "s1", "s2"]
        assert "consumer group g is gone" in caplog.text
    finally:
        if server:
            server.stop()


STALLING = """
import sys
from pipeline.client import RolloutClient
it = RolloutClient("http://unused", redis_url=sys.argv[1]).results(group="g", consumer="stalled", block_ms=50,
                                                                   claim_idle_ms=500, count=4, stop_after=2)
for item in it:
    print(item.result.session_id, flush=True)
    sys.stdin.readline()  # (the trainer's step)
    item.ack()
print("end", flush=True)
"""


def test_a_consumer_frozen_past_its_claim_time_does_not_hand_over_what_another_claimed_meanwhile(r, redis_url):
    """A trainer process stopped (SIGSTOP, a frozen VM) while it had a batch read ahead: its beat
    lapses, another consumer claims the batch and trains on it. When the first resumes, it went
    on handing the rest of its old batch to its trainer -- every one of them trained twice. Now
    each entry is checked to still be this consumer's as it is handed over."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    stream = ResultsStream(r)
    publish(stream, "s0", "s1", "s2", "s3")
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, "-c", STALLING, redis_url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "s0"  # in its trainer's hands; s1..s3 read ahead
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(1.5)  # its beat (claim_idle_ms) lapses, its entries idle past the other's claim time
        other = []
        for item in client(redis_url).results(group="g", consumer="other", block_ms=50, claim_idle_ms=500,
                                              stop_after=1):
            other.append(item.result.session_id)
            item.ack()
        assert other == ["s0", "s1", "s2", "s3"]
        os.kill(proc.pid, signal.SIGCONT)
        later = []
        while True:
            proc.stdin.write("\n")
            proc.stdin.flush()
            line = proc.stdout.readline().strip()
            if line in ("end", ""):
                break
            later.append(line)
        assert later == []  # (s0 it had before it stopped: at least once; the rest, not a second time)
        assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(30)
