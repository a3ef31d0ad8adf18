"""The rollout API (Flask): submit, poll, cancel tasks; inspect the pipeline.

Every route but ``/health`` and ``/openapi.json`` needs ``Authorization: Bearer <api token>``
when ``POLAR_API_TOKEN`` is set (``polar up`` always sets one); the trajectory viewer's page and
login are open, and its GET data routes also take its login cookie (``pipeline/api/viewer``).
Errors are JSON ``{"error": {"type", "message", "fields"?}}``: a payload that fails validation or a limit is a
400 naming each offending field, and nothing is created for it; Redis being away is a 503 (the
request can be retried), never a 500.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import redis
from flask import Flask, Response, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from pipeline.api import viewer
from pipeline.api.configs import config_problems
from pipeline.api.errors import ApiError, count_arg
from pipeline.api.openapi import openapi_document
from pipeline.api.sources import SessionSources
from pipeline.callback_policy import refusal
from pipeline.celery_app import make_app, stage_queues
from pipeline.codec import DuplicateKey, InexactInteger, check_unambiguous, nesting_depth_exceeds
from pipeline.credentials import same_secret
from pipeline.dispatch import Dispatcher
from pipeline.errors import TaskExists, TaskNotFound, unreadable_body
from pipeline.loopback import is_loopback_name
from pipeline.registry import allow_plugin_modules, plugin_allowed
from pipeline.schemas import RuntimeSpec, TaskRequest
from pipeline.settings import Settings
from pipeline.status import Stage
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from pipeline.stores.queues import queue_depths
from pipeline.upload_policy import upload_problem

log = logging.getLogger("polar.api")
OPEN_PATHS = ("/health", "/openapi.json")


def create_app(settings: Settings | None = None, engine_transport: httpx.BaseTransport | None = None) -> Flask:
    """``engine_transport`` replaces the HTTP client to the engine the viewer asks for token
    text (tests: in-process)."""
    settings = settings or Settings.from_env()
    app = Flask("polar.api", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_submit_bytes
    allow_plugin_modules(settings.plugin_module_list)
    r = connect(settings, mode="impatient")  # a request waits seconds for Redis, then it is a 503
    quick = connect(settings, mode="quick")
    stores = Stores.open(r, settings)
    tasks, ready = stores.tasks, stores.ready
    celery = make_app(settings)
    dispatcher = Dispatcher(celery, stores.stage_runs)
    token = settings.secret("api_token")

    @app.before_request
    def authenticate() -> None:
        refuse_cross_site()
        if token is None:
            refuse_foreign_host()
        if token is None or request.path in OPEN_PATHS or viewer.is_open(request.method, request.path):
            return
        if viewer.cookie_grants(request, token):  # the viewer's login cookie: its GET data routes only
            return
        auth = request.headers.get("Authorization") or ""
        if not (auth[:7].lower() == "bearer " and same_secret(auth[7:].strip(), token)):
            raise ApiError(401, "unauthorized", "this API needs 'Authorization: Bearer <api token>' "
                                                "(POLAR_API_TOKEN; `polar up` writes it to $POLAR_HOME/tokens.json)")

    @app.after_request
    def no_sniffing(resp: Response) -> Response:
        # Every answer may quote a submitter's or an agent's text (an error, a task id): never read
        # as anything but its declared type (the viewer's routes add their CSP on top).
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    @app.post("/rollout/task/submit")
    def submit() -> Response:
        task = _parse_task(_body(), settings)
        try:
            specs = tasks.create(task)  # its sessions' INIT messages queued in the same transaction
        except TaskExists:
            raise ApiError(409, "conflict", f"task {task.task_id!r} already exists") from None
        return _json({"task_id": task.task_id, "status": "pending",
                      "session_ids": [s.session_id for s in specs]})

    @app.get("/rollout/task/<path:task_id>")
    def get_task(task_id: str) -> Response:
        include = request.args.get("results", "1") not in ("0", "false", "no")
        try:
            status = tasks.status(task_id, include_results=include)
        except TaskNotFound:
            raise ApiError(404, "not_found", f"unknown task {task_id!r}") from None
        return _json(status.model_dump(mode="json"))

    @app.delete("/rollout/task/<path:task_id>")
    def cancel_task(task_id: str) -> Response:
        try:
            moved, flagged = tasks.cancel(task_id)
        except TaskNotFound:
            raise ApiError(404, "not_found", f"unknown task {task_id!r}") from None
        for sid in moved:  # not held by any worker: POSTRUN tears their runtime down
            dispatcher.send(Stage.POSTRUN, sid)
        state = tasks.state(task_id)  # a task that had finished keeps its state: said as it is
        return _json({"task_id": task_id, "status": state.value if state else "cancelling",
                      "moved_to_postrun": len(moved), "flagged": flagged})

    sources = SessionSources(stores, settings.results_path)
    viewer.register(app, settings, stores, sources, token, engine_transport)

    @app.get("/rollout/session/<session_id>")
    def get_session(session_id: str) -> Response:
        """The session's terminal result: from Redis while it keeps it, else its results file."""
        found = sources.result(session_id)
        if found is None:
            raise _no_result(session_id)
        result, source = found
        return _json(result.model_dump(mode="json"), headers={"X-Polar-Source": source})

    @app.get("/rollout/session/<session_id>/completions")
    def get_completions(session_id: str) -> Response:
        """The session's raw completion records (and failed calls): from Redis while it keeps
        them (an hour after publishing), else from its results file."""
        found = sources.completions(session_id)
        if found is None:
            raise _no_result(session_id)
        body, source = found
        return _json(body, headers={"X-Polar-Source": source})

    @app.get("/rollout/results/dead-letters")
    def dead_letters() -> Response:
        """Results-stream entries a consumer group gave up on, newest first (without blobs)."""
        count = count_arg(request.args, "count", 100, 1000)
        return _json({"stream": stores.results.stats(), "entries": stores.results.dead_letters(count)})

    @app.get("/rollout/status")
    def pipeline_status() -> Response:
        out: dict[str, Any] = {
            "tasks": tasks.state_counts(),
            "recent_tasks": tasks.recent(20),
            "queues": queue_depths(r, stage_queues()),
            "ready": ready.snapshot(),
            "results_stream": stores.results.stats(),
            # the proxies' weight-sync pause (shared through Redis): who holds it, until when
            "proxy": stores.proxy_control.read().view(),
        }
        if request.args.get("workers", "1") not in ("0", "false", "no"):
            out["workers"] = _workers(celery)
        return _json(out)

    @app.get("/metrics")
    def metrics() -> Response:
        from pipeline.api.metrics import render
        from pipeline.stores import pipeline_gauges

        body = render(lambda: pipeline_gauges.snapshot(r, stores))
        return Response(body, mimetype="text/plain; version=0.0.4")

    @app.get("/health")
    def health() -> Response:
        try:
            quick.ping()
        except redis.RedisError as exc:
            return _json({"status": "unavailable", "redis": f"{type(exc).__name__}"}, 503)
        return _json({"status": "ok"})

    @app.get("/openapi.json")
    def openapi() -> Response:
        return _json(openapi_document())

    @app.errorhandler(ApiError)
    def api_error(err: ApiError) -> Response:
        body: dict[str, Any] = {"type": err.type, "message": err.message}
        if err.fields is not None:
            body["fields"] = err.fields
        return _json({"error": body}, err.status)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        if isinstance(exc, RequestEntityTooLarge):
            limit = request.max_content_length or settings.max_submit_bytes  # the route's own (a login's is 4 kB)
            return api_error(ApiError(413, "request_too_large", f"request body exceeds {limit} bytes"))
        unreadable = unreadable_body(exc)
        if unreadable:
            status, message = unreadable
            return api_error(ApiError(status, "request_timeout" if status == 408 else "bad_request", message))
        return api_error(ApiError(exc.code or 500, exc.name.lower().replace(" ", "_"), exc.description or ""))

    @app.errorhandler(redis.RedisError)
    def redis_down(exc: redis.RedisError) -> Response:
        log.warning("%s %r: Redis unavailable: %s", request.method, request.path, exc)  # (%r: a path's %0a forges no line)
        return api_error(ApiError(503, "unavailable", "the pipeline's Redis is unavailable; retry shortly"))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error on %s %r", request.method, request.path)
        return api_error(ApiError(500, "internal_error", f"internal error: {type(exc).__name__}"))

    return app


