"""The proxy's /metrics in one process (the values live in it; tests/proxy scrapes the real
multi-worker proxy): counts by provider and status after calls through the vendors' SDKs, token
counters equal to what the records hold, refusals counted by status and type, in-flight and
pause state, and the admin token required."""

from __future__ import annotations

import threading

import anthropic
import openai
import pytest

from infra import fake_upstream
from proxy.app import create_app
from proxy.upstream import WSGITransport
from tests.inproc.conftest import proxy_settings, sdk_clients
from tests.support import KINDS, PROVIDER_OF, call, metric_samples, records, running_session, wait_for

TOKEN = "admin-token-for-tests"


@pytest.fixture
def app(r, redis_url, tmp_path):
    return create_app(proxy_settings(redis_url, tmp_path, admin_token=TOKEN), transport=WSGITransport(fake_upstream.app))


def scrape(app, **headers) -> dict:
    res = app.test_client().get("/metrics", headers=headers or {"x-polar-admin-token": TOKEN})
    assert res.status_code == 200 and res.content_type.startswith("text/plain")
    return metric_samples(res.get_data(as_text=True))


def value(m: dict, name: str, **labels) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def test_calls_tokens_and_records_by_provider(app, redis_url):
    keys = {}
    for kind in KINDS:
        keys[kind] = key = running_session(redis_url)
        call(kind, sdk_clients(app, key), "fake")
        call(kind, sdk_clients(app, key), "fake", stream=True)
    m = scrape(app)
    for kind in KINDS:
        provider = PROVIDER_OF[kind]
        done, _ = records(redis_url, keys[kind])
        assert len(done) == 2
        assert value(m, "polar_proxy_calls_total", provider=provider, status="200") == 2
        assert value(m, "polar_proxy_prompt_tokens_total", provider=provider) == sum(len(r["prompt_ids"]) for r in done)
        assert value(m, "polar_proxy_completion_tokens_total", provider=provider) == sum(
            len(r["response_ids"]) for r in done)
    assert value(m, "polar_proxy_records_written_total", kind="completion") == 2 * len(KINDS)
    assert value(m, "polar_proxy_upstream_latency_seconds_count") == 2 * len(KINDS)
    assert value(m, "polar_proxy_overhead_seconds_count") == 2 * len(KINDS)
    assert 0 < value(m, "polar_proxy_overhead_seconds_sum") < value(m, "polar_proxy_overhead_seconds_count") * 1.0
    assert value(m, "polar_proxy_calls_in_flight") == 0 and value(m, "polar_proxy_paused") == 0
    assert not any(name == "polar_proxy_errors_total" for name, _ in m)


def test_refusals_are_counted_by_status_and_type(app, redis_url):
    key = running_session(redis_url)
    c = sdk_clients(app, key)
    for kind, model in (("chat", "reject-422"), ("anthropic", "fail-500"), ("chat", "no-ids")):
        with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)):
            call(kind, c, model)
    with pytest.raises(openai.NotFoundError):  # not a session's key: refused at admission, nothing recorded
        call("responses", sdk_clients(app, "sk-polar-nope"), "fake")
    client = app.test_client()
    assert client.post(f"/s/{key}/v1/messages", data=b'{"messages": [', content_type="application/json").status_code == 400
    m = scrape(app)
    assert value(m, "polar_proxy_calls_total", provider="openai_chat", status="422") == 1
    assert value(m, "polar_proxy_errors_total", provider="openai_chat", type="UpstreamRejected") == 1
    assert value(m, "polar_proxy_calls_total", provider="anthropic", status="502") == 1
    assert value(m, "polar_proxy_errors_total", provider="anthropic", type="UpstreamError") == 1
    assert value(m, "polar_proxy_calls_total", provider="openai_chat", status="502") == 1  # no token ids
    assert value(m, "polar_proxy_calls_total", provider="openai_responses", status="404") == 1
    assert value(m, "polar_proxy_errors_total", provider="openai_responses", type="SessionNotFound") == 1
    assert value(m, "polar_proxy_calls_total", provider="anthropic", status="400") == 1
    assert value(m, "polar_proxy_errors_total", provider="anthropic", type="BadRequest") == 1
    # every failed call of the live session left an error record, none a completion
    assert value(m, "polar_proxy_records_written_total", kind="error") == len(records(redis_url, key)[1]) == 4
    assert value(m, "polar_proxy_records_written_total", kind="completion") == 0
    assert value(m, "polar_proxy_prompt_tokens_total", provider="openai_chat") == 0


def test_in_flight_and_pause_state(app, redis_url):
    key = running_session(redis_url)
    slow = threading.Thread(target=lambda: call("chat", sdk_clients(app, key), "slow-1500"))
    slow.start()
    try:
        wait_for(lambda: value(scrape(app), "polar_proxy_calls_in_flight") == 1, timeout=10)
        assert value(scrape(app), "polar_proxy_leased_calls") == 1
    finally:
        slow.join()
    assert value(scrape(app), "polar_proxy_calls_in_flight") == 0
    admin = {"x-polar-admin-token": TOKEN}
    assert app.test_client().post("/admin/pause?timeout_seconds=0", headers=admin).status_code == 200
    assert value(scrape(app), "polar_proxy_paused") == 1
    app.test_client().post("/admin/resume", headers=admin)
    assert value(scrape(app), "polar_proxy_paused") == 0


def test_metrics_need_the_admin_token(app):
    client = app.test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"x-polar-admin-token": "wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200  # Prometheus' way
    assert TOKEN not in client.get("/metrics").get_data(as_text=True)


def test_metrics_can_be_turned_off(r, redis_url, tmp_path):
    app = create_app(proxy_settings(redis_url, tmp_path, proxy_metrics=False), transport=WSGITransport(fake_upstream.app))
    key = running_session(redis_url)
    call("chat", sdk_clients(app, key), "fake")  # calls are served as ever
    assert app.test_client().get("/metrics").status_code == 404


def test_streams_opened_before_the_answer_are_counted_when_they_end(app, redis_url):
    key = running_session(redis_url)
    c = sdk_clients(app, key)
    call("anthropic", c, "slow-700", stream=True)  # longer than the keepalive: the head goes out first
    with pytest.raises(openai.APIError):
        call("chat", c, "slowfail-700", stream=True)  # the engine fails after the stream began
    m = scrape(app)
    assert value(m, "polar_proxy_calls_total", provider="anthropic", status="200") == 1
    assert value(m, "polar_proxy_calls_total", provider="openai_chat", status="502") == 1
    assert value(m, "polar_proxy_errors_total", provider="openai_chat", type="UpstreamError") == 1
    assert value(m, "polar_proxy_records_written_total", kind="completion") == 1
