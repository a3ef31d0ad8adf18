"""The rollout API fuzzed from its own OpenAPI description (schemathesis): generated and mutated
requests get 2xx or 4xx -- never a 500 -- and every error is the API's JSON shape."""

from __future__ import annotations

import tempfile

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from infra.embedded_redis import EmbeddedRedis
from pipeline.api.app import create_app
from pipeline.settings import Settings

_server = EmbeddedRedis().start()  # one for the module's schema: the app is built at import
APP = create_app(Settings(home=tempfile.mkdtemp(), redis_url=_server.url, api_token="fuzz-token"))
schema = schemathesis.openapi.from_wsgi("/openapi.json", APP)
OPEN = ("/health", "/viewer/session")  # the viewer's login checks the token it is given itself (401)


@pytest.fixture(scope="module", autouse=True)
def _stop_redis():
    yield
    _server.stop()


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_gets_a_server_error(case):
    for headers in ({"Authorization": "Bearer fuzz-token"}, {}):
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.path, response.text[:500])
        if response.status_code >= 400:
            error = response.json()["error"]
            assert isinstance(error["type"], str) and isinstance(error["message"], str)
        if not headers and case.path not in OPEN:
            assert response.status_code == 401  # nothing is served without the token
