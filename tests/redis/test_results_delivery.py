"""Results-stream delivery semantics against a real Redis: a consumer that crashes and restarts,
a consumer group whose member dies, poison entries and the dead-letter stream, and a trim that
must not drop what a group has not acked."""

from __future__ import annotations

import logging
import time

from pipeline import keys
from pipeline.client import RolloutClient
from pipeline.stores.results_stream import TRIM_SLACK, ResultsStream
from tests.redis.test_results_stream import result


def client(redis_url, **kw) -> RolloutClient:
    return RolloutClient("http://unused", redis_url=redis_url, **kw)


def publish(stream: ResultsStream, *sids: str) -> None:
    for sid in sids:
        stream.publish_once(result(sid))


def test_a_consumer_that_crashes_and_restarts_loses_nothing_and_trains_nothing_twice(r, redis_url):
    stream = ResultsStream(r)
    publish(stream, "s0", "s1", "s2", "s3")
    acked: list[str] = []
    it = client(redis_url).results(group="g", consumer="rank0", block_ms=50, stop_after=0.2)
    for item in it:
        if item.result.session_id == "s2":
            break  # crashes holding s2, never acked
        acked.append(item.result.session_id)
        item.ack()
    it.close()
    assert acked == ["s0", "s1"]
    # A crash between XADD and the published marker: s0 is in the stream a second time.
    r.delete(keys.session_published("s0"))
    publish(stream, "s0", "s4")
    # A new process: nothing of the old iterator's memory survives.
    again = []
    for item in client(redis_url).results(group="g", consumer="rank0", block_ms=50, stop_after=0.3):
        again.append((item.result.session_id, item.deliveries))
        item.ack()
    # Its unacked entries first (s3 came in the crashed run's batch too), then new ones; s0 not again.
    assert again == [("s2", 2), ("s3", 1), ("s4", 1)]  # s3 was read ahead, never handed over
    assert sorted(acked + [s for s, _ in again]) == ["s0", "s1", "s2", "s3", "s4"]
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0 and stream.stats()["dead_letters"] == 0


def test_a_live_consumer_claims_the_entries_of_one_that_died(r, redis_url):
    stream = ResultsStream(r)
    publish(stream, "a0", "a1", "a2")
    dead = client(redis_url).results(group="g", consumer="dies", block_ms=50, count=3)
    held = [next(dead).result.session_id for _ in range(3)]  # read, never acked: then it dies
    dead.close()
    assert held == ["a0", "a1", "a2"]
    publish(stream, "b0")
    got = []
    t0 = time.monotonic()
    for item in client(redis_url).results(group="g", consumer="lives", block_ms=50, claim_idle_ms=300,
                                          stop_after=1.0):
        got.append(item.result.session_id)
        item.ack()
    # b0, and the dead one's, claimed once idle 300 ms (before b0 when this machine took that
    # long to start the second iterator)
    assert sorted(got) == sorted([*held, "b0"]) and len(got) == 4
    assert time.monotonic() - t0 >= 0.3
    info = {c["name"].decode(): c["pending"] for c in r.xinfo_consumers(keys.RESULTS_STREAM, "g")}
    assert info == {"dies": 0, "lives": 0}


def test_a_consumer_does_not_reclaim_what_it_still_holds(r, redis_url):
    publish(ResultsStream(r), "x")
    it = client(redis_url).results(group="g", consumer="c", block_ms=50, claim_idle_ms=100, stop_after=0.5)
    first = next(it)
    rest = list(it)  # held unacked for longer than claim_idle_ms: not delivered to itself again
    assert rest == [] and first.deliveries == 1
    first.ack()
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_an_entry_nacked_max_deliveries_times_goes_to_the_dead_letter_stream(r, redis_url, caplog):
    stream = ResultsStream(r)
    publish(stream, "poison", "fine")
    seen = []
    with caplog.at_level(logging.ERROR, logger="polar.results"):
        for item in client(redis_url, max_deliveries=3).results(group="g", consumer="c", block_ms=50,
                                                                 stop_after=0.3):
            seen.append((item.result.session_id, item.deliveries))
            item.nack() if item.result.session_id == "poison" else item.ack()
    assert [d for s, d in seen if s == "poison"] == [1, 2, 3] and ("fine", 1) in seen
    [dead] = stream.dead_letters()
    assert dead["session_id"] == "poison" and dead["deliveries"] == "4" and dead["group"] == "g"
    assert "max_deliveries=3" in dead["reason"] and "dead-lettered" in caplog.text
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0  # acked off the main stream
    assert stream.stats()["dead_letters"] == 1
    [(_, fields)] = r.xrange(keys.RESULTS_DEAD_LETTER)
    assert fields[b"data"] == r.xrange(keys.RESULTS_STREAM)[0][1][b"data"]  # the blob is kept for replay


