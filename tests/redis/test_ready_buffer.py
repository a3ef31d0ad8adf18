"""The READY buffer is bounded, frees dead holders' slots, and hands each runtime out once."""

import threading

from pipeline.stores.ready import ReadyBuffer
from tests.support import wait_for


def test_capacity_bounds_reservations(r):
    buf = ReadyBuffer(r, capacity=2)
    assert buf.reserve("a", 60) and buf.reserve("b", 60)
    assert not buf.reserve("c", 60)
    assert buf.reserve("a", 60)  # re-reserving your own slot is fine
    buf.release("a")
    assert buf.reserve("c", 60)
    assert buf.reserved() == 2


def test_expired_slots_free_themselves(r):
    buf = ReadyBuffer(r, capacity=1)
    assert buf.reserve("dead-worker", 0.3)
    assert not buf.reserve("b", 60)
    wait_for(lambda: buf.reserve("b", 60), timeout=5, interval=0.05)  # once the dead slot expires


def test_push_claim_exactly_once(r):
    buf = ReadyBuffer(r, capacity=4)
    buf.reserve("s1", 60)
    buf.push("s1", 60)
    assert buf.snapshot() == {"depth": 1, "reserved": 1, "capacity": 4}
    winners = []

    def claim():
        if buf.claim("s1"):
            winners.append(1)

    threads = [threading.Thread(target=claim) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert winners == [1]
    assert buf.snapshot() == {"depth": 0, "reserved": 0, "capacity": 4}
    assert not buf.claim("s1")
