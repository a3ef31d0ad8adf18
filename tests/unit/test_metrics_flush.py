"""The proxy's metrics flush (proxy/metrics.py): a second's histogram observations written
bucket by bucket give exactly the samples prometheus-client's own ``observe`` gives, value by
value, on bucket bounds too."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from proxy.metrics import OVERHEAD_BUCKETS, _observe_all

VALUES = st.lists(st.sampled_from(OVERHEAD_BUCKETS) | st.floats(0, 5, allow_nan=False) | st.floats(-1, 0), max_size=60)


def samples(histogram: Histogram) -> list[tuple[str, list, float]]:
    return sorted(((s.name, sorted(s.labels.items()), s.value) for m in histogram.collect() for s in m.samples
                   if not s.name.endswith("_created")), key=lambda x: (x[0], x[1]))


@given(VALUES)
def test_aggregated_observations_equal_one_by_one(values):
    one, many = (Histogram("h", "h", buckets=OVERHEAD_BUCKETS, registry=CollectorRegistry()) for _ in range(2))
    for v in values:
        one.observe(v)
    _observe_all(many, values)
    got, want = samples(many), samples(one)
    assert [(n, lb) for n, lb, _ in got] == [(n, lb) for n, lb, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b))  # the sum: added in another order