def test_a_consumer_that_keeps_crashing_on_an_entry_dead_letters_it_after_n_deliveries(r, redis_url):
    stream = ResultsStream(r)
    publish(stream, "crashes-the-trainer")
    for attempt in range(3):  # each run takes it and dies before acking
        it = client(redis_url, max_deliveries=3).results(group="g", consumer="c", block_ms=50)
        assert next(it).deliveries == attempt + 1
        it.close()
    assert list(client(redis_url, max_deliveries=3).results(group="g", consumer="c", block_ms=50,
                                                             stop_after=0.2)) == []
    assert [d["reason"][:24] for d in stream.dead_letters()] == ["delivered 4 times withou"]


def _bad_arrays_blob() -> bytes:
    """A compact blob whose head parses but whose mask runs do not cover the response: only
    reading the arrays finds it (they are made lazily)."""
    from pipeline.blobs import encode_result
    from tests.unit.test_result_blobs import result as blob_result
    from tests.unit.test_result_blobs import trace

    blob = encode_result(blob_result(trace([1], list(range(200)), [0.0] * 100 + [1.0] * 100,
                                           [0.0] * 100 + [-0.5] * 100)))
    first_run = (100).to_bytes(4, "little") + (100).to_bytes(4, "little")
    assert blob.count(first_run) == 1
    return blob.replace(first_run, (90).to_bytes(4, "little") + (100).to_bytes(4, "little"))


def test_undecodable_and_trimmed_entries_are_dead_lettered_not_skipped(r, redis_url):
    stream = ResultsStream(r)
    r.xadd(keys.RESULTS_STREAM, {"data": b"\xc1 not a blob", "session_id": "garbage"})
    r.xadd(keys.RESULTS_STREAM, {"data": b"\xc1"})  # names no session either
    r.xadd(keys.RESULTS_STREAM, {"data": _bad_arrays_blob(), "session_id": "bad-arrays"})
    publish(stream, "ok")
    got = [i.result.session_id for i in client(redis_url).results(group="g", consumer="c", block_ms=50,
                                                                  stop_after=0.2) if not i.ack()]
    assert got == ["ok"]
    reasons = {d["session_id"]: d["reason"] for d in stream.dead_letters()}
    assert set(reasons) == {"garbage", "", "bad-arrays"} and all(v.startswith("undecodable") for v in reasons.values())
    assert "runs cover 190 tokens" in reasons["bad-arrays"]

    # An entry deleted while pending (by hand: the producer's own trim would keep it).
    publish(stream, "lost")
    it = client(redis_url).results(group="h", consumer="c", block_ms=50)
    pending = [next(it) for _ in range(2)]
    it.close()
    r.xtrim(keys.RESULTS_STREAM, maxlen=0)
    assert list(client(redis_url).results(group="h", consumer="c", block_ms=50, stop_after=0.2)) == []
    trimmed = [d for d in stream.dead_letters() if d["group"] == "h" and "trimmed" in d["reason"]]
    assert [p.result.session_id for p in pending] == ["ok", "lost"]  # (h also dead-lettered the bad ones)
    assert sorted(d["entry_id"] for d in trimmed) == sorted(p.entry_id for p in pending)
    assert r.xpending(keys.RESULTS_STREAM, "h")["pending"] == 0


def test_trimming_never_drops_what_a_group_has_not_acked_and_reports_the_backlog(r, redis_url, caplog):
    maxlen = 10
    stream = ResultsStream(r, maxlen=maxlen)
    publish(stream, "first")
    stream.ensure_group("slow")
    it = client(redis_url).results(group="slow", consumer="c", block_ms=50)
    held = next(it)  # delivered, never acked
    with caplog.at_level(logging.ERROR, logger="polar.results"):
        publish(stream, *[f"s{i}" for i in range(3 * TRIM_SLACK)])
    stats = stream.stats()
    assert r.xlen(keys.RESULTS_STREAM) == 3 * TRIM_SLACK + 1  # nothing dropped: "first" is pending
    assert stats["trims_held_back"] > 0 and stats["backlog_over_maxlen"] > TRIM_SLACK
    assert "kept because a consumer group has not read or acked them" in caplog.text
    assert stats["groups"]["slow"]["pending"] == 1
    held.ack()
    # Acked but 300 entries still unread by the group: still kept.
    publish(stream, "after-ack")
    assert r.xlen(keys.RESULTS_STREAM) == 3 * TRIM_SLACK + 2
    got = []
    for item in it:
        got.append(item.result.session_id)
        item.ack()
        if item.result.session_id == "after-ack":
            break
    assert len(got) == 3 * TRIM_SLACK + 1
    publish(stream, "caught-up")  # the group has everything: the cap applies again
    assert r.xlen(keys.RESULTS_STREAM) <= maxlen + TRIM_SLACK
    assert stream.stats()["backlog_over_maxlen"] == 0


