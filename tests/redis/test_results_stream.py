"""Results stream: published once per session, delivered at least once, de-duplicated."""

import threading
import time

from pipeline import keys
from pipeline.client import RolloutClient
from pipeline.schemas import SessionResult, TokenLogprob, Trace, Trajectory
from pipeline.status import SessionStatus
from pipeline.stores.results_stream import ResultsStream


def result(sid, reward=1.0):
    trace = Trace(prompt_ids=[1, 2], response_ids=[3], loss_mask=[1.0],
                  response_logprobs=[TokenLogprob(token_id=3, logprob=-0.5)], reward=reward)
    return SessionResult(session_id=sid, task_id="t", status=SessionStatus.COMPLETED, reward=reward,
                         trajectory=Trajectory(traces=[trace]))


def test_publish_once_under_concurrent_redelivery(r):
    stream = ResultsStream(r)
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(stream.publish_once(result("s1")))) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.xlen(keys.RESULTS_STREAM) == 1
    assert stream.publish_once(result("s1")) == stream.published_id("s1")


def test_blob_is_msgpack_with_schema_and_blob_versions(r):
    import msgpack
    import numpy as np

    ResultsStream(r).publish_once(result("s1"))
    [(_, fields)] = r.xrange(keys.RESULTS_STREAM)
    assert fields[b"schema_version"] == b"1" and fields[b"blob_version"] == b"3"
    blob = msgpack.unpackb(fields[b"data"])  # any msgpack reader can take it apart
    assert blob["schema_version"] == 1 and blob["blob_version"] == 3 and blob["session_id"] == "s1"
    ref = blob["trajectory"]["traces"][0]["response_ids"]
    assert ref["dtype"] == "<u2" and ref["count"] == 1  # compact: every id of this blob fits 2 bytes
    assert np.frombuffer(blob["arrays"], "<u2", ref["count"], ref["offset"]).tolist() == [3]
    # the aligned layout publishes version 2
    ResultsStream(r, layout="aligned").publish_once(result("s2"))
    [_, (_, fields)] = r.xrange(keys.RESULTS_STREAM)
    assert fields[b"blob_version"] == b"2" and msgpack.unpackb(fields[b"data"])["blob_version"] == 2


def test_a_version_1_entry_left_in_the_stream_is_still_delivered(r, redis_url):
    """Entries published before the upgrade (the pydantic dump, msgpack-packed) stay readable."""
    from pipeline.codec import pack

    old = result("old")
    r.xadd(keys.RESULTS_STREAM, {"data": pack(old), "session_id": "old", "task_id": "t", "schema_version": "1"})
    ResultsStream(r).publish_once(result("new"))
    items = list(RolloutClient("http://unused", redis_url=redis_url).results(
        group="g", consumer="c", block_ms=100, stop_after=0.3))
    assert [i.result.session_id for i in items] == ["old", "new"]
    assert items[0].result == old and items[1].result == result("new")
    for item in items:
        [trace] = item.arrays.traces
        assert trace.response_ids.tolist() == [3] and trace.response_logprobs.tolist() == [-0.5]
        assert trace.loss_mask.tolist() == [1] and item.arrays.reward == 1.0


def test_consumer_group_redelivers_unacked_and_dedupes(r, redis_url):
    stream = ResultsStream(r)
    for i in range(3):
        stream.publish_once(result(f"s{i}"))
    # A crash between XADD and the marker: the same session appears twice in the stream.
    r.delete(keys.session_published("s1"))
    stream.publish_once(result("s1"))
    client = RolloutClient("http://unused", redis_url=redis_url)

    first = []
    for item in client.results(group="g", consumer="c1", block_ms=100, stop_after=0.3):
        first.append(item)
        if len(first) == 2:
            break
    first[0].ack()  # the second is "lost" with the consumer

    again = [i.result.session_id for i in client.results(group="g", consumer="c1", block_ms=100, stop_after=0.3)]
    # The unacked entry comes back first, then the rest; the duplicate of s1 is skipped.
    assert again == [first[1].result.session_id] + [s for s in ("s0", "s1", "s2")
                                                     if s not in {x.result.session_id for x in first}]
    assert len(set(again)) == len(again)
    assert client.lag("g") == 0 and client.lag("nobody") is None


