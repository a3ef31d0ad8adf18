"""The trainer's side of weight sync: the proxy's admin surface (``/admin/pause``, ``/admin/resume``,
``/admin/status``) as a small client, and ``swap``, the whole cycle a trainer runs between steps.

A pause is held by a holder under a lease (the proxy lets it lapse if the trainer dies); a swap
holds it, loads nothing unless the calls in flight drained (a call still sampling would span the
new weights under the old version's stamp), and always gives its hold back -- with the new
version only when the weights were loaded.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from pipeline.trainers.groups import integer_version

log = logging.getLogger("polar.weight_sync")

ADMIN_HEADER = "x-polar-admin-token"


def new_holder() -> str:
    return f"trainer-{secrets.token_hex(8)}"


class WeightSyncError(Exception):
    """The proxy refused or could not be asked (``status`` 0: no answer at all)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        self.status, self.code = status, code
        super().__init__(message)


class SwapRefused(WeightSyncError):
    """The swap did not load: the drain timed out, or the resume was refused (409)."""


@dataclass(frozen=True)
class Hold:
    """A pause this trainer holds: pass ``holder`` back to resume it."""

    holder: str
    drained: bool
    inflight: int
    lease_expires_at: float | None


class ProxyAdmin:
    def __init__(self, proxy_url: str, admin_token: str | None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=proxy_url.rstrip("/"), headers={ADMIN_HEADER: admin_token or ""},
                                  timeout=timeout, transport=transport)
        url = self._http.base_url
        self._shown_url = str(url.copy_with(username=None, password=None)) if url.userinfo else str(url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ProxyAdmin":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/admin/status")

    def pause(self, *, holder: str | None = None, drain_seconds: float = 60.0, lease_seconds: float = 600.0) -> Hold:
        """Hold the pause (again, with the same ``holder``: renew it) and wait up to
        ``drain_seconds`` for the calls in flight to end."""
        # A holder of our own making when none is given: a pause whose answer was lost (a timeout
        # after the proxy took it) can still be given back by name.
        params = {"timeout_seconds": drain_seconds, "lease_seconds": lease_seconds, "holder": holder or new_holder()}
        body = self._call("POST", "/admin/pause", params=params, timeout=drain_seconds + 30)
        return Hold(str(body["holder"]), bool(body.get("drained")), int(body.get("inflight") or 0),
                    body.get("lease_expires_at"))

    def resume(self, *, holder: str | None = None, policy_version: str | int | None = None,
               force: bool = False) -> dict[str, Any]:
        """End ``holder``'s hold (None: the only one's), stamping ``policy_version`` from now on;
        ``force`` ends every hold and skips the proxy's checks (the operator's escape hatch)."""
        body: dict[str, Any] = {"force": force}
        if holder:
            body["holder"] = holder
        if policy_version is not None:
            body["policy_version"] = str(policy_version)
        return self._call("POST", "/admin/resume", json=body)

    def current_version(self) -> int:
        """The proxy's policy version when it is an integer (a run going on from a stack it
        swapped before), else 0: integer versions only move forward."""
        return integer_version(self.status().get("policy_version")) or 0

    def swap(self, next_version: str | int, load: Callable[[], None] = lambda: None, *,
             drain_seconds: float = 60.0, lease_seconds: float = 600.0) -> dict[str, Any]:
        """Pause, ``load()`` the new weights, resume under ``next_version``. A drain that timed
        out loads nothing; the hold is given back whatever happens (the version moves only when
        ``load`` returned; ``lease_seconds`` must outlast it). Raises ``SwapRefused`` when nothing
        was loaded or the resume was refused."""
        holder = new_holder()
        try:
            hold = self.pause(holder=holder, drain_seconds=drain_seconds, lease_seconds=lease_seconds)
            if not hold.drained:
                raise SwapRefused(409, f"{hold.inflight} call(s) still in flight after {drain_seconds:g} s: the "
                                  "weights were not loaded (pause released, version unchanged)", "not_drained")
            with self._renewing(holder, lease_seconds):  # a load longer than the lease keeps the hold
                load()
        except BaseException:  # nothing loaded (or half of it): give the hold back, keep the error going on
            self._give_back(holder)
            raise
        try:
            resumed = self.resume(holder=hold.holder, policy_version=next_version)
        except WeightSyncError as exc:
            # The version refused (409), the proxy failing (5xx) or not answering: the hold goes back
            # all the same (a lapsing lease would end it only minutes later, under the old version too).
            self._give_back(hold.holder)
            why = ("the proxy could not be asked to stamp it" if exc.status == 0 or exc.status >= 500
                   else "the proxy refused it")
            raise SwapRefused(exc.status, f"the weights were loaded but version {next_version} is not stamped: "
                              f"{why} (it stamps the old one; the hold was given back): {exc}", exc.code) from exc
        return {"drained": hold.drained, "policy_version": resumed.get("policy_version")}

    @contextlib.contextmanager
    def _renewing(self, holder: str, lease_seconds: float) -> Iterator[None]:
        """Renew ``holder``'s hold every third of its lease while the body runs: inference must not
        resume on half-loaded weights because loading outlasted the lease."""
        done = threading.Event()

        def renew() -> None:
            while not done.wait(lease_seconds / 3):
                try:
                    self.pause(holder=holder, drain_seconds=0, lease_seconds=lease_seconds)
                except WeightSyncError as exc:  # tried again a third of a lease later
                    log.warning("could not renew weight-sync hold %s: %s", holder, exc)

        thread = threading.Thread(target=renew, name=f"polar-hold-{holder}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _give_back(self, holder: str) -> None:
        """End ``holder``'s hold under the version the proxy stamps; best effort (its lease ends
        it anyway), never raised over the error that ended the swap."""
        try:
            self.resume(holder=holder)
        except WeightSyncError as exc:
            log.warning("could not give weight-sync hold %s back (its lease ends it): %s", holder, exc)

    def _call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise WeightSyncError(0, f"cannot reach the proxy at {self._shown_url} ({type(exc).__name__}: {exc})") from exc
        try:
            body = resp.json()
        except ValueError:
            body = {}
        if resp.status_code != 200 or not isinstance(body, dict):
            err = body.get("error") if isinstance(body, dict) else None
            err = err if isinstance(err, dict) else {}
            raise WeightSyncError(resp.status_code, str(err.get("message") or resp.text[:500] or resp.reason_phrase),
                                  err.get("code"))
        return body
