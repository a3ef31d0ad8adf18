"""The rollout API (Flask): submit, poll, cancel tasks; inspect the pipeline.

Errors are JSON ``{"error": {"type", "message", "fields"?}}``; a payload that fails validation
is a 400 naming each offending field (``runtime.backend``, ``agent``, ...), and nothing is
created for it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flask import Flask, Response, jsonify, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from pipeline.celery_app import dispatch, make_app, stage_queues
from pipeline.errors import TaskExists, TaskNotFound
from pipeline.schemas import TaskRequest
from pipeline.settings import Settings
from pipeline.status import Stage
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from pipeline.stores.queues import queue_depths

log = logging.getLogger("polar.api")


class ApiError(Exception):
    def __init__(self, status: int, type_: str, message: str, fields: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status, self.type, self.message, self.fields = status, type_, message, fields


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    app = Flask("polar.api", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    r = connect(settings)
    stores = Stores.open(r, settings)
    tasks, ready = stores.tasks, stores.ready
    celery = make_app(settings)

    @app.post("/rollout/task/submit")
    def submit() -> tuple[Response, int]:
        task = _parse_task(request.get_data(cache=False))
        try:
            specs = tasks.create(task)
        except TaskExists:
            raise ApiError(409, "conflict", f"task {task.task_id!r} already exists") from None
        for spec in specs:
            dispatch(celery, Stage.INIT, spec.session_id)
        return jsonify({"task_id": task.task_id, "status": "pending",
                        "session_ids": [s.session_id for s in specs]}), 200

    @app.get("/rollout/task/<path:task_id>")
    def get_task(task_id: str) -> Response:
        include = request.args.get("results", "1") not in ("0", "false", "no")
        try:
            status = tasks.status(task_id, include_results=include)
        except TaskNotFound:
            raise ApiError(404, "not_found", f"unknown task {task_id!r}") from None
        return jsonify(status.model_dump(mode="json"))

    @app.delete("/rollout/task/<path:task_id>")
    def cancel_task(task_id: str) -> Response:
        try:
            moved, flagged = tasks.cancel(task_id)
        except TaskNotFound:
            raise ApiError(404, "not_found", f"unknown task {task_id!r}") from None
        for sid in moved:  # not held by any worker: POSTRUN tears their runtime down
            dispatch(celery, Stage.POSTRUN, sid)
        return jsonify({"task_id": task_id, "status": "cancelling", "moved_to_postrun": len(moved),
                        "flagged": flagged})

    @app.get("/rollout/status")
    def pipeline_status() -> Response:
        out: dict[str, Any] = {
            "tasks": tasks.state_counts(),
            "recent_tasks": tasks.recent(20),
            "queues": queue_depths(r, stage_queues()),
            "ready": ready.snapshot(),
        }
        if request.args.get("workers", "1") not in ("0", "false", "no"):
            out["workers"] = _workers(celery)
        return jsonify(out)

    @app.get("/health")
    def health() -> Response:
        r.ping()
        return jsonify({"status": "ok"})

    @app.errorhandler(ApiError)
    def api_error(err: ApiError) -> tuple[Response, int]:
        body: dict[str, Any] = {"type": err.type, "message": err.message}
        if err.fields is not None:
            body["fields"] = err.fields
        return jsonify({"error": body}), err.status

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        return api_error(ApiError(exc.code or 500, exc.name.lower().replace(" ", "_"), exc.description or ""))

    return app


def _parse_task(raw: bytes) -> TaskRequest:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    try:
        return TaskRequest.model_validate(data)
    except ValidationError as exc:
        fields = [{"field": ".".join(str(p) for p in e["loc"]) or "(body)", "message": e["msg"]}
                  for e in exc.errors()]
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
        raise ApiError(400, "invalid_request", f"invalid TaskRequest: {summary}", fields) from None


def _workers(celery: Any) -> dict[str, Any]:
    try:
        replies = celery.control.inspect(timeout=0.5).active_queues() or {}
    except Exception as exc:  # workers being unreachable is a status, not an API failure
        return {"error": str(exc)}
    return {name: sorted(q["name"] for q in queues) for name, queues in replies.items()}


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")
