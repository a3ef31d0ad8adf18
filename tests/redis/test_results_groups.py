"""Consumer groups of the results stream: a group created after the stream was trimmed (what it
missed, reported), and a dead consumer's pending entries (its own restart, another consumer)."""

from __future__ import annotations

import logging

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
