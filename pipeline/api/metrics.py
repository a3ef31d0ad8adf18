"""``GET /metrics`` of the rollout API: Prometheus text, read from Redis at scrape time (a
collector, not counters in this process: every API replica reports the same pipeline-wide
figures, and no worker has to serve HTTP). Behind the API's bearer token like every route.

    polar_stage_queue_depth{stage}        messages waiting in a stage's queue
    polar_stage_in_flight{stage}          sessions a worker is running that stage for (held leases)
    polar_ready_depth / _reserved / _capacity   the READY buffer
    polar_tasks{state}                    recent tasks (the last 1,000) by state
    polar_results_stream_length           entries in the results stream (and _maxlen)
    polar_results_group_pending{group}    delivered, not yet acknowledged, per consumer group
    polar_results_group_lag{group}        published, not yet delivered, per consumer group
    polar_results_dead_letters            entries moved to the dead-letter stream
    polar_results_trims_held_back         trims held back because a group still needed entries
    polar_stage_runs_total{stage,result}  stage runs by how they ended: done, skipped, duplicate,
                                          already-done, missing, failed, lease-lost (counter)
    polar_stage_duration_seconds{stage}   how long stage runs took (histogram: _bucket{le}, _sum, _count)
    polar_sessions_finished_total{status} sessions published, by terminal status (counter)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector


class PipelineCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        yield _labelled("polar_stage_queue_depth", "Messages waiting in the stage's queue", "stage", snap["queue_depth"])
        yield _labelled("polar_stage_in_flight", "Sessions a worker runs this stage for", "stage", snap["in_flight"])
        for name in ("depth", "reserved", "capacity"):
            yield GaugeMetricFamily(f"polar_ready_{name}", f"READY buffer {name}", value=snap["ready"][name])
        yield _labelled("polar_tasks", "Recent tasks by state", "state", snap["tasks"])
        results = snap["results"]
        yield GaugeMetricFamily("polar_results_stream_length", "Entries in the results stream", value=results["length"])
        yield GaugeMetricFamily("polar_results_stream_maxlen", "The stream's cap", value=results["maxlen"] or 0)
        yield GaugeMetricFamily("polar_results_dead_letters", "Entries in the dead-letter stream",
                                value=results["dead_letters"])
        yield GaugeMetricFamily("polar_results_trims_held_back", "Trims held back for a group's unread entries",
                                value=results["trims_held_back"])
        groups = results["groups"]
        yield _labelled("polar_results_group_pending", "Delivered, not yet acknowledged", "group",
                        {g: v["pending"] for g, v in groups.items()})
        yield _labelled("polar_results_group_lag", "Published, not yet delivered", "group",
                        {g: v["lag"] for g, v in groups.items() if v["lag"] is not None})
        runs = CounterMetricFamily("polar_stage_runs", "Stage runs by how they ended", labels=["stage", "result"])
        for stage, by_result in sorted(snap["runs"].items()):
            for result, n in sorted(by_result.items()):
                runs.add_metric([stage, result], n)
        yield runs
        durations = HistogramMetricFamily("polar_stage_duration_seconds", "How long stage runs took",
                                          labels=["stage"])
        for stage, h in sorted(snap["durations"].items()):
            durations.add_metric([stage], buckets=[(le, float(n)) for le, n in h["buckets"]], sum_value=h["sum"])
        yield durations
        finished = CounterMetricFamily("polar_sessions_finished", "Sessions published, by terminal status",
                                       labels=["status"])
        for status, n in sorted(snap["sessions"].items()):
            finished.add_metric([status], n)
        yield finished


def _labelled(name: str, doc: str, label: str, values: dict[str, Any]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], float(value))
    return family


def render(snapshot: Callable[[], dict[str, Any]]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(snapshot))
    return generate_latest(registry)
