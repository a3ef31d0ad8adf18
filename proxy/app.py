"""The proxy's Flask app: every provider API, under ``/s/<session_id>`` or keyed by the session
id as API key. Stateless apart from Redis, so any number of instances can serve any session.
Served by gunicorn with gevent workers (``infra/serve.py``): each model call is a long, idle
wait on the engine, and a greenlet per call lets one process hold hundreds of them.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable, Iterable

import orjson
import redis
from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from pipeline.codec import nesting_depth_exceeds
from pipeline.credentials import same_secret, session_of_key
from pipeline.registry import allow_plugin_modules
from pipeline.settings import Settings
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from proxy.detection import detect
from proxy.errors import (
    BadRequest,
    NotFound,
    PayloadTooLarge,
    ProxyError,
    Unauthorized,
    Unavailable,
    UnsupportedEndpoint,
    UpstreamError,
)
from proxy.gateway import Call, Gateway
from proxy.hot_redis import RedisReplyError as HotRedisError
from proxy.providers import DEFAULT, PROVIDERS, Provider, Route
from proxy.sessions import presented_key
from proxy.upstream import UpstreamTransport

log = logging.getLogger("polar.proxy")
try:
    from gevent import monkey as _monkey

    _GEVENT = _monkey.is_module_patched("threading")
except ImportError:  # pragma: no cover - gevent is a dependency; kept for clarity
    _GEVENT = False
METHODS = ["GET", "POST", "HEAD", "DELETE", "PUT", "PATCH"]
POLICY_VERSION = re.compile(r"^[!-~]{1,128}$")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def create_app(settings: Settings | None = None, transport: UpstreamTransport | None = None) -> Flask:
    """The proxy app; ``transport`` replaces the HTTP client to the engine (tests: in-process)."""
    settings = settings or Settings.from_env()
    app = Flask("polar.proxy", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    allow_plugin_modules(settings.plugin_module_list)  # an engine dialect named by import path
    gw = Gateway(settings, Stores.open(connect(settings), settings), transport)
    admin_token = settings.secret("admin_token")

    @app.route("/", defaults={"path": ""}, methods=METHODS)
    @app.route("/<path:path>", methods=METHODS)
    @app.route("/s/<key>", defaults={"path": ""}, methods=METHODS, strict_slashes=False)
    @app.route("/s/<key>/<path:path>", methods=METHODS)
    def dispatch(path: str, key: str | None = None) -> Any:
        g.provider = PROVIDERS[DEFAULT]
        if request.method == "HEAD":  # Claude Code's preflight of its base URL
            return _json({"status": "ok"})
        route = detect(request.method, "/" + path, request.headers)
        body = None
        if route is None and request.method == "POST":
            body = _json_body()
            route = detect(request.method, "/" + path, request.headers, body)
        if route is None:
            raise UnsupportedEndpoint(f"{request.method} /{path} is not served by this proxy")
        provider = g.provider = PROVIDERS[route.provider]
        if route.kind == "health":
            return _health(gw)
        if route.kind in ("models", "model"):
            return _models(gw, provider, route)
        key = presented_key(key, request.headers, request.args)
        if route.kind == "stored":
            return _json(provider.stored(route, gw.scope(gw.gate.check(key))))
        if route.kind == "count_tokens":
            gw.gate.check(key)
            chat = provider.count_tokens_chat(body if body is not None else _json_body(), route)
            return _json(provider.count_tokens_response(gw.count_tokens(chat)))
        return _generate(gw, settings, route, key, body)

    @app.post("/admin/pause")
    def pause() -> Response:
        _admin(admin_token)
        try:
            timeout = float(request.args.get("timeout_seconds", 600))
        except ValueError:
            raise BadRequest("timeout_seconds must be a number", param="timeout_seconds") from None
        return _json(gw.control.pause(min(max(timeout, 0.0), 3600.0)))

    @app.post("/admin/resume")
    def resume() -> Response:
        _admin(admin_token)
        data = request.get_json(silent=True) or {}
        version = data.get("policy_version", request.args.get("policy_version")) if isinstance(data, dict) else None
        if version is not None and not (isinstance(version, (str, int)) and POLICY_VERSION.match(str(version))):
            raise BadRequest("policy_version must be 1-128 printable characters", param="policy_version")
        return _json(gw.control.resume(None if version is None else str(version)))

    @app.get("/admin/status")
    def admin_status() -> Response:
        _admin(admin_token)
        return _json(gw.control.status())

    @app.errorhandler(ProxyError)
    def proxy_error(err: ProxyError) -> Response:
        if err.status >= 500:
            log.warning("%s %s: %s", request.method, loggable(request.path), err.message)
        provider: Provider = getattr(g, "provider", PROVIDERS[DEFAULT])
        return _json(provider.error(err), err.status)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        if isinstance(exc, RequestEntityTooLarge):
            return proxy_error(PayloadTooLarge(f"request body exceeds {settings.max_request_bytes} bytes"))
        err = BadRequest(exc.description or str(exc))
        err.status = exc.code or 400
        return proxy_error(err)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        if isinstance(exc, (redis.RedisError, HotRedisError, ConnectionError)):
            return proxy_error(Unavailable("the proxy's Redis is unavailable; retry shortly"))
        log.exception("unexpected error on %s %s", request.method, loggable(request.path))
        return proxy_error(UpstreamError(f"internal proxy error: {type(exc).__name__}"))

    return app


def _generate(gw: Gateway, settings: Settings, route: Route, key: str | None, body: Any) -> Response:
    provider: Provider = g.provider
    lease, seq, version = gw.admit(key)
    scope = gw.scope(lease.session_id, request.args)
    started = time.time()
    try:
        body = body if body is not None else _json_body()
        parsed = _parse(provider, body, route, provider.context(body, scope))
    except ProxyError as err:
        gw.fail(lease, provider.name, err, body, started)
        raise
    except BaseException:
        gw.abandon(lease)
        raise
    call = Call(lease, seq, version, provider, parsed, body, started, scope)
    if not parsed.stream:
        _, response = gw.complete(call)
        return _json(response)
    return _stream(gw, call, settings.stream_keepalive_seconds)


def _parse(provider: Provider, body: Any, route: Route, context: dict[str, Any]) -> Any:
    try:
        return provider.parse(body, path_model=route.model, stream=route.stream, **context)
    except ProxyError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        # A shape the translation did not anticipate is still the client's malformed input:
        # answer 400 in its format (and log it, it may deserve a precise message).
        log.warning("unexpected %s request shape: %r", provider.name, exc)
        raise BadRequest(f"invalid {provider.name} request: {type(exc).__name__}: {exc}") from None


def _stream(gw: Gateway, call: Call, keepalive: float) -> Response:
    writer = call.provider.stream(call.parsed)
    job = _Job(gw.complete, call)
    if job.wait(keepalive):  # fast: a real HTTP error status is still possible
        turn, response = job.result()
        # One buffer: the server writes each item of a body as its own chunk and syscall.
        return _streamed([b"".join(writer.head(turn) + writer.body(response, turn))], writer.content_type)

    def events() -> Iterable[bytes]:
        yield from writer.head()
        while not job.wait(keepalive):
            ping = writer.keepalive()
            if ping:
                yield ping
        try:
            turn, response = job.result()
        except ProxyError as err:  # the stream has begun: the error becomes an event
            yield from writer.error(err)
            return
        yield from writer.body(response, turn)

    return _streamed(events(), writer.content_type)


def _streamed(body: Iterable[bytes], content_type: str) -> Response:
    return Response(body, mimetype=content_type, headers=SSE_HEADERS)


class _Job:
    """The engine call runs beside the response so a slow answer can be streamed with keepalives:
    a bare greenlet under gunicorn's gevent workers (cheap), a thread anywhere else."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        if _GEVENT:
            import gevent
            import gevent.event

            self._done = gevent.event.Event()
            gevent.spawn(self._run, fn, *args)
        else:
            self._done = threading.Event()
            threading.Thread(target=self._run, args=(fn, *args), daemon=True).start()

    def _run(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self._value = fn(*args)
        except ProxyError as err:
            self._error = err
        except BaseException as exc:  # noqa: BLE001 - reported to the client as an upstream error
            log.exception("model call failed")
            self._error = UpstreamError(f"internal proxy error: {type(exc).__name__}")
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        return bool(self._done.wait(timeout))

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def _models(gw: Gateway, provider: Provider, route: Route) -> Response:
    cards = [m for m in gw.pool.get_json("/v1/models").get("data") or [] if isinstance(m, dict) and m.get("id")]
    if route.kind == "models":
        return _json(provider.models(cards))
    for card in cards:
        if card["id"] == route.model:
            return _json(provider.model(card))
    err = NotFound(f"model {route.model!r} not found")
    err.code = "model_not_found"
    raise err


def _admin(token: str | None) -> None:
    if token is not None and not same_secret(request.headers.get("x-polar-admin-token"), token):
        raise Unauthorized("the admin endpoints need the x-polar-admin-token header (POLAR_ADMIN_TOKEN)")


def _health(gw: Gateway) -> Response:
    """200 while the proxy can serve: its Redis answers and an engine accepts connections."""
    checks = {"redis": gw.redis_ok(), "upstream": gw.pool.reachable()}
    return _json({"status": "ok" if all(checks.values()) else "unavailable", **checks},
                 200 if all(checks.values()) else 503)


def loggable(path: str) -> str:
    """A request path fit for a log: a session key in it becomes its public session id."""
    if not path.startswith("/s/"):
        return path
    key, sep, rest = path[3:].partition("/")
    return f"/s/{session_of_key(key) or '<key>'}{sep}{rest}"


MAX_JSON_DEPTH = 128  # harness requests nest tool schemas deeply, but never this deep


def _json_body() -> Any:
    raw = request.get_data(cache=True)
    try:
        # strict JSON: valid UTF-8 without lone surrogates, no NaN/Infinity, 64-bit integers
        body = orjson.loads(raw)
    except (orjson.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from None
    if nesting_depth_exceeds(body, MAX_JSON_DEPTH):
        raise BadRequest(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    return body


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")
