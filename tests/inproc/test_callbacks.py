"""The callback outbox against a real HTTP receiver: retried with back-off until acknowledged,
refused targets never contacted, one idempotency key and a verifiable signature on every
attempt, and a delivery whose worker died mid-POST picked up again by the reaper."""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from hashlib import sha256

import pytest

from pipeline.schemas import TaskRequest
from pipeline.settings import Settings
from tests.support import wait_for
from tests.support_http import Receiver
from workers.stages import callback, reaper
from workers.stages.common import make_deps

SECRET = "s3cret-signing-key"


@pytest.fixture
def d(r, redis_url, tmp_path):
    return make_deps(Settings(home=tmp_path, redis_url=redis_url, callback_secret=SECRET, callback_attempts=3,
                              api_url="http://127.0.0.1:1", proxy_url="http://127.0.0.1:2"))


@pytest.fixture
def receiver():
    rec = Receiver()
    yield rec
    rec.close()


def finished_task(d, url: str, task_id: str = "t-cb") -> str:
    d.stores.tasks.create(TaskRequest.model_validate({"task_id": task_id, "instruction": "x", "callback_url": url,
                                                      "agent": {"custom_shell": "true"}}))
    assert d.stores.callbacks.enqueue(task_id, url)
    assert not d.stores.callbacks.enqueue(task_id, url)  # once
    return task_id


def test_retried_until_acknowledged_with_one_key_and_a_valid_signature(d, receiver):
    receiver.script = [503, 503]
    tid = finished_task(d, receiver.url)
    for _ in range(2):
        with pytest.raises(callback.DeliveryFailed):
            callback.deliver(d, tid)
        rec = d.stores.callbacks.record(tid)
        assert rec["state"] == "pending" and rec["status_code"] == 503  # visible while retrying
    record = callback.deliver(d, tid)
    assert record["delivered"] and record["attempts"] == 3 and record["state"] == "delivered"
    assert callback.deliver(d, tid)["attempts"] == 3  # a redelivered task POSTs nothing more
    assert len(receiver.posts) == 3 and len(receiver.delivered_once()) == 1
    for headers, body in receiver.posts:
        assert headers["idempotency-key"] == f"{tid}:task-result"
        want = "sha256=" + hmac.new(SECRET.encode(), headers["x-polar-timestamp"].encode() + b"." + body,
                                    sha256).hexdigest()
        assert hmac.compare_digest(headers["x-polar-signature"], want)
        assert json.loads(body)["task_id"] == tid


def test_the_budget_ends_as_failed_and_a_refusal_is_final(d, receiver):
    receiver.script = [500, 500, 500]
    tid = finished_task(d, receiver.url, "t-budget")
    for _ in range(2):
        with pytest.raises(callback.DeliveryFailed):
            callback.deliver(d, tid)
    assert callback.deliver(d, tid)["state"] == "failed"  # 3 attempts: the budget
    receiver.script = [400]
    tid = finished_task(d, receiver.url, "t-refused")
    assert callback.deliver(d, tid)["state"] == "refused"  # a 4xx: retrying will not help
    assert d.stores.callbacks.due(late_by_seconds=-3600) == []  # nothing left to send


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/admin/pause", "http://localhost:2/admin/pause",
                                 "http://2130706433:1/admin/pause", "http://[::ffff:127.0.0.1]:2/admin/pause"])
def test_a_callback_at_the_services_own_endpoints_is_never_sent(d, receiver, url):
    tid = finished_task(d, url, "t-own")
    record = callback.deliver(d, tid)
    assert record["state"] == "refused" and "own endpoints" in record["last_error"]


