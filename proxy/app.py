"""The proxy's WSGI app: every provider API, under ``/s/<session_id>`` or keyed by the session
id as API key. Stateless apart from Redis, so any number of instances can serve any session.
Served by gunicorn with gevent workers (``infra/serve.py``): each model call is a long, idle
wait on the engine, and a greenlet per call lets one process hold hundreds of them.

Model calls whose path names their API are served before Flask sees them (``calls.py``, the hot
path); Flask serves the rest: bare base-URL calls, model listings, token counts, stored objects,
health, ``/admin/*`` (``admin.py``) and ``/metrics`` (both behind the admin token).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from flask import Flask, g, request
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from pipeline.registry import allow_plugin_modules
from pipeline.settings import Settings
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from proxy.admin import check_admin, register_admin
from proxy.calls import ModelCalls, translating
from proxy.detection import api_path, detect, error_provider, serves
from proxy.errors import NotFound, ProxyError, UnsupportedEndpoint
from proxy.gateway import Gateway
from proxy.http_io import as_proxy_error, error_answer, json_body
from proxy.http_io import json_response as _json
from proxy.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from proxy.providers import PROVIDERS, Provider, Route
from proxy.sessions import presented_key
from proxy.upstream import UpstreamTransport

METHODS = ["GET", "POST", "HEAD", "DELETE", "PUT", "PATCH"]


def create_app(settings: Settings | None = None, transport: UpstreamTransport | None = None) -> Flask:
    """The proxy app; ``transport`` replaces the HTTP client to the engine (tests: in-process)."""
    settings = settings or Settings.from_env()
    app = Flask("polar.proxy", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    allow_plugin_modules(settings.plugin_module_list)  # an engine dialect named by import path
    gw = Gateway(settings, Stores.open(connect(settings), settings), transport)
    calls = ModelCalls(gw, settings)
    admin_token = settings.secret("admin_token")
    flask_wsgi = app.wsgi_app

    def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        served = calls.wsgi(environ, start_response)
        return served if served is not None else flask_wsgi(environ, start_response)

    app.wsgi_app = wsgi_app  # type: ignore[method-assign]

    @app.route("/", defaults={"path": ""}, methods=METHODS)
    @app.route("/<path:path>", methods=METHODS)
    @app.route("/s/<key>", defaults={"path": ""}, methods=METHODS, strict_slashes=False)
    @app.route("/s/<key>/<path:path>", methods=METHODS)
    def dispatch(path: str, key: str | None = None) -> Any:
        g.provider = error_provider("/" + path, request.headers)  # until the route says whose call it is
        if request.method == "HEAD":  # Claude Code's preflight of its base URL
            return _json({"status": "ok"})
        route = detect(request.method, "/" + path, request.headers)
        body = None
        if route is None and request.method == "POST" and serves(request.method, "/" + path):
            # Only its body tells this call's API: the key is checked before a stranger's body is read.
            gw.check_key(presented_key(key, request.headers, request.args))
            body = json_body(request)
            route = detect(request.method, "/" + path, request.headers, body)
        if route is None:
            raise UnsupportedEndpoint(f"{request.method} /{path} is not served by this proxy")
        provider = g.provider = PROVIDERS[route.provider]
        if route.kind == "health":
            return _health(gw)
        key = presented_key(key, request.headers, request.args)
        if route.kind in ("models", "model"):
            gw.check_key(key)  # a session's agent lists the models; a stranger learns nothing
            return _models(gw, provider, route)
        # (check_key: a Redis that is away is waited for, as a model call's admission waits)
        if route.kind in ("stored", "delete_stored", "input_items", "cancel_stored"):
            return _json(provider.stored(route, gw.scope(gw.check_key(key), request.args)))
        if route.kind == "count_tokens":
            scope = gw.scope(gw.check_key(key))
            body = body if body is not None else json_body(request)
            with translating(provider):  # as a model call's translation answers it
                chat = provider.count_tokens_chat(body, route, **provider.context(body, scope))
            return _json(provider.count_tokens_response(gw.count_request_tokens(chat)))
        return calls.generate(request._get_current_object(), route, key, body).response()  # type: ignore[attr-defined]

    register_admin(app, gw.control, admin_token)

    @app.get("/metrics")
    def metrics() -> Response:
        check_admin(admin_token, control_surface=False)
        text = gw.metrics.render()
        if text is None:
            raise UnsupportedEndpoint("metrics are off on this proxy (POLAR_PROXY_METRICS=false)")
        return Response(text, content_type=METRICS_CONTENT_TYPE)

    # Every failure answers in the caller's API format (``g.provider``, once detected).
    @app.errorhandler(ProxyError)
    @app.errorhandler(HTTPException)
    @app.errorhandler(Exception)
    def any_error(exc: Exception) -> Response:
        err = as_proxy_error(exc, request.method, request.path, settings.max_request_bytes)
        provider: Provider = getattr(g, "provider", None) or error_provider(api_path(request.path), request.headers)
        return error_answer(provider, err, request.method, request.path).response()

    return app


# What an engine's model card may say to an agent: vLLM's and SGLang's ``root`` is the model's
# path on the engine host (and ``permission`` its internals), nothing a harness reads.
PRIVATE_CARD_FIELDS = ("root", "permission")


def _models(gw: Gateway, provider: Provider, route: Route) -> Response:
    cards = [{k: v for k, v in m.items() if k not in PRIVATE_CARD_FIELDS}
             for m in gw.pool.get_json("/v1/models").get("data") or [] if isinstance(m, dict) and m.get("id")]
    if route.kind == "models":
        return _json(provider.models(cards))
    for card in cards:
        if card["id"] == route.model:
            return _json(provider.model(card))
    err = NotFound(f"model {route.model!r} not found")
    err.code = "model_not_found"
    raise err


def _health(gw: Gateway) -> Response:
    """200 while the proxy can serve: its Redis answers and an engine accepts connections."""
    checks = {"redis": gw.redis_ok(), "upstream": gw.pool.reachable()}
    return _json({"status": "ok" if all(checks.values()) else "unavailable", **checks},
                 200 if all(checks.values()) else 503)
