"""``GET /metrics`` of the proxy: Prometheus text (prometheus-client), behind the admin token.

    polar_proxy_calls_total{provider,status}       model calls answered, by provider API and HTTP
                                                   status (a stream that fails after its head: the
                                                   error's status)
    polar_proxy_errors_total{provider,type}        failed model calls by error (BadRequest,
                                                   SessionNotFound, UpstreamTimeout, ...)
    polar_proxy_upstream_latency_seconds           the engine's time per recorded call (histogram)
    polar_proxy_overhead_seconds                   the proxy's own time per recorded call: arrival
                                                   to answer, minus the engine's (histogram)
    polar_proxy_prompt_tokens_total{provider}      prompt token ids recorded
    polar_proxy_completion_tokens_total{provider}  sampled token ids recorded
    polar_proxy_records_written_total{kind}        completion / error records written to Redis
    polar_proxy_calls_in_flight                    this instance's calls between admission and
                                                   release, summed over its live workers
    polar_proxy_paused                             1 while weight sync pauses inference (Redis)
    polar_proxy_leased_calls                       calls of every proxy holding an in-flight lease
                                                   (what a pause drains; Redis)

Several worker processes serve one proxy instance (gunicorn), and a scrape reaches one of them.
prometheus-client's multiprocess mode keeps every worker's values in memory-mapped files in
``PROMETHEUS_MULTIPROC_DIR`` (a fresh folder per instance: ``polar proxy`` creates it, marks dead
workers through gunicorn's ``child_exit`` hook and removes it on exit), so whichever worker is
scraped reports the sum over all of them, and counters keep what exited workers counted.
Without that variable (one process, e.g. tests) the values live in this process.

A model call never waits on a metric: it appends its events to a per-process list (atomic, no
lock, no file, no Redis), which reaches prometheus-client's values when this process is scraped,
and otherwise every ``FLUSH_SECONDS`` from a background greenlet (so a scrape shows other workers'
calls at most that late) or once ``MAX_PENDING`` events wait. The pause state is read from Redis
at scrape time only.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("polar.proxy")

FLUSH_SECONDS = 1.0
MAX_PENDING = 10_000
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A model call lasts from tenths of a second to many minutes; the proxy's share is milliseconds.
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class ProxyMetrics:
    def __init__(self, inflight: Callable[[], int], control_state: Callable[[], dict[str, Any]]) -> None:
        self._inflight = inflight
        self._multiprocess = multiprocess_dir() is not None
        # Multiprocess: values go to this process's files, the scrape reads every worker's files.
        # One process: this instance's own registry (several apps in one process stay apart).
        self._registry = None if self._multiprocess else CollectorRegistry(auto_describe=False)
        reg = self._registry
        self.calls = Counter("polar_proxy_calls", "Model calls answered, by provider API and HTTP status",
                             ["provider", "status"], registry=reg)
        self.errors = Counter("polar_proxy_errors", "Failed model calls by error type", ["provider", "type"],
                              registry=reg)
        self.upstream = Histogram("polar_proxy_upstream_latency_seconds", "The engine's time per recorded call",
                                  buckets=UPSTREAM_BUCKETS, registry=reg)
        self.overhead = Histogram("polar_proxy_overhead_seconds",
                                  "The proxy's own time per recorded call (arrival to answer, minus the engine's)",
                                  buckets=OVERHEAD_BUCKETS, registry=reg)
        self.prompt_tokens = Counter("polar_proxy_prompt_tokens", "Prompt token ids recorded", ["provider"],
                                     registry=reg)
        self.completion_tokens = Counter("polar_proxy_completion_tokens", "Sampled token ids recorded",
                                         ["provider"], registry=reg)
        self.records = Counter("polar_proxy_records_written", "Records written to Redis", ["kind"], registry=reg)
        self.in_flight = Gauge("polar_proxy_calls_in_flight", "Calls between admission and release",
                               multiprocess_mode="livesum", registry=reg)
        self._control = _ControlCollector(control_state)
        if reg is not None:
            reg.register(self._control)
        # Events since the last flush: (counter, labels, amount) or (histogram, None, value).
        # list.append and the flush's slice deletion are atomic, under gevent and threads alike.
        self._events: list[tuple[Any, tuple[Any, ...] | None, float]] = []
        self._lock = threading.Lock()  # one flush at a time; the hot path takes no lock
        self._flusher_pid: int | None = None

    # --- the hot path: appended events -----------------------------------------------------------

    def answered(self, provider: str, status: int) -> None:
        self._events.append((self.calls, (provider, status), 1))
        if self._flusher_pid != os.getpid():
            self._start_flushing()
        elif len(self._events) > MAX_PENDING:
            self.flush()

    def failed(self, provider: str, error_type: str) -> None:
        self._events.append((self.errors, (provider, error_type), 1))

    def recorded(self, provider: str, prompt_tokens: int, completion_tokens: int, upstream_seconds: float,
                 overhead_seconds: float) -> None:
        self._events += ((self.prompt_tokens, (provider,), prompt_tokens),
                         (self.completion_tokens, (provider,), completion_tokens),
                         (self.upstream, None, upstream_seconds), (self.overhead, None, overhead_seconds))

    def written(self, kind: str) -> None:
        self._events.append((self.records, (kind,), 1))

    # --- into prometheus-client, and out ---------------------------------------------------------

    def flush(self) -> None:
        with self._lock:
            events = self._events[:]
            del self._events[:len(events)]  # events appended meanwhile stay for the next flush
            totals: defaultdict[tuple[Any, tuple[Any, ...]], float] = defaultdict(float)
            observed: defaultdict[Any, list[float]] = defaultdict(list)
            for metric, labels, amount in events:
                if labels is None:
                    observed[metric].append(amount)
                else:
                    totals[(metric, labels)] += amount
            for (metric, labels), amount in totals.items():
                metric.labels(*labels).inc(amount)
            for histogram, values in observed.items():
                _observe_all(histogram, values)
            self.in_flight.set(self._inflight())

    def render(self) -> bytes | None:
        self.flush()
        if self._registry is not None:
            return generate_latest(self._registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry(auto_describe=False)
        multiprocess.MultiProcessCollector(registry)
        registry.register(self._control)
        return generate_latest(registry)

    def _start_flushing(self) -> None:
        """Multiprocess mode: one flushing greenlet (a thread under gevent) per worker process,
        started by the process's first call (pid-checked: gunicorn may fork after an app exists)."""
        with self._lock:
            if self._flusher_pid == os.getpid():
                return
            self._flusher_pid = os.getpid()
        if self._multiprocess:
            threading.Thread(target=self._flush_forever, name="polar-metrics", daemon=True).start()
            atexit.register(self.flush)  # a worker's last events, when it exits cleanly

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            try:
                self.flush()
            except Exception as exc:  # a full disk, say: keep serving calls, report it
                log.warning("flushing proxy metrics failed: %s", exc)