def test_without_a_consumer_group_the_cap_applies_as_before(r):
    stream = ResultsStream(r, maxlen=10)
    publish(stream, *[f"s{i}" for i in range(3 * TRIM_SLACK)])
    assert r.xlen(keys.RESULTS_STREAM) <= 10 + TRIM_SLACK and stream.stats()["trims_held_back"] == 0


def test_publishers_trimming_at_once_report_no_backlog_without_a_group(r, redis_url):
    """The callback worker's threads trim as they publish: each took the stream's length before
    the trim, less what it removed itself, and counted what the others removed as held back (a
    probe saw 16 "held back" trims and ERROR lines with no consumer group at all)."""
    import threading

    import redis as redis_lib

    def publisher(k: int) -> None:
        own = ResultsStream(redis_lib.Redis.from_url(redis_url), maxlen=10)
        publish(own, *[f"p{k}-{i}" for i in range(2 * TRIM_SLACK)])

    threads = [threading.Thread(target=publisher, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = ResultsStream(r, maxlen=10).stats()
    assert stats["trims_held_back"] == 0 and stats["backlog_over_maxlen"] == 0
    assert r.xlen(keys.RESULTS_STREAM) <= 10 + 2 * TRIM_SLACK


def test_entries_read_ahead_by_a_live_consumer_are_not_claimed_by_another(r, redis_url):
    """A consumer reads a batch of 10 and spends longer than claim_idle_ms on the first (a
    training step): the other nine, read ahead but not yet handed over, stay its own -- another
    consumer of the group claims nothing, and every session is delivered once."""
    import threading

    stream = ResultsStream(r)
    sids = [f"r{i}" for i in range(10)]
    publish(stream, *sids)
    slow = client(redis_url).results(group="g", consumer="slow", block_ms=50, count=10, claim_idle_ms=300)
    first = next(slow)
    other: list[str] = []

    def rival():
        for item in client(redis_url).results(group="g", consumer="rival", block_ms=50, claim_idle_ms=300,
                                              stop_after=1.5):
            other.append(item.result.session_id)
            item.ack()

    t = threading.Thread(target=rival)
    t.start()
    t.join(30)
    assert other == []  # nothing claimed from a live consumer
    first.ack()
    got = [first.result.session_id]
    for item in slow:
        got.append(item.result.session_id)
        item.ack()
        if len(got) == 10:
            break
    slow.close()
    assert got == sids and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_a_consumer_with_a_shorter_claim_idle_ms_claims_nothing_from_a_live_one(r, redis_url):
    """Two ranks of one group with different claim_idle_ms (the default 300 s, and 0.3 s): the
    live rank resets its entries' idle time only every 100 s, so the other took every entry it
    held or had read ahead after 0.3 s, and both trained on them. Alive is the live iterator's
    beat, not the idle time; once it closes (or dies and its beat lapses), they are claimed."""
    publish(ResultsStream(r), "h0", "h1", "h2")
    holder = client(redis_url).results(group="g", consumer="patient", block_ms=50, count=3)
    held = next(holder)  # one handed over, two read ahead
    time.sleep(0.6)
    quick = [item.result.session_id for item in client(redis_url).results(
        group="g", consumer="quick", block_ms=50, claim_idle_ms=300, stop_after=0.8)]
    assert quick == []
    held.ack()
    holder.close()  # its beat ends: what it still had is the other's once idle 0.3 s
    got = []
    for item in client(redis_url).results(group="g", consumer="quick", block_ms=50, claim_idle_ms=300,
                                          stop_after=1.0):
        got.append(item.result.session_id)
        item.ack()
    assert held.result.session_id == "h0" and sorted(got) == ["h1", "h2"]
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_reads_that_would_never_return_or_fail_late_are_refused_and_stop_after_is_kept(r, redis_url):
    """block_ms=0 (Redis's BLOCK 0: for ever) hung the iterator past stop_after and every claim;
    count=0 failed only at the read, after creating a group that then held back every trim; and a
    block_ms longer than stop_after blocked that long (up to claim_idle_ms / 2)."""
    import pytest

    for kw in ({"count": 0}, {"count": -5}, {"block_ms": -1}, {"block_ms": 0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            next(client(redis_url).results(group="bad", consumer="c", stop_after=0.2, **kw))
    assert r.exists(keys.RESULTS_STREAM) == 0  # no group created (nor the stream with it)
    t0 = time.monotonic()
    assert list(client(redis_url).results(group="g", consumer="c", block_ms=20_000, stop_after=0.3)) == []
    assert time.monotonic() - t0 < 5


def test_a_restart_re_reads_its_unacked_entries_a_page_at_a_time(r, redis_url, monkeypatch):
    """A trainer holding thousands of entries (iter_groups filling many groups) re-read them all in
    one XREADGROUP at its restart: one reply of every blob, buffered whole in Redis."""
    import pipeline.client as client_module

    monkeypatch.setattr(client_module, "PENDING_PAGE", 40, raising=False)
    stream = ResultsStream(r)
    sids = [f"p{i:03d}" for i in range(150)]
    publish(stream, *sids)
    first = client(redis_url).results(group="g", consumer="c", block_ms=50, count=150)
    held = [next(first) for _ in range(150)]  # all held, none acked: then it dies
    first.close()
    counts: list[int] = []
    read = ResultsStream.read

    def spy(self, *a, **kw):
        if kw.get("pending"):
            counts.append(kw["count"])
        return read(self, *a, **kw)

    monkeypatch.setattr(ResultsStream, "read", spy)
    got = []
    for item in client(redis_url).results(group="g", consumer="c", block_ms=50, stop_after=0.3):
        got.append(item.result.session_id)
        if len(got) % 2:
            item.ack()  # (acks between pages)
    assert len(held) == 150 and got == sids and max(counts) == 40


def test_only_the_entry_a_consumer_keeps_dying_on_is_dead_lettered_not_the_batch_read_with_it(r, redis_url):
    stream = ResultsStream(r)
    publish(stream, *[f"c{i}" for i in range(6)])
    for attempt in range(3):  # each run reads the whole batch, takes c0 and dies holding it
        it = client(redis_url, max_deliveries=3).results(group="g", consumer="c", block_ms=50)
        assert next(it).result.session_id == "c0"
        it.close()
    got = []
    for item in client(redis_url, max_deliveries=3).results(group="g", consumer="c", block_ms=50, stop_after=0.3):
        got.append((item.result.session_id, item.deliveries))
        item.ack()
    assert got == [(f"c{i}", 1) for i in range(1, 6)]
    assert [d["session_id"] for d in stream.dead_letters()] == ["c0"]


def test_an_entry_the_trainer_holds_is_never_dead_lettered_by_reconnects(r, redis_url):
    """Each reconnect re-reads the consumer's pending entries (XREADGROUP 0 counts a delivery in
    Redis): the one still in the trainer's hands is neither yielded again nor dead-lettered."""
    import threading

    stream = ResultsStream(r)
    publish(stream, "held", "next")
    it = client(redis_url, max_deliveries=2, redis_patience="quick").results(group="g", consumer="c",
                                                                             block_ms=100, stop_after=4)
    held = next(it)
    assert held.result.session_id == "held"
    stop = threading.Event()

    def kill_reader():
        while not stop.wait(0.3):
            for c in r.client_list():
                if c.get("cmd", "").startswith("xreadgroup"):
                    r.client_kill_filter(_id=c["id"])

    killer = threading.Thread(target=kill_reader, daemon=True)
    killer.start()
    rest = []
    for item in it:
        rest.append(item.result.session_id)
        item.ack()
    stop.set()
    killer.join(5)
    held.ack()
    assert rest == ["next"] and stream.dead_letters() == []
    assert r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_a_duplicate_in_the_same_batch_as_its_acked_original_is_skipped(r, redis_url):
    stream = ResultsStream(r)
    publish(stream, "dup")
    r.delete(keys.session_published("dup"))  # a crash between XADD and the marker: published twice
    publish(stream, "dup", "other")
    got = []
    for item in client(redis_url).results(group="g", consumer="c", block_ms=50, count=16, stop_after=0.3):
        got.append(item.result.session_id)
        item.ack()  # acked before the batch's next entry, the duplicate, comes up
    assert got == ["dup", "other"] and r.xpending(keys.RESULTS_STREAM, "g")["pending"] == 0


def test_touch_keeps_ten_thousand_held_entries(r):
    """A consumer restarted holding ~10k unacked entries re-reads them all: every one is kept
    from other consumers' claims (one script could not unpack more than ~8,000 ids)."""
    stream = ResultsStream(r)
    pipe = r.pipeline(transaction=False)
    for i in range(10_000):
        pipe.xadd(keys.RESULTS_STREAM, {"data": b"x", "session_id": f"s{i}"})
    pipe.execute()
    stream.ensure_group("g")
    held = [e.entry_id for e in stream.read("g", "c", pending=False, count=10_000, block_ms=None)]
    assert len(held) == 10_000 and stream.touch("g", "c", held) == 10_000


def test_a_beat_outlives_the_beats_between_it_and_the_next(r):
    """An iterator beats every claim_idle_ms / 3, and every 50 ms at the fastest: a beat set for a
    claim_idle_ms under that lapsed between beats, and other consumers claimed from a live one."""
    stream = ResultsStream(r)
    stream.beat("g", "fast", 10)
    assert r.pttl(keys.results_alive("g", "fast")) > 100

