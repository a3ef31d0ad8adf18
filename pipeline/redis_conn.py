"""Redis clients, one pool per process (forked workers must not share a parent's sockets)."""

from __future__ import annotations

import os
import threading

import redis

from pipeline.settings import Settings

_lock = threading.Lock()
_clients: dict[tuple[int, str], redis.Redis] = {}


def connect(settings: Settings | str) -> redis.Redis:
    url = settings if isinstance(settings, str) else settings.require_redis()
    key = (os.getpid(), url)
    with _lock:
        client = _clients.get(key)
        if client is None:
            # socket_timeout stays above any BLOCK we issue (results consumer blocks <= 30 s).
            client = redis.Redis.from_url(
                url, socket_timeout=60, socket_connect_timeout=10, health_check_interval=30
            )
            _clients[key] = client
        return client
