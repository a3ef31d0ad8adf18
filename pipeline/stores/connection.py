"""Redis clients, one pool per process (forked workers must not share a parent's sockets).

Commands ride out a Redis restart: a connection error or timeout is retried with exponential
back-off (``patient``: for about three minutes, what workers and the proxy want; otherwise about
ten seconds, after which the API answers 503 and the caller retries). A ``quick`` client (no
retries, short timeouts) answers health checks.
"""

from __future__ import annotations

import os
import threading

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError
from redis.retry import Retry

from pipeline.settings import Settings

MAX_CONNECTIONS = 256
_lock = threading.Lock()
_clients: dict[tuple[int, str, str], redis.Redis] = {}
_RETRIES = {"patient": (40, 5.0), "impatient": (10, 1.0), "quick": (0, 0.0)}


def connect(settings: Settings | str, *, mode: str = "patient") -> redis.Redis:
    url = settings if isinstance(settings, str) else settings.require_redis()
    key = (os.getpid(), url, mode)
    with _lock:
        client = _clients.get(key)
        if client is None:
            retries, cap = _RETRIES[mode]
            # A blocking pool: under gevent a proxy process runs hundreds of concurrent calls;
            # they queue for a connection instead of failing with "Too many connections".
            # socket_timeout stays above any BLOCK we issue (results consumer blocks <= 30 s).
            pool = redis.BlockingConnectionPool.from_url(
                url, max_connections=MAX_CONNECTIONS, timeout=30,
                socket_timeout=2 if mode == "quick" else 60, socket_connect_timeout=1 if mode == "quick" else 10,
                health_check_interval=30, retry=Retry(ExponentialBackoff(cap=cap, base=0.1), retries),
                retry_on_error=[ConnectionError, TimeoutError])
            client = redis.Redis(connection_pool=pool)
            _clients[key] = client
        return client
