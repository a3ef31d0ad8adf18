"""The apps in this process: Flask test clients and the vendors' SDKs over WSGI transports, the
engine behind the proxy's ``WSGITransport`` (the instant fake engine, ``infra/fake_upstream.py``),
state in a real embedded Redis. No sockets to our services, no worker processes: what these tests
check is the apps' logic; tests/proxy and tests/e2e run the same code as real processes."""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from infra import fake_upstream
from pipeline.settings import Settings
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from proxy.app import create_app as create_proxy
from proxy.upstream import WSGITransport

BASE = "http://proxy.test"
UPSTREAM = "http://engine.test"
ADMIN_TOKEN = "admin-token-for-tests"  # a proxy without one answers its /admin routes 403


def proxy_settings(redis_url: str, home, **overrides) -> Settings:
    return Settings(**{"home": home, "redis_url": redis_url, "upstream_url": UPSTREAM, "stream_keepalive_seconds": 0.3,
                       "upstream_timeout_seconds": 3, "max_request_bytes": 1_000_000, **overrides})


@pytest.fixture
def proxy_app(r, redis_url, tmp_path):
    return create_proxy(proxy_settings(redis_url, tmp_path, admin_token=ADMIN_TOKEN),
                        transport=WSGITransport(fake_upstream.app))


def admin_client(app):
    """A test client of the proxy sending the admin token with every request."""
    client = app.test_client()
    client.environ_base["HTTP_X_POLAR_ADMIN_TOKEN"] = ADMIN_TOKEN
    return client


@pytest.fixture
def stores(r, redis_url, tmp_path):
    settings = Settings(home=tmp_path, redis_url=redis_url)
    return Stores.open(connect(settings), settings)


def sdk_clients(app, sid: str) -> dict:
    """The official SDKs, each talking to ``app`` in-process."""
    base = f"{BASE}/s/{sid}"
    def http():  # the SDKs are built on httpx2 (they refuse httpx objects)
        return httpx2.Client(transport=httpx2.WSGITransport(app=app), timeout=30)

    return {
        "openai": openai.OpenAI(base_url=f"{base}/v1", api_key=sid, max_retries=0, http_client=http()),
        "anthropic": anthropic.Anthropic(base_url=base, api_key=sid, max_retries=0, http_client=http()),
        "google": genai.Client(api_key=sid, http_options=gtypes.HttpOptions(
            base_url=base, retry_options=gtypes.HttpRetryOptions(attempts=1),
            httpx_client=http())),
    }
