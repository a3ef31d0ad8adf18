"""The trainer's weight-sync client (``pipeline.weight_sync.ProxyAdmin``) against the proxy app
in-process on a real Redis: a swap moves the version only when the weights were loaded, and
gives its hold back whatever happened; refusals arrive as errors carrying the proxy's code.
Faults between the two (a load balancer answering 503, an answer lost after the proxy acted) are
injected by a WSGI layer in front of the real app."""

from __future__ import annotations

import time

import httpx
import pytest

from infra import fake_upstream
from pipeline.stores.proxy_control import ProxyControlStore
from pipeline.weight_sync import ProxyAdmin, SwapRefused, WeightSyncError
from proxy.app import create_app
from proxy.upstream import WSGITransport
from tests.inproc.conftest import ADMIN_TOKEN, proxy_settings


def admin_of(app, token: str | None = ADMIN_TOKEN) -> ProxyAdmin:
    return ProxyAdmin("http://proxy.test", token, transport=httpx.WSGITransport(app=app))


class Faults:
    """A WSGI layer in front of the proxy app: the next requests to ``path`` get ``status``
    without reaching the app (``after=True``: the app handles them, and the answer is lost)."""

    def __init__(self, app) -> None:
        self.app, self.plan = app, []

    def fail(self, path: str, status: int, times: int = 1, after: bool = False) -> "Faults":
        self.plan += [(path, status, after)] * times
        return self

    def __call__(self, environ, start_response):
        step = next((f for f in self.plan if f[0] == environ["PATH_INFO"]), None)
        if step is None:
            return self.app(environ, start_response)
        self.plan.remove(step)
        if step[2]:
            b"".join(self.app(environ, lambda *a, **k: None))  # the proxy acts; its answer never arrives
        start_response(f"{step[1]} Injected", [("Content-Type", "application/json")])
        return [b'{"error": {"message": "injected", "code": "injected"}}']


def test_a_swap_loads_then_resumes_under_the_next_version(proxy_app):
    admin = admin_of(proxy_app)
    seen: list[dict] = []
    assert admin.current_version() == 0
    done = admin.swap(1, load=lambda: seen.append(admin.status()), drain_seconds=1)
    assert seen[0]["paused"] is True and seen[0]["holders"] == 1  # loaded while held
    assert done == {"drained": True, "policy_version": "1"}
    after = admin.status()
    assert after["paused"] is False and after["holders"] == 0 and admin.current_version() == 1


def test_a_swap_whose_drain_timed_out_loads_nothing_and_gives_its_hold_back(proxy_app, r):
    ProxyControlStore(r).enter("call-still-sampling", time.time() + 60)
    admin = admin_of(proxy_app)
    loaded: list[int] = []
    with pytest.raises(SwapRefused) as info:
        admin.swap(1, load=lambda: loaded.append(1), drain_seconds=0.2)
    assert info.value.code == "not_drained" and "1 call(s)" in str(info.value)
    assert loaded == [] and admin.status()["paused"] is False and admin.current_version() == 0


def test_a_load_that_fails_gives_the_hold_back_under_the_old_version(proxy_app):
    admin = admin_of(proxy_app)

    def broken_load() -> None:
        raise RuntimeError("out of GPU memory")

    with pytest.raises(RuntimeError, match="GPU"):
        admin.swap(1, load=broken_load, drain_seconds=1)
    assert admin.status()["paused"] is False and admin.current_version() == 0


def test_refusals_carry_the_proxys_status_and_code(proxy_app, r, redis_url, tmp_path):
    admin = admin_of(proxy_app)
    first, second = admin.pause(drain_seconds=0), admin.pause(drain_seconds=0)
    with pytest.raises(WeightSyncError) as info:
        admin.resume()  # two hold it: which one?
    assert (info.value.status, info.value.code) == (409, "pause_holder_ambiguous")
    admin.resume(holder=first.holder)
    admin.resume(holder=second.holder, policy_version=7)
    with pytest.raises(WeightSyncError) as info:
        admin.swap(3)  # back from 7: refused, and the hold it took given back
    assert info.value.code == "policy_version_backwards" and isinstance(info.value, SwapRefused)
    assert admin.status()["paused"] is False and admin.current_version() == 7
    with pytest.raises(WeightSyncError) as info:
        admin_of(proxy_app, "wrong").status()
    assert info.value.status == 401 and "admin token" in str(info.value)
    closed = create_app(proxy_settings(redis_url, tmp_path), transport=WSGITransport(fake_upstream.app))
    with pytest.raises(WeightSyncError) as info:
        admin_of(closed).pause()
    assert info.value.status == 403 and "POLAR_ADMIN_TOKEN" in str(info.value)


def test_a_proxy_that_does_not_answer_is_status_0():
    with pytest.raises(WeightSyncError) as info:
        ProxyAdmin("http://127.0.0.1:9", ADMIN_TOKEN, timeout=2).status()
    assert info.value.status == 0 and "cannot reach the proxy" in str(info.value)


@pytest.mark.parametrize("status", [500, 503])
def test_a_versioned_resume_failing_on_the_way_still_gives_the_hold_back(proxy_app, status):
    faults = Faults(proxy_app).fail("/admin/resume", status)
    admin = admin_of(faults)
    with pytest.raises(SwapRefused) as info:
        admin.swap(2, drain_seconds=1)
    assert info.value.status == status and "not stamped" in str(info.value)
    assert admin.status()["paused"] is False and admin.current_version() == 0  # given back, under the old version


def test_a_load_error_is_not_masked_by_a_failing_give_back(proxy_app):
    admin = admin_of(Faults(proxy_app).fail("/admin/resume", 503))

    def broken_load() -> None:
        raise RuntimeError("out of GPU memory")

    with pytest.raises(RuntimeError, match="GPU"):
        admin.swap(2, load=broken_load, drain_seconds=1)
    assert admin.status()["holders"] == 1  # (the give-back failed: its lease ends it)


def test_a_pause_whose_answer_was_lost_is_given_back_by_the_holder_the_client_chose(proxy_app):
    admin = admin_of(Faults(proxy_app).fail("/admin/pause", 504, after=True))
    with pytest.raises(WeightSyncError):
        admin.swap(2, drain_seconds=1)
    assert admin.status()["paused"] is False and admin.current_version() == 0


def test_a_load_longer_than_the_lease_keeps_the_hold(proxy_app):
    admin = admin_of(proxy_app)
    seen: list[dict] = []

    def slow_load() -> None:
        time.sleep(2.2)  # past the 1 s lease twice over
        seen.append(admin.status())

    assert admin.swap(5, load=slow_load, drain_seconds=1, lease_seconds=1)["policy_version"] == "5"
    assert seen[0]["paused"] is True and seen[0]["holders"] == 1
    assert admin.status()["paused"] is False


def test_an_unreachable_proxy_is_named_without_its_password():
    with pytest.raises(WeightSyncError) as info:
        ProxyAdmin("http://ops:hunter2@127.0.0.1:9", ADMIN_TOKEN, timeout=2).status()
    assert "127.0.0.1:9" in str(info.value) and "hunter2" not in str(info.value)