def test_a_name_that_resolves_to_an_own_endpoint_is_never_sent(d, receiver):
    """A host name is judged by what it resolves to when the POST is due (here the machine's own
    name, which resolves to its loopback on most Linux hosts)."""
    name = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except OSError:
        pytest.skip(f"{name} does not resolve here")
    if not any(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        pytest.skip(f"{name} does not resolve to loopback here ({addresses})")
    record = callback.deliver(d, finished_task(d, f"http://{name}:1/admin/pause", "t-named"))
    assert record["state"] == "refused" and "own endpoints" in record["last_error"]


def test_a_delivery_whose_worker_died_mid_post_is_sent_again_by_the_reaper(d, receiver, monkeypatch):
    tid = finished_task(d, receiver.url, "t-lost")
    verdict, _ = d.stores.callbacks.claim(tid, lease_seconds=0.2, max_attempts=4)  # a worker claims it ... and dies
    assert verdict == "go"
    monkeypatch.setattr(reaper, "CALLBACK_LATE_SECONDS", 0.0)
    wait_for(lambda: tid in d.stores.callbacks.due(0.0), timeout=5, interval=0.05)
    sent = []
    monkeypatch.setattr(d.dispatcher, "callback", sent.append)
    reaper.reap_once(d)
    assert sent == [tid]
    assert callback.deliver(d, tid)["delivered"]  # the resent task delivers, same key
    assert len(receiver.delivered_once()) == 1


def test_the_post_goes_to_the_addresses_the_policy_judged_not_a_second_lookup(d, receiver, monkeypatch):
    """DNS rebinding: a name may answer the check with one address and the connection a moment
    later with another (this service's own). The POST is pinned to the checked addresses -- here
    a name no resolver knows, whose checked address is the receiver's -- and keeps its Host."""
    port = receiver.url.split(":")[2].split("/")[0]
    judged: list[str] = []

    def resolve(url):
        judged.append(url)
        return ["127.0.0.1"]

    monkeypatch.setattr(callback, "_resolve", resolve)
    record = callback.deliver(d, finished_task(d, f"http://rebind.invalid:{port}/callback", "t-pinned"))
    assert record["state"] == "delivered" and any("rebind.invalid" in u for u in judged)
    [(headers, _)] = receiver.posts
    assert headers["host"] == f"rebind.invalid:{port}"


def test_pinned_delivery_tries_the_next_judged_address_when_one_refuses(d, receiver, monkeypatch):
    port = receiver.url.split(":")[2].split("/")[0]
    monkeypatch.setattr(callback, "_resolve", lambda url: ["127.0.0.3", "127.0.0.1"] if "multi" in url else [])
    with socket.socket() as probe:  # 127.0.0.3:<port> refuses (nothing listens there)
        if probe.connect_ex(("127.0.0.3", int(port))) == 0:
            pytest.skip("something listens on 127.0.0.3 here")
    record = callback.deliver(d, finished_task(d, f"http://multi.invalid:{port}/callback", "t-multi"))
    assert record["state"] == "delivered" and len(receiver.posts) == 1


def test_behind_an_http_proxy_the_url_is_left_to_the_proxy(monkeypatch):
    """With HTTP(S)_PROXY set, httpx sends the POST through the proxy, which resolves the name
    itself: pinning an address would break its TLS and bypass NO_PROXY, so the URL goes as it is."""
    from workers.stages.callback_post import _via_proxy

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "receiver.corp")
    assert _via_proxy("https", "hooks.example.com") and not _via_proxy("https", "receiver.corp")
    assert not _via_proxy("http", "hooks.example.com")  # only HTTPS goes through it here


def test_a_receiver_that_answers_a_byte_at_a_time_is_cut_at_the_deadline(d, monkeypatch):
    """httpx's timeout bounds each read: a receiver answering a byte every 0.5 s held the POST,
    and a callback worker's thread, for as long as it liked (a probe's held all four, and no
    session's result was published). The whole exchange now ends at the deadline, as a failed
    attempt to retry."""
    import threading
    import time

    from tests.support_http import Scripted

    stop = threading.Event()

    def drip(conn, request):
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
        while not stop.wait(0.5):
            try:
                conn.sendall(b"a")
            except OSError:
                return "close"
        return "close"

    server = Scripted([drip] * 4)
    monkeypatch.setattr(callback, "CALLBACK_TIMEOUT_SECONDS", 2.0)
    try:
        tid = finished_task(d, f"{server.url}/hook", "t-drip")
        started = time.monotonic()
        with pytest.raises(callback.DeliveryFailed, match="Timeout"):
            callback.deliver(d, tid)
        assert time.monotonic() - started < 5
        assert d.stores.callbacks.record(tid)["state"] == "pending"
    finally:
        stop.set()
        server.close()


def test_resends_of_lost_attempts_stop_at_the_attempt_limit(d, receiver):
    """A worker that dies mid-POST never records the attempt's end; the reaper resends it. Each
    resend claimed another attempt, past POLAR_CALLBACK_ATTEMPTS (a probe saw 5 of 4), each a
    POST beside the others. Out of attempts, a claim ends the delivery as failed."""
    import time

    tid = finished_task(d, receiver.url, "t-lost-many")
    for _ in range(3):  # callback_attempts=3: three attempts whose workers died
        verdict, _ = d.stores.callbacks.claim(tid, lease_seconds=0.001, max_attempts=3)
        assert verdict == "go"
        time.sleep(0.01)  # (the lease lapses: the reaper would resend)
    record = callback.deliver(d, tid)
    assert record["state"] == "failed" and record["attempts"] == 3 and receiver.posts == []
    assert tid not in d.stores.callbacks.due(-3600)
