"""A flood of connections that send nothing (issue 13's stranger with network access): an agent
on the worker's network that reopens connections faster than the head deadline closes them
filled the proxy's and the API's gevent workers (gunicorn stops accepting at
``worker_connections``), and every session's model call waited in the kernel's backlog. Now the
connection waiting longest for a request gives way (``infra/shedding.py``)."""

from __future__ import annotations

import select
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from infra.serve import PROFILES
from infra.shedding import RESERVE_SHARE
from infra.stack import Stack, StackConfig
from pipeline.settings import Settings


@pytest.fixture(scope="module")
def flood_stack(tmp_path_factory):
    # A head deadline far longer than the test's patience: before, a request behind the flood
    # waited for the first flooding connection to reach it.
    settings = Settings(home=tmp_path_factory.mktemp("flood-home"), http_head_seconds=120, http_idle_seconds=300)
    with Stack(StackConfig(settings=settings, upstream="fake", components=("api", "proxy"), proxy_workers=1,
                           supervise=False)) as stack:
        yield stack


@pytest.mark.parametrize("service", ["api", "proxy"])
def test_connections_that_send_nothing_give_way_to_requests(flood_stack, service):
    url = {"api": flood_stack.settings.api_url, "proxy": flood_stack.settings.proxy_url}[service]
    parts = urlsplit(url)
    capacity = PROFILES[service]["worker_connections"]  # one worker each here
    flood: list[socket.socket] = []
    try:
        for _ in range(capacity + 100):  # every slot, and more waiting in the backlog
            sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
            sock.setblocking(False)
            flood.append(sock)
        with httpx.Client(timeout=15) as client:
            for _ in range(20):  # each a new connection: each must be taken in, flood or not
                answer = client.get(f"{url}/health", headers={"Connection": "close"})
                assert answer.status_code == 200, answer.text
        # The room was made by closing flooding connections -- the ones that waited longest.
        poller = select.poll()
        for sock in flood:
            poller.register(sock, select.POLLIN)
        time.sleep(0.5)
        by_fd = {s.fileno(): s for s in flood}
        closed = [by_fd[fd] for fd, _ in poller.poll(5000) if _at_eof(by_fd[fd])]
        # Only as many as make room: the flood's excess and the reserve, give or take the 20
        # requests (a burst of accepted connections each closed one more: up to 850 of 2,100).
        excess, reserve = len(flood) - capacity, capacity // RESERVE_SHARE
        assert excess <= len(closed) <= excess + reserve + 20, f"{len(closed)} of {len(flood)} closed"
        # Oldest first: the closed ones are the flood's first, give or take the connections the
        # server took in at once (its accept order within one burst is the scheduler's).
        order = {id(s): i for i, s in enumerate(flood)}
        newest_closed = max(order[id(s)] for s in closed)
        assert newest_closed < len(closed) + reserve, \
            f"a newer connection ({newest_closed}) was closed before an older one ({len(closed)} closed)"
    finally:
        for sock in flood:
            sock.close()
    # The flood gone, the server is as it was.
    time.sleep(0.5)
    assert httpx.get(f"{url}/health", timeout=15).status_code == 200


def _at_eof(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
