"""The rollout API fuzzed from its own OpenAPI description (schemathesis): generated and mutated
requests get 2xx or 4xx -- never a 500 -- and every error is the API's JSON shape."""

from __future__ import annotations

import tempfile

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from infra.embedded_redis import EmbeddedRedis
from pipeline.api.app import create_app
from pipeline.settings import Settings

_server = EmbeddedRedis().start()  # one for the module's schema: the app is built at import
APP = create_app(Settings(home=tempfile.mkdtemp(), redis_url=_server.url, api_token="fuzz-token"))
schema = schemathesis.openapi.from_wsgi("/openapi.json", APP)
# One test per operation and mode, each with its own id (schemathesis' own parametrize gives them
# all the function's id, and xdist, which keys tests by id, runs one of them).
OPERATIONS = {result.ok().label: result.ok() for result in schema.get_all_operations()}
# Mutated requests only where the operation has something to mutate (GET /health has not).
CASES = [(label, mode) for label, op in sorted(OPERATIONS.items()) for mode in GenerationMode
         if mode is GenerationMode.POSITIVE
         or any(len(ps) for ps in (op.path_parameters, op.query, op.headers, op.cookies, op.body))]
OPEN = ("/health", "/viewer/session")  # the viewer's login checks the token it is given itself (401)


@pytest.fixture(scope="module", autouse=True)
def _stop_redis():
    yield
    _server.stop()


@pytest.mark.parametrize(("label", "mode"), CASES, ids=[f"{label} {mode.value}" for label, mode in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_input_gets_a_server_error(label, mode, data):
    case = data.draw(OPERATIONS[label].as_strategy(generation_mode=mode))
    for headers in ({"Authorization": "Bearer fuzz-token"}, {}):
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.path, response.text[:500])
        if response.status_code >= 400:
            error = response.json()["error"]
            assert isinstance(error["type"], str) and isinstance(error["message"], str)
        if not headers and case.path not in OPEN:
            assert response.status_code == 401  # nothing is served without the token
