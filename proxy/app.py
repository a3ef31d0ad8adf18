"""The proxy's Flask app: session gate -> normalise -> upstream -> capture -> answer.

Stateless apart from Redis, so any number of instances can serve any session. Served by
gunicorn with gevent workers (``infra/serve.py``): each upstream call is a long, idle wait, and
a greenlet per call lets one process hold hundreds of them.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from pipeline import keys
from pipeline.redis_conn import connect
from pipeline.settings import Settings
from proxy import upstream
from proxy.capture import build_error_record, build_record
from proxy.errors import BadRequest, PayloadTooLarge, ProxyError, UnsupportedEndpoint, UpstreamError
from proxy.providers import openai_chat
from proxy.sessions import SessionGate, session_id_from
from proxy.sse import data_stream

log = logging.getLogger("polar.proxy")
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    app = Flask("polar.proxy")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    r = connect(settings)
    gate = SessionGate(r, settings.result_ttl_seconds)
    engine = upstream.create(settings.upstream_engine)
    client = upstream.UpstreamClient(settings.upstream_url, settings.upstream_timeout_seconds)

    def chat_completions(sid: str | None = None) -> Response:
        started = time.time()
        session_id = session_id_from(sid, request.headers, request.args)
        seq = gate.begin(session_id)
        assert session_id is not None
        body: Any = None
        try:
            body = _json_body()
            normalized = openai_chat.normalize(body)
            if settings.upstream_model:
                normalized["model"] = settings.upstream_model
            _, top = openai_chat.wants_logprobs(body)
            t0 = time.perf_counter()
            raw = client.post_json("/v1/chat/completions", engine.prepare(normalized, top_logprobs=top))
            latency_ms = (time.perf_counter() - t0) * 1000.0
            try:
                captured = engine.extract(raw)
            except upstream.CaptureError as exc:
                raise UpstreamError(str(exc)) from None
            response = openai_chat.to_response(raw, body)
            record = build_record(
                session_id=session_id, seq=seq, provider=openai_chat.NAME, stream=bool(body.get("stream")),
                captured=captured, original=body, normalized=normalized, upstream=raw,
                response_message=openai_chat.assistant_message(raw), started_at=started,
                finished_at=time.time(), latency_ms=latency_ms, upstream_url=client.base_url,
                policy_version=settings.policy_version,
            )
        except ProxyError as err:
            gate.end(session_id, keys.session_errors(session_id), build_error_record(
                session_id=session_id, provider=openai_chat.NAME, status=err.status,
                error_type=type(err).__name__, message=err.message,
                original=body if isinstance(body, dict) else {}, started_at=started, finished_at=time.time()))
            raise
        except BaseException:
            gate.end(session_id)
            raise
        gate.end(session_id, keys.session_completions(session_id), record)
        if body.get("stream"):
            chunks = openai_chat.stream_chunks(response, include_usage=openai_chat.include_usage_in_stream(body))
            return Response(data_stream(chunks, done=True), mimetype="text/event-stream",
                            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return jsonify(response)

    for path in CHAT_PATHS:
        app.add_url_rule(path, f"chat{path}", chat_completions, methods=["POST"])
        app.add_url_rule(f"/s/<sid>{path}", f"chat-s{path}", chat_completions, methods=["POST"])

    @app.get("/v1/models")
    @app.get("/s/<sid>/v1/models")
    def models(sid: str | None = None) -> Response:
        return jsonify(client.get_json("/v1/models"))

    @app.route("/", methods=["GET", "HEAD"])
    @app.route("/s/<sid>/", methods=["GET", "HEAD"])
    @app.get("/health")
    def health(sid: str | None = None) -> Response:
        return jsonify({"status": "ok"})

    @app.errorhandler(ProxyError)
    def proxy_error(err: ProxyError) -> tuple[Response, int]:
        if err.status >= 500:
            log.warning("%s %s: %s", request.method, request.path, err.message)
        return jsonify(openai_chat.error_body(err)), err.status

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        if isinstance(exc, RequestEntityTooLarge):
            return proxy_error(PayloadTooLarge(f"request body exceeds {settings.max_request_bytes} bytes"))
        if exc.code in (404, 405):
            return proxy_error(UnsupportedEndpoint(f"{request.method} {request.path} is not served by this proxy"))
        err = BadRequest(exc.description or str(exc))
        err.status = exc.code or 400
        return proxy_error(err)

    return app


def _json_body() -> Any:
    raw = request.get_data(cache=False)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from None