def refuse_cross_site() -> None:
    """A browser's cross-site request that would change something is refused, token or not.

    Submit reads its body as JSON whatever its Content-Type, so another site's page could POST a
    task (a "simple" request: text/plain, a form, a Blob; no CORS preflight) to an API on the
    user's machine; without POLAR_API_TOKEN (allowed on loopback) it ran, custom_shell and all.
    Browsers say where a request comes from (Sec-Fetch-Site, Origin); non-browser clients send
    neither, and the viewer's own page is same-origin."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if site is not None:
        cross = site not in ("same-origin", "none")
    else:
        cross = origin is not None and (origin == "null" or urlsplit(origin).netloc != request.host)
    if cross:
        raise ApiError(403, "forbidden", "cross-site requests from a browser page may not change anything here")


def refuse_foreign_host() -> None:
    """Without POLAR_API_TOKEN (allowed on loopback only) a request must name a loopback host:
    a browser page whose own name was re-pointed at 127.0.0.1 (DNS rebinding) is same-origin to
    itself, and would otherwise read results and submit tasks, custom_shell and all."""
    name = urlsplit(f"//{request.host}").hostname or ""
    if not is_loopback_name(name):
        raise ApiError(403, "forbidden", f"this API has no token, so it answers only to a loopback host name, "
                                         f"not {name[:80]!r}: set POLAR_API_TOKEN to serve other names")


def _no_result(session_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no result for session {session_id!r} (not finished, or past "
                                      "POLAR_RESULT_TTL_SECONDS and POLAR_RESULTS_KEEP_DAYS)")


def _body() -> bytes:
    """The request's body; werkzeug cuts one sent chunked (no Content-Length) at the limit without
    an error, so a body that reached the limit with more to come is refused here."""
    raw = request.get_data(cache=False)
    limit = request.max_content_length
    if limit is not None and len(raw) >= limit and request.content_length is None:
        stream = request.environ.get("wsgi.input")
        if stream is not None and stream.read(1):
            raise RequestEntityTooLarge()
    return raw


def _parse_task(raw: bytes, settings: Settings) -> TaskRequest:
    try:
        data = orjson.loads(raw)  # strict: no NaN/Infinity, no lone surrogates, valid UTF-8
    except (orjson.JSONDecodeError, RecursionError) as exc:
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    if nesting_depth_exceeds(data, settings.max_json_depth):
        raise ApiError(400, "invalid_request", f"request body nests deeper than {settings.max_json_depth} levels")
    try:
        check_unambiguous(raw)
    except DuplicateKey as dup:
        raise ApiError(400, "invalid_request", f"the key {str(dup.args[0])[:80]!r} appears twice in one object: "
                       "which value was meant is not known") from None
    except InexactInteger as big:
        raise ApiError(400, "invalid_request", f"the integer {str(big.args[0])[:40]} is beyond the 64-bit range a "
                       "JSON number keeps here (it would be rounded): send it as a string") from None
    try:
        task = TaskRequest.model_validate(data)
        if task.runtime.backend is None:  # the operator's default, checked like a named one
            runtime = RuntimeSpec.model_validate({**task.runtime.model_dump(),
                                                  "backend": settings.default_runtime_backend})
            task = task.model_copy(update={"runtime": runtime})
    except ValidationError as exc:
        fields = [{"field": ".".join(str(p) for p in e["loc"]) or "(body)", "message": e["msg"]}
                  for e in exc.errors()]
        raise _invalid(fields) from None
    problems = (_limits(task, settings) + _plugins(task) + _uploads(task, settings) + _backend_allowed(task, settings)
                + _network_allowed(task, settings) + config_problems(task))
    why = refusal(task.callback_url, settings) if task.callback_url else None
    if why:
        problems.append({"field": "callback_url", "message": why})
    if problems:
        raise _invalid(problems)
    return task


def _backend_allowed(task: TaskRequest, settings: Settings) -> list[dict[str, Any]]:
    if settings.allowed_runtime_backends is None:
        return []
    allowed = _listed(settings.allowed_runtime_backends)
    if task.runtime.backend in allowed:
        return []
    return [{"field": "runtime.backend", "message": f"runtime backend {task.runtime.backend!r} is not allowed on this "
             f"stack; it allows {', '.join(allowed) or 'none'} (POLAR_ALLOWED_RUNTIME_BACKENDS)"}]


def _listed(setting: str) -> list[str]:
    """A comma-separated allow-list setting's names."""
    return [name.strip() for name in setting.split(",") if name.strip()]