def _observe_all(histogram: Histogram, values: list[float]) -> None:
    """``histogram.observe`` of each value, with one write per bucket and one for the sum (in
    multiprocess mode every write is a locked write to a memory-mapped file; a flush holds a
    second's calls). Through prometheus-client's own per-bucket values, as ``observe`` writes
    them; where a release keeps them otherwise, value by value."""
    bounds, buckets, total = (getattr(histogram, name, None) for name in ("_upper_bounds", "_buckets", "_sum"))
    if not bounds or buckets is None or total is None or len(buckets) != len(bounds):
        for value in values:
            histogram.observe(value)
        return
    counts: defaultdict[int, int] = defaultdict(int)
    for value in values:
        counts[bisect_left(bounds, value)] += 1  # the first bucket whose bound is >= value
    total.inc(sum(values))
    for index, count in counts.items():
        buckets[index].inc(count)


class _ControlCollector(Collector):
    """Pause state and the proxy-wide leases, read from Redis when scraped."""

    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        yield GaugeMetricFamily("polar_proxy_paused", "1 while weight sync pauses inference",
                                value=1.0 if state["paused"] else 0.0)
        yield GaugeMetricFamily("polar_proxy_leased_calls", "Calls of every proxy holding an in-flight lease",
                                value=float(state["inflight"]))


class NoMetrics:
    """``POLAR_PROXY_METRICS=false``: nothing tallied, no ``/metrics``."""

    def answered(self, provider: str, status: int) -> None:
        return None

    def failed(self, provider: str, error_type: str) -> None:
        return None

    def recorded(self, provider: str, prompt_tokens: int, completion_tokens: int, upstream_seconds: float,
                 overhead_seconds: float) -> None:
        return None

    def written(self, kind: str) -> None:
        return None

    def render(self) -> bytes | None:
        return None
