"""Ports for a stack's services: one stack's are never the same port twice (each released
before the next was asked for, the kernel could hand one out again: the proxy then failed to
bind while the fake engine on its port answered the proxy's health checks)."""

from __future__ import annotations

import socket

from infra.embedded_redis import free_ports


def test_ports_asked_for_together_are_distinct_and_free():
    ports = free_ports(300)
    assert len(set(ports)) == 300
    for port in ports[:20]:  # released: a service can bind each
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
