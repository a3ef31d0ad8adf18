"""The trajectory viewer: a static page (``static/``: HTML, JS, CSS; no build step, nothing
fetched from elsewhere) and the JSON routes it reads, on the rollout API.

    GET    /viewer/                         the page (open: it holds no data)
    GET    /viewer/static/<viewer.js|viewer.css>
    POST   /viewer/session                  {"token": "<api token>"} -> the login cookie (auth.py)
    DELETE /viewer/session                  logout: the cookie is cleared
    GET    /viewer/api/tasks                recent tasks
    GET    /viewer/api/task/<task_id>       a task and its sessions
    GET    /viewer/api/session/<session_id> a session's view model (model.py)

The data routes take the bearer header like every route, or the viewer's cookie (GET only).
Every viewer response carries a strict Content-Security-Policy: scripts, styles and fetches
from this origin only, no inline script or style, no frames, no plugins.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from flask import Flask, Request, Response, request
from pydantic import ValidationError

from pipeline.api.errors import ApiError, count_arg
from pipeline.api.sources import SessionSources
from pipeline.api.viewer.auth import COOKIE, COOKIE_PATH, cookie_valid, cookie_value
from pipeline.api.viewer.model import session_view
from pipeline.api.viewer.token_text import EngineText
from pipeline.credentials import same_secret
from pipeline.errors import TaskNotFound
from pipeline.schemas import CompletionRecord, Trajectory, UpstreamErrorRecord
from pipeline.settings import Settings
from pipeline.stores import Stores

STATIC = Path(__file__).with_name("static")
STATIC_FILES = {"viewer.js": "text/javascript", "viewer.css": "text/css"}  # nothing else is served
DATA_PREFIX = "/viewer/api/"
LOGIN_MAX_BYTES = 4096  # a login body: the API token, as JSON or a form
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'none'; base-uri 'none'; frame-ancestors 'none'")


def is_open(method: str, path: str) -> bool:
    """The page, its two static files and the login itself need no token."""
    if path == "/viewer/session":
        return True
    return method in ("GET", "HEAD") and (path in ("/viewer", "/viewer/") or path.startswith("/viewer/static/"))


def cookie_grants(req: Request, token: str) -> bool:
    """The login cookie opens the viewer's GET data routes and nothing else."""
    return req.method in ("GET", "HEAD") and req.path.startswith(DATA_PREFIX) and \
        cookie_valid(req.cookies.get(COOKIE), token, time.time())


