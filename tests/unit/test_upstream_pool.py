"""Session affinity over several engine endpoints (rendezvous hashing)."""

from collections import Counter

from proxy.upstream import UpstreamPool

URLS = [f"http://10.0.0.{i}:8000" for i in range(4)]


def test_affinity_is_stable_and_spread():
    pool = UpstreamPool(",".join(URLS), 10)
    sessions = [f"sk-polar-{i}" for i in range(2000)]
    first = {s: pool.order(s)[0] for s in sessions}
    assert first == {s: UpstreamPool(URLS, 10).order(s)[0] for s in sessions}  # stable across processes
    counts = Counter(first.values())
    assert set(counts) == set(URLS) and min(counts.values()) > 350  # roughly even


def test_removing_an_endpoint_moves_only_its_sessions():
    pool = UpstreamPool(URLS, 10)
    smaller = UpstreamPool(URLS[:-1], 10)
    for s in (f"sk-polar-{i}" for i in range(2000)):
        before, after = pool.order(s)[0], smaller.order(s)[0]
        assert before == after or before == URLS[-1]
        assert pool.order(s)[1:] == [u for u in pool.order(s) if u != pool.order(s)[0]]  # failover order
