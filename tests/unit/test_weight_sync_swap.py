"""ProxyAdmin.swap's error paths against a scripted proxy (httpx.MockTransport): the hold is
given back whatever fails, and the error that ended the swap is the one raised."""

from __future__ import annotations

import json

import httpx
import pytest

from pipeline.weight_sync import ProxyAdmin, SwapRefused


class FakeProxy:
    """Answers /admin/pause with a hold; /admin/resume from a script of (status, body) replies,
    then 200. Records every resume's body; ``held`` is whether the hold is still held."""

    def __init__(self, resumes: list[tuple[int, dict]]) -> None:
        self.script, self.resumes, self.held = list(resumes), [], False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/admin/pause":
            self.held = True
            return httpx.Response(200, json={"holder": "h1", "drained": True, "inflight": 0, "lease_expires_at": 1.0})
        if request.url.path == "/admin/resume":
            body = json.loads(request.content)
            self.resumes.append(body)
            status, reply = self.script.pop(0) if self.script else (200, {"policy_version": body.get("policy_version")})
            if status == 200:
                self.held = False
            return httpx.Response(status, json=reply)
        return httpx.Response(404, json={})


def admin_of(proxy: FakeProxy) -> ProxyAdmin:
    return ProxyAdmin("http://proxy.test", "t", transport=httpx.MockTransport(proxy))


def error(status: int, code: str) -> tuple[int, dict]:
    return status, {"error": {"message": f"{code}!", "code": code}}


@pytest.mark.parametrize("status", [500, 503])
def test_a_versioned_resume_failing_with_a_server_error_still_gives_the_hold_back(status):
    proxy = FakeProxy([error(status, "redis_unavailable")])
    with pytest.raises(SwapRefused):
        admin_of(proxy).swap(2, load=lambda: None, drain_seconds=1)
    assert not proxy.held, f"the hold is kept until its lease lapses after a {status} on the versioned resume"


def test_a_load_error_is_not_masked_by_a_failing_resume():
    proxy = FakeProxy([error(503, "redis_unavailable")])

    def broken_load() -> None:
        raise RuntimeError("out of GPU memory")

    with pytest.raises(RuntimeError, match="GPU"):
        admin_of(proxy).swap(2, load=broken_load, drain_seconds=1)


def test_the_version_refused_and_the_plain_resume_failing_raise_swap_refused():
    proxy = FakeProxy([error(409, "version_backwards"), error(503, "redis_unavailable")])
    with pytest.raises(SwapRefused) as info:
        admin_of(proxy).swap(2, load=lambda: None, drain_seconds=1)
    assert info.value.code == "version_backwards"