def test_a_consumer_rides_out_a_redis_restart_and_loses_nothing(tmp_path):
    """kill -9 the (persistent) Redis under a reading trainer: the iterator reconnects and
    yields what was published before and after, each once."""
    import redis as redis_lib

    from infra.embedded_redis import EmbeddedRedis
    from tests.support import wait_for

    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    try:
        stream = ResultsStream(redis_lib.Redis.from_url(server.url))
        stream.publish_once(result("before"))
        got: list[str] = []

        def consume():
            for item in RolloutClient("http://unused", redis_url=server.url).results(
                    group="trainer", consumer="rank0", block_ms=200, stop_after=60):
                got.append(item.result.session_id)
                item.ack()
                if len(got) == 2:
                    return

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        wait_for(lambda: got == ["before"], timeout=10)
        server.kill()
        server.start()  # the same port, from its append-only file
        ResultsStream(redis_lib.Redis.from_url(server.url)).publish_once(result("after"))
        reader.join(timeout=60)
        assert got == ["before", "after"]
    finally:
        server.stop()


def test_entries_held_across_a_reconnect_are_not_yielded_again(tmp_path):
    """A trainer holds its deliveries unacked (batching) while Redis goes away for longer than one
    command retries: the iterator re-reads its pending entries on reconnecting and must not hand
    the ones it still holds out a second time."""
    import redis as redis_lib

    from infra.embedded_redis import EmbeddedRedis

    server = EmbeddedRedis(data_dir=tmp_path / "redis").start()
    try:
        stream = ResultsStream(redis_lib.Redis.from_url(server.url))
        for i in range(4):
            stream.publish_once(result(f"s{i}"))
        client = RolloutClient("http://unused", redis_url=server.url, redis_patience="quick")
        it = client.results(group="g", consumer="c", block_ms=200, stop_after=3)
        held = [next(it) for _ in range(4)]
        server.stop()  # an orderly stop keeps the group's pending list on disk
        rest: list = []
        reader = threading.Thread(target=lambda: rest.extend(it), daemon=True)
        reader.start()  # its reads fail (no retries at this patience): it backs off and reconnects
        time.sleep(1.5)
        server.start()
        ResultsStream(redis_lib.Redis.from_url(server.url)).publish_once(result("s4"))
        reader.join(timeout=30)
        assert [d.result.session_id for d in rest] == ["s4"]
        for d in held + rest:
            d.ack()
        assert not redis_lib.Redis.from_url(server.url).xpending(keys.RESULTS_STREAM, "g")["pending"]
    finally:
        server.stop()


def test_a_dead_consumers_entries_are_claimed_past_the_ones_a_live_one_holds(r):
    # the live consumer's own pending entries are older and many: more than one XPENDING page
    stream = ResultsStream(r)
    stream.ensure_group("g")
    for i in range(150):
        stream.publish_once(result(f"held{i}"))
    assert len(stream.read("g", "live", pending=False, count=150, block_ms=None)) == 150
    for i in range(5):
        stream.publish_once(result(f"orphan{i}"))
    assert len(stream.read("g", "dead", pending=False, count=5, block_ms=None)) == 5
    time.sleep(0.05)
    claimed = stream.claim_stale("g", "live", min_idle_ms=20)
    assert sorted(e.session_id for e in claimed) == [f"orphan{i}" for i in range(5)]
    assert len(stream.claim_stale("g", "third", min_idle_ms=0, count=7)) == 7  # bounded by count


def test_a_live_consumer_keeps_what_it_holds_past_the_claim_idle_time(r, redis_url):
    """A trainer holding a delivery through a step longer than claim_idle_ms is alive: another
    consumer must not claim it (it would be trained on twice); once the holder's iterator is
    gone, it is claimed."""
    ResultsStream(r).publish_once(result("s1"))
    holder = RolloutClient("http://unused", redis_url=redis_url).results(group="g", consumer="a", block_ms=50,
                                                                         claim_idle_ms=300)
    taken = next(holder)
    other: list[str] = []

    def consume(stop_after: float) -> None:
        for d in RolloutClient("http://unused", redis_url=redis_url).results(
                group="g", consumer="b", block_ms=50, claim_idle_ms=300, stop_after=stop_after):
            other.append(d.result.session_id)
            d.ack()

    consume(stop_after=1.5)  # five claim intervals while "a" holds s1 without acking
    assert other == [] and taken.result.session_id == "s1"
    holder.close()  # "a" is gone without acking
    consume(stop_after=1.5)
    assert other == ["s1"]
