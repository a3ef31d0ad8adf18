"""Model calls, the proxy's hot path: the request read, the call admitted, translated, sampled
and recorded by the gateway, the answer (or the error, in the caller's own API format) written.

A POST whose path names its API (``/v1/chat/completions``, ``/v1/messages``, ``/v1/responses``,
Gemini's ``:generateContent``, under ``/s/<key>`` or not) is served straight from WSGI
(``ModelCalls.wsgi``): Flask's routing, contexts and response finalising cost more per call than
the rest of the proxy's own work on a 10-message request (bench/proxy_profile.py). Everything
else, including a bare base-URL POST whose API only its body tells, goes through the Flask app
(``app.py``), which hands model calls back to ``ModelCalls.generate``. Reading bodies, the
``Answer`` and the error answers (shared with the Flask routes) are in ``http_io``.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from werkzeug.datastructures import EnvironHeaders
from werkzeug.wrappers import Request

from pipeline.codec import json_bytes
from pipeline.credentials import session_of_key
from pipeline.settings import Settings
from proxy.client_watch import client_socket
from proxy.control import PARKED
from proxy.detection import BY_HEADERS, detect, path_route
from proxy.errors import BadRequest, ProxyError, UpstreamError
from proxy.gateway import Call, Failed, Gateway
from proxy.http_io import (
    JSON,
    Answer,
    _small_plain_body,
    as_proxy_error,
    body_bytes,
    error_answer,
    json_of,
    request_id,
    request_id_headers,
)
from proxy.providers import PROVIDERS, Parsed, Provider, Route, Turn
from proxy.sessions import presented_key

log = logging.getLogger("polar.proxy")
try:
    import gevent
    import gevent.event
    from gevent import monkey as _monkey

    _GEVENT = _monkey.is_module_patched("threading")
except ImportError:  # pragma: no cover - gevent is a dependency; kept for clarity
    _GEVENT = False
_ROUTES_KEPT = 256
SSE_HEADERS = [("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")]


class ModelCalls:
    def __init__(self, gw: Gateway, settings: Settings) -> None:
        self.gw = gw
        self.metrics = gw.metrics
        self.keepalive = settings.stream_keepalive_seconds
        self.max_request_bytes = settings.max_request_bytes
        self.watch_clients = settings.abort_on_client_close
        # The routes of the paths only one API serves (the path decides: no headers read), kept
        # per path; bounded, as Gemini's paths name any model a client makes up.
        self._routes: dict[str, Route] = {}

    def wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes] | None:
        """Serve a model call whose path names its API; None for any other request."""
        if environ.get("REQUEST_METHOD") != "POST":
            return None
        path = environ.get("PATH_INFO") or "/"
        key = None
        if path.startswith("/s/"):
            key, _, rest = path[3:].partition("/")
            if not key:
                return None
            path = "/" + rest
        route = self._routes.get(path)
        if route is None:
            route = path_route("POST", path)
            if route is BY_HEADERS:
                route = detect("POST", path, EnvironHeaders(environ))
            elif route is not None and len(self._routes) < _ROUTES_KEPT:
                self._routes[path] = route
        if route is None or route.kind != "generate":
            return None
        req = Request(environ, populate_request=False)  # no environ <-> request cycle left for the GC
        req.max_content_length = self.max_request_bytes
        return self.generate(req, route, key, None).wsgi(start_response)

    def generate(self, req: Request, route: Route, key: str | None, body: Any) -> Answer:
        """One model call (``body``: already parsed, or None), answered in its provider's format."""
        provider = PROVIDERS[route.provider]
        received = time.perf_counter()
        admitted: list[str] = []  # the call's request id, once admitted
        try:
            response, answered = self._generate(req, provider, route, key, body, received, admitted)
        except Exception as exc:
            err = as_proxy_error(exc, req.method, req.path, self.max_request_bytes)
            self.metrics.failed(provider.name, type(err).__name__)
            self.metrics.answered(provider.name, err.status)
            if admitted:
                err.request_id = admitted[0]
            return error_answer(provider, err, req.method, req.path)
        if answered:
            self.metrics.answered(provider.name, 200)
        return response

    def _generate(self, req: Request, provider: Provider, route: Route, key: str | None, body: Any,
                  received: float, admitted: list[str]) -> tuple[Answer, bool]:
        gw = self.gw
        # (a key in the path decides: the headers and query are not parsed for it)
        presented = key or presented_key(None, req.headers, req.args)
        checked = None  # the key's session, once checked ahead of the admission
        if body is None and not _small_plain_body(req):
            # Read only once the key is known good: a stranger's large (or compressed) body is
            # never read or parsed, while a small one is parsed during the admission's round trip.
            checked = gw.check_key(presented)
        raw: bytes | None = None
        warm: dict[str, Any] | None = None
        early: ProxyError | None = None
        try:
            if provider.prewarm_hint is not None and body is None and session_of_key(presented):
                raw = body_bytes(req)
                if provider.prewarm_hint.search(raw):  # rare: parsed before the admission
                    body = json_of(raw)
            if body is not None:
                with translating(provider):
                    warm = provider.prewarm_chat(body)
        except ProxyError as err:  # answered once the admission says the call is no refused one
            early = err
        if warm is not None:
            return self._prewarm(provider, checked or gw.check_key(presented), body, warm), True
        # The admission's round trip runs while the body is parsed (and translated, where that
        # reads no per-session state); its verdict is read before anything acts on the request.
        admission = gw.begin_admit(presented)
        # No query string: an empty one, without werkzeug parsing it.
        scope = gw.scope(admission.lease.session_id, req.args if req.environ.get("QUERY_STRING") else {})
        parsed = None
        try:
            if early is None:
                if body is None:
                    raw = raw if raw is not None else body_bytes(req)
                    body = json_of(raw)
                if not provider.stateful:
                    parsed = _parse(provider, body, route, provider.context(body, scope))
        except ProxyError as err:
            early = err
        except BaseException:
            gw.cancel_admit(admission)
            raise
        # A stream that finds inference paused is opened and kept alive while it waits (``_stream``).
        lease, seq, version, token_in = gw.admitted(admission, park=_streamed(parsed, body),
                                                    failed=Failed(provider.name, body))
        parked = version == PARKED
        started = time.time()
        admitted.append(request_id(lease.session_id, seq))
        try:
            if early is not None:
                raise early
            if parsed is None:
                parsed = _parse(provider, body, route, provider.context(body, scope))
        except ProxyError as err:
            gw.fail(lease, seq, provider.name, err, body, started)
            raise
        except BaseException:
            gw.abandon(lease)
            raise
        call = Call(lease, seq, None if parked else version, provider, parsed, body, started, scope, received,
                    token_in, raw, client_socket(req.environ) if self.watch_clients else None, presented)
        if not parsed.stream:
            if parked:  # (its body said stream, its parse did not: it waits here, with no stream to keep)
                gw.unpark(call)
            _, _, answer = gw.complete(call, _json_answer)
            return Answer(200, JSON, answer, request_id_headers(admitted[0])), True
        return self._stream(call, admitted[0], (lambda: gw.unpark(call)) if parked else None)

    def _prewarm(self, provider: Provider, sid: str, body: dict[str, Any], chat: dict[str, Any]) -> Answer:
        """A cache pre-warm of session ``sid`` (its key checked), answered with its prompt's count;
        nothing is sampled, admitted or recorded (a session's model calls stay the sampled ones)."""
        count = self.gw.count_request_tokens(chat, affinity=sid)
        return Answer(200, JSON, json_bytes(provider.prewarm_response(body, count)))

    def _stream(self, call: Call, rid: str, unpark: Callable[[], None] | None = None) -> tuple[Answer, bool]:
        """The answer as its API's event stream: in one write when the engine answers within the
        keepalive interval (an HTTP error status is then still possible), else opened at once and
        kept alive while the engine works -- and first, for a call parked by a weight-sync pause,
        while it waits (the metrics count it when it ends)."""
        writer = call.provider.stream(call.parsed)
        events_of = _StreamEvents(writer)
        gw = self.gw

        def run(call: Call, encode: Callable[[Turn, dict[str, Any]], Any]) -> Any:
            if unpark is not None:
                unpark()
            return gw.complete(call, encode)

        job = _Job(run, call, events_of.encode)
        if job.wait(self.keepalive):
            _, _, body = job.result()
            # One buffer: the server writes each item of a body as its own chunk and syscall.
            return Answer(200, writer.content_type, b"".join(body), [*SSE_HEADERS, *request_id_headers(rid)]), True
        metrics, provider, keepalive = self.metrics, call.provider.name, self.keepalive

        def events() -> Iterable[bytes]:
            yield from events_of.open()
            while not job.wait(keepalive):
                ping = writer.keepalive()
                if ping:
                    yield ping
            try:
                _, _, body = job.result()
            except ProxyError as err:  # the stream has begun: the error becomes an event
                err.request_id = rid
                metrics.failed(provider, type(err).__name__)
                metrics.answered(provider, err.status)
                yield from writer.error(err)
                return
            metrics.answered(provider, 200)
            yield from body

        return Answer(200, writer.content_type, events(), [*SSE_HEADERS, *request_id_headers(rid)]), False