def register(app: Flask, settings: Settings, stores: Stores, sources: SessionSources, token: str | None,
             engine_transport: httpx.BaseTransport | None = None) -> None:
    engine = None
    if settings.viewer_detokenize:
        engine = EngineText(settings.upstream_url.split(",")[0].strip(), transport=engine_transport)

    @app.after_request
    def viewer_headers(resp: Response) -> Response:
        if request.path == "/viewer" or request.path.startswith("/viewer/"):
            resp.headers["Content-Security-Policy"] = CSP
            resp.headers["X-Content-Type-Options"] = "nosniff"
            resp.headers["X-Frame-Options"] = "DENY"
            resp.headers["Referrer-Policy"] = "no-referrer"
            resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.get("/viewer")
    @app.get("/viewer/")
    def viewer_page() -> Response:
        return Response((STATIC / "index.html").read_bytes(), mimetype="text/html")

    @app.get("/viewer/static/<name>")
    def viewer_static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise ApiError(404, "not_found", f"no viewer file {name!r}")
        return Response((STATIC / name).read_bytes(), mimetype=STATIC_FILES[name])

    @app.post("/viewer/session")
    def viewer_login() -> Response:
        if token is None:
            return _json({"authenticated": True, "token_required": False})
        # (open to anyone: a small body, not the 16 MB a task may have, read before the check)
        request.max_content_length = LOGIN_MAX_BYTES
        given = _login_token(request.get_data(cache=False))
        if not same_secret(given, token):
            raise ApiError(401, "unauthorized", "wrong API token")
        value, lifetime = cookie_value(token, time.time())
        resp = _json({"authenticated": True, "token_required": True, "expires_in": lifetime})
        resp.set_cookie(COOKIE, value, max_age=lifetime, path=COOKIE_PATH, httponly=True, samesite="Strict",
                        secure=request.is_secure)
        return resp

    @app.delete("/viewer/session")
    def viewer_logout() -> Response:
        resp = _json({"authenticated": False})
        resp.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="Strict", secure=request.is_secure)
        return resp

    @app.get("/viewer/api/tasks")
    def viewer_tasks() -> Response:
        limit = count_arg(request.args, "limit", 50, 200)
        rows = []
        for task_id in stores.tasks.recent(limit):
            try:
                status = stores.tasks.status(task_id, include_results=False).model_dump(mode="json")
            except TaskNotFound:  # indexed, but expired since
                continue
            rows.append({k: status[k] for k in ("task_id", "status", "cancelled", "total_sessions",
                                                "finished_sessions", "counts", "created_at", "finished_at",
                                                "early_stopped")} | {"group_id": status["metadata"].get("group_id")})
        return _json({"tasks": rows})

    @app.get("/viewer/api/task/<path:task_id>")
    def viewer_task(task_id: str) -> Response:
        try:
            status = stores.tasks.status(task_id, include_results=False)
            task = stores.tasks.request(task_id)
        except TaskNotFound:
            raise ApiError(404, "not_found", f"unknown task {task_id!r}") from None
        body = status.model_dump(mode="json", exclude={"results", "result_paths"})
        body.update(instruction=task.instruction[:4000], builder=task.builder.strategy, harness=task.agent.harness,
                    model_name=task.agent.model_name)
        return _json(body)

    @app.get("/viewer/api/session/<session_id>")
    def viewer_session(session_id: str) -> Response:
        found = sources.result(session_id)
        state = stores.sessions.get(session_id) if found is None else None
        if found is None and state is None:
            raise ApiError(404, "not_found", f"unknown session {session_id!r} (or past its retention)")
        comp = sources.completions(session_id)
        trajectory: Trajectory | None
        if found is not None:
            result, source = found
            head = {"session_id": session_id, "task_id": result.task_id, "sample_index": result.sample_index,
                    "status": result.status.value, "reward": result.reward, "error": result.error,
                    "trajectory_error": result.trajectory.error, "evaluation": result.evaluation,
                    "finished": True, "source": source}
            timing, trajectory = result.timing, result.trajectory
        else:
            assert state is not None
            head = {"session_id": session_id, "task_id": state.spec.task_id, "sample_index": state.spec.sample_index,
                    "status": state.status.value, "reward": None, "error": state.error, "trajectory_error": None,
                    "evaluation": {}, "finished": False, "source": "redis"}
            timing, trajectory = state.timing, stores.outputs.trajectory(session_id)
        completions = _records(CompletionRecord, comp[0]["completions"] if comp else [])
        errors = _records(UpstreamErrorRecord, comp[0]["errors"] if comp else [])
        text = engine.for_view() if engine is not None else None
        view = session_view(head=head, timing=timing, trajectory=trajectory, completions=completions,
                            errors=errors, text=text)
        view["detokenize"] = {"enabled": text is not None, "used": bool(text and text.used),
                              "failed": bool(text and text.failed)}
        return _json(view)


def _login_token(raw: bytes) -> str:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    given = data.get("token") if isinstance(data, dict) else None
    if not isinstance(given, str) or not given:
        raise ApiError(400, "invalid_request", 'the login body must be JSON {"token": "<api token>"}')
    return given


def _records(model: Any, raw: list[dict[str, Any]]) -> list[Any]:
    out = []
    for item in raw:
        try:
            out.append(model.model_validate(item))
        except ValidationError:  # a record the viewer cannot read is left out, not a failed page
            continue
    return out


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")