# A network by name (none, host, bridge, a docker network): not an engine's mode with an argument
# (container:<name>, ns:<path>, ...), whatever its case or spacing.
PLAIN_NETWORK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _network_allowed(task: TaskRequest, settings: Settings) -> list[dict[str, Any]]:
    network = task.runtime.effective_network()
    if settings.allowed_runtime_networks is None:
        if PLAIN_NETWORK.fullmatch(network):
            return []
        why = ("is not a network's name: a mode like container:<name> or ns:<path> joins another container's "
               "network (another session's); list it in POLAR_ALLOWED_RUNTIME_NETWORKS to allow it")
    else:
        allowed = _listed(settings.allowed_runtime_networks)
        if network == "none" or network in allowed:
            return []
        why = f"is not allowed on this stack; it allows none, {', '.join(allowed) or 'nothing else'} " \
              "(POLAR_ALLOWED_RUNTIME_NETWORKS)"
    field = "runtime.network" if task.runtime.network else "runtime.allow_internet"
    return [{"field": field, "message": f"the session's network {network!r} {why}"}]


def _limits(task: TaskRequest, settings: Settings) -> list[dict[str, Any]]:
    size = len(task.instruction.encode())
    if size > settings.max_instruction_bytes:
        return [{"field": "instruction", "message": f"instruction is {size} bytes; the limit is "
                                                    f"{settings.max_instruction_bytes} (POLAR_MAX_INSTRUCTION_BYTES)"}]
    # Every session keeps its own copy of the spec (instruction, metadata, env, commands, configs).
    spec = len(task.model_dump_json(exclude_none=True))
    if spec * task.num_samples > settings.max_task_bytes:
        fields = task.model_dump(mode="json", exclude_none=True)
        largest = max(fields, key=lambda k: len(json.dumps(fields[k])))
        return [{"field": "num_samples", "message": f"{task.num_samples} samples x a {spec}-byte task spec (largest "
                                                    f"field: {largest}) exceed {settings.max_task_bytes} bytes "
                                                    "(POLAR_MAX_TASK_BYTES): every session keeps its own copy"}]
    return []