def _json_answer(turn: Turn, response: dict[str, Any]) -> bytes:
    return json_bytes(response)


def _streamed(parsed: Parsed | None, body: Any) -> bool:
    """Whether a call streams, as its admission needs to know (a stream that finds inference
    paused is opened and parked): parsed, or -- a stateful API's call, parsed only once admitted
    (Responses: Codex's) -- as its body asks. Codex's streams waited out a pause without a byte."""
    if parsed is not None:
        return bool(parsed.stream)
    return isinstance(body, dict) and body.get("stream") is True


def _parse(provider: Provider, body: Any, route: Route, context: dict[str, Any]) -> Any:
    with translating(provider):
        parsed = provider.parse(body, path_model=route.model, stream=route.stream, **context)
    if not parsed.chat.get("messages"):  # e.g. every message's content empty: nothing to answer
        raise BadRequest("the request holds no message with content to answer")
    return parsed


@contextmanager
def translating(provider: Provider) -> Iterator[None]:
    """A request shape a translation did not anticipate is still the client's malformed input:
    the 400 in its format (logged, as it may deserve a precise message)."""
    try:
        yield
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        log.warning("unexpected %s request shape: %r", provider.name, exc)
        raise BadRequest(f"invalid {provider.name} request: {type(exc).__name__}: {exc}") from None


class _StreamEvents:
    """A streamed answer's events, encoded by the engine call's job while Redis records the call
    (``Gateway.complete``) unless the waiter has already opened the stream to keep it alive: the
    head goes out exactly once, either way (a writer's body depends on its head's state)."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self._lock = threading.Lock()
        self._opened = self._encoded = False

    def open(self) -> list[bytes]:
        """The head, sent before the answer (a long call); none if the answer already holds it."""
        with self._lock:
            if self._encoded:
                return []
            self._opened = True
            return list(self.writer.head())

    def encode(self, turn: Turn, response: dict[str, Any]) -> list[bytes]:
        with self._lock:
            self._encoded = True
            head = [] if self._opened else list(self.writer.head(turn))
            return head + list(self.writer.body(response, turn))


class _Job:
    """The engine call runs beside the response so a slow answer can be streamed with keepalives:
    a bare greenlet under gunicorn's gevent workers (cheap), a thread anywhere else."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        if _GEVENT:
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
        except BaseException as exc:  # noqa: BLE001 - reported to the client in its API's format
            if isinstance(exc, Exception):
                self._error = as_proxy_error(exc, "POST", "(streamed model call)", 0)  # Redis away: a 503
            else:
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
