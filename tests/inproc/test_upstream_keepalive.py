"""The proxy's HTTP/1.1 client to the engine (proxy/upstream/keepalive.py) against a scripted
server on a real socket: the answer shapes engines and gateways send, connection reuse, a
server that closed an idle connection, and every failure mapped to the error the pool acts on."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from infra.embedded_redis import free_port
from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.upstream import UpstreamPool, keepalive
from proxy.upstream.keepalive import KeepAliveTransport
from proxy.upstream.transport import Unreachable
from tests.support_http import Scripted


@pytest.fixture
def server(request):
    made = []

    def make(*answers):
        s = Scripted(list(answers))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body


def test_content_length_answers_reuse_one_connection(server):
    s = server(ok(b'{"a":1}'), ok(b'{"b":2}'))
    t = KeepAliveTransport([s.url], 5)
    assert t.request(s.url, "POST", "/v1/chat/completions", b'{"x":1}') == (200, b'{"a":1}')
    assert t.request(s.url, "GET", "/v1/models", None) == (200, b'{"b":2}')
    assert s.connections == 1
    first, second = s.requests
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and first.endswith(b'\r\n\r\n{"x":1}')
    assert b"Content-Length: 7\r\n" in first and b"Content-Type: application/json" in first
    assert second.startswith(b"GET /v1/models HTTP/1.1\r\n") and b"Content-Length" not in second


def test_chunked_answers_interim_answers_and_a_path_prefix(server):
    chunked = (b"HTTP/1.1 100 Continue\r\n\r\n"
               b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n")
    s = server(chunked, ok(b"{}"))
    t = KeepAliveTransport([s.url + "/engine/"], 5)
    assert t.request(s.url + "/engine/", "POST", "/v1/x", b"{}") == (201, b'{"a":1}')
    assert t.request(s.url + "/engine/", "POST", "/v1/y", b"{}") == (200, b"{}")  # same connection, in step
    assert s.connections == 1 and s.requests[0].startswith(b"POST /engine/v1/x ")


def test_a_body_up_to_the_close_and_connection_close_are_not_reused(server):
    def until_close(conn, _):
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 300_000)
        return "close"

    s = server(until_close, ok(b"{}", "Connection: close"), ok(b"{}"))
    t = KeepAliveTransport([s.url], 5)
    assert t.request(s.url, "POST", "/a", b"{}") == (200, b"x" * 300_000)
    assert t.request(s.url, "POST", "/b", b"{}") == (200, b"{}")
    assert t.request(s.url, "POST", "/c", b"{}") == (200, b"{}")
    assert s.connections == 3


def test_a_connection_the_server_closed_while_idle_is_replaced(server):
    def answer_then_close(conn, _):
        conn.sendall(ok(b"{}"))  # keep-alive promised, then the server drops it (an idle timeout)
        time.sleep(0.05)
        return "close"

    s = server(answer_then_close, ok(b'{"fresh":1}'))
    t = KeepAliveTransport([s.url], 5)
    assert t.request(s.url, "POST", "/a", b"{}")[0] == 200
    time.sleep(0.2)
    assert t.request(s.url, "POST", "/b", b"{}") == (200, b'{"fresh":1}')
    assert s.connections == 2


def test_a_connection_idle_too_long_is_not_reused(server, monkeypatch):
    s = server(ok(b"{}"), ok(b"{}"))
    t = KeepAliveTransport([s.url], 5)
    t.request(s.url, "POST", "/a", b"{}")
    monkeypatch.setattr(keepalive, "IDLE_SECONDS", 0.0)
    t.request(s.url, "POST", "/b", b"{}")
    assert s.connections == 2


def test_failures_map_to_what_the_pool_acts_on(server):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{free.getsockname()[1]}"
    free.close()
    with pytest.raises(Unreachable):  # nothing was sent: the pool may try the next endpoint
        KeepAliveTransport([dead], 5).request(dead, "POST", "/a", b"{}")

    def hang(conn, _):
        time.sleep(1.0)

    def half(conn, _):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"trunc")
        return "close"

    s = server(hang, half, b"SMTP ready\r\n\r\n", ok(b"{}"))
    t = KeepAliveTransport([s.url], 0.3)
    with pytest.raises(UpstreamTimeout):
        t.request(s.url, "POST", "/slow", b"{}")
    with pytest.raises(UpstreamError, match="closed the connection mid-answer"):
        t.request(s.url, "POST", "/half", b"{}")
    with pytest.raises(UpstreamError, match="not an HTTP answer"):
        t.request(s.url, "POST", "/garbage", b"{}")
    assert t.request(s.url, "POST", "/ok", b"{}") == (200, b"{}")  # a broken connection is never reused
    assert s.connections == 4


def test_reachable_probes_the_port(server):
    s = server()
    t = KeepAliveTransport([s.url], 5)
    assert t.reachable(s.url)
    s.close()
    assert not t.reachable(s.url)


def test_the_pool_waits_for_an_engine_that_comes_back():
    """An engine restarting refuses connections for a while: nothing was sent, so the call waits
    for it (with back-off, up to the pool's wait) instead of a 502 some CLIs give up on."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    got: list[bytes] = []

    def engine_back_later() -> None:
        time.sleep(0.8)
        with socket.create_server(("127.0.0.1", port)) as srv:
            conn, _ = srv.accept()
            with conn:
                data = b""
                while not data.endswith(b'{"x":1}') and (piece := conn.recv(65536)):
                    data += piece
                got.append(data)
                conn.sendall(ok(b'{"answer": 1}', "Connection: close"))

    back = threading.Thread(target=engine_back_later, daemon=True)
    back.start()
    answer, base = UpstreamPool(url, 5, wait_seconds=30).post_json("/v1/chat/completions", {"x": 1})
    back.join(5)
    assert answer == {"answer": 1} and base == url and len(got) == 1  # sent once, once it could be


def test_the_pool_gives_up_after_its_wait_and_says_so():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(UpstreamError, match=r"cannot reach any inference server .*waited 0.6s"):
        UpstreamPool(url, 5, wait_seconds=0.6).post_json("/v1/chat/completions", {"x": 1})
    assert time.monotonic() - started < 10  # (bounded: not a timing assertion on the wait itself)
