"""Redis clients, one pool per process (forked workers must not share a parent's sockets)."""

from __future__ import annotations

import os
import threading

import redis

from pipeline.settings import Settings

MAX_CONNECTIONS = 256
_lock = threading.Lock()
_clients: dict[tuple[int, str], redis.Redis] = {}


def connect(settings: Settings | str) -> redis.Redis:
    url = settings if isinstance(settings, str) else settings.require_redis()
    key = (os.getpid(), url)
    with _lock:
        client = _clients.get(key)
        if client is None:
            # A blocking pool: under gevent a proxy process runs hundreds of concurrent calls;
            # they queue for a connection instead of failing with "Too many connections".
            # socket_timeout stays above any BLOCK we issue (results consumer blocks <= 30 s).
            pool = redis.BlockingConnectionPool.from_url(
                url, max_connections=MAX_CONNECTIONS, timeout=30, socket_timeout=60,
                socket_connect_timeout=10, health_check_interval=30)
            client = redis.Redis(connection_pool=pool)
            _clients[key] = client
        return client