def _uploads(task: TaskRequest, settings: Settings) -> list[dict[str, Any]]:
    roots, excluded = settings.upload_root_list, settings.upload_excluded
    out = []
    for key in ("prepare", "eval_prepare"):
        for i, action in enumerate(getattr(task.runtime, key) or []):
            why = upload_problem(action.src, roots, excluded) if action.type != "exec" and action.src else None
            if why:
                out.append({"field": f"runtime.{key}.{i}.src", "message": f"{action.src!r} {why}"})
    return out


def _plugins(task: TaskRequest) -> list[dict[str, Any]]:
    named = {"runtime.backend": task.runtime.backend, "agent.harness": task.agent.harness,
             "builder.strategy": task.builder.strategy, "evaluator.strategy": task.evaluator.strategy}
    return [{"field": f, "message": f"plug-in {v!r} is not allowed: its module is not in POLAR_PLUGIN_MODULES"}
            for f, v in named.items() if v and ":" in v and not plugin_allowed(v)]


def _invalid(fields: list[dict[str, Any]]) -> ApiError:
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    return ApiError(400, "invalid_request", f"invalid TaskRequest: {summary}", fields)


def _workers(celery: Any) -> dict[str, Any]:
    try:
        replies = celery.control.inspect(timeout=0.5).active_queues() or {}
    except Exception as exc:  # workers being unreachable is a status, not an API failure
        return {"error": str(exc)}
    return {name: sorted(q["name"] for q in queues) for name, queues in replies.items()}


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json", headers=headers)
