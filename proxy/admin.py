"""The proxy's control surface: ``/admin/pause``, ``/admin/resume``, ``/admin/status`` (weight
sync, ``proxy/control.py``), and the admin token that guards them and ``/metrics``.

Parameters come from the query string or a JSON object body (the body wins). A proxy started
without an admin token answers its control routes 403: the pause state is shared through Redis,
so one open proxy would let anyone pause or re-version every proxy of the fleet.
"""

from __future__ import annotations

import math
import re
from typing import Any

from flask import Flask, request
from werkzeug.wrappers import Response

from pipeline.credentials import same_secret
from proxy.control import Control
from proxy.errors import AdminDisabled, BadRequest, Unauthorized
from proxy.http_io import body_bytes, json_of
from proxy.http_io import json_response as _json

POLICY_VERSION = re.compile(r"^[!-~]{1,128}$")
HOLDER = re.compile(r"^[!-~]{1,128}$")
MAX_DRAIN_SECONDS = 3600.0
DEFAULT_LEASE_SECONDS = 600.0  # a weight update that takes longer renews its hold (pauses again)
MAX_LEASE_SECONDS = 86400.0


def register_admin(app: Flask, control: Control, admin_token: str | None) -> None:
    @app.post("/admin/pause")
    def pause() -> Response:
        check_admin(admin_token, control_surface=True)
        params = _params("timeout_seconds", "lease_seconds", "holder")
        timeout = _seconds(params, "timeout_seconds", 600.0)
        lease = _seconds(params, "lease_seconds", DEFAULT_LEASE_SECONDS)
        if not 0 < lease <= MAX_LEASE_SECONDS:
            raise BadRequest(f"lease_seconds must be above 0 and at most {MAX_LEASE_SECONDS:g}", param="lease_seconds")
        holder = _holder(params)
        return _json(control.pause(min(max(timeout, 0.0), MAX_DRAIN_SECONDS), lease, holder))

    @app.post("/admin/resume")
    def resume() -> Response:
        check_admin(admin_token, control_surface=True)
        params = _params("holder", "policy_version", "force")
        version = params.get("policy_version")
        if version is not None and not (isinstance(version, (str, int)) and not isinstance(version, bool)
                                        and POLICY_VERSION.fullmatch(str(version))):
            raise BadRequest("policy_version must be 1-128 printable characters", param="policy_version")
        return _json(control.resume(_holder(params), None if version is None else str(version), _flag(params, "force")))

    @app.get("/admin/status")
    def admin_status() -> Response:
        check_admin(admin_token, control_surface=True)
        return _json(control.status())


def check_admin(token: str | None, *, control_surface: bool) -> None:
    """The admin token, as ``x-polar-admin-token`` or as a bearer token (what Prometheus sends).
    Without a configured token the control surface is closed (403); ``/metrics``, read-only,
    stays open as before."""
    if token is None:
        if control_surface:
            raise AdminDisabled("the admin endpoints are disabled: this proxy was started without an admin token "
                                "(set POLAR_ADMIN_TOKEN)")
        return
    auth = request.headers.get("Authorization") or ""
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    if not (same_secret(request.headers.get("x-polar-admin-token"), token) or same_secret(bearer, token)):
        raise Unauthorized("the admin endpoints and /metrics need the admin token (POLAR_ADMIN_TOKEN) as the "
                           "x-polar-admin-token header or as Authorization: Bearer")


def _params(*known: str) -> dict[str, Any]:
    """The query string's parameters, overridden by a JSON body's. A body that is not a JSON
    object is refused: ``[1]`` or a form body silently resuming with none of its fields is how a
    version went missing -- and so is a name not ``known`` (``policy_verison``), refused too."""
    raw = body_bytes(request)
    body = json_of(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    params = {**request.args.to_dict(), **body}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise BadRequest(f"unknown parameter {unknown[0][:80]!r}: this route takes {', '.join(known)}",
                         param=unknown[0][:80])
    return params


def _seconds(params: dict[str, Any], name: str, default: float) -> float:
    value = params.get(name, default)
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds):
        raise BadRequest(f"{name} must be a finite number", param=name)
    return seconds


def _holder(params: dict[str, Any]) -> str | None:
    holder = params.get("holder")
    if holder is None or holder == "":
        return None
    if not (isinstance(holder, str) and HOLDER.fullmatch(holder)):
        raise BadRequest("holder must be 1-128 printable characters", param="holder")
    return holder


def _flag(params: dict[str, Any], name: str) -> bool:
    value = params.get(name, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "false", "0", ""):
        return value.lower() in ("true", "1")
    raise BadRequest(f"{name} must be true or false", param=name)
