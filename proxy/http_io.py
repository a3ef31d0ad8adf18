"""Request bodies in, answers and errors out, shared by the hot path (``calls``) and the Flask
routes (``app``, ``admin``): a body read (decompressed, size-limited) and parsed as strict JSON,
the ``Answer`` a model call writes (straight to WSGI, or as a Response for Flask), any failure as
the ``ProxyError`` its caller is answered with (in the provider's error shape), request ids, and
request paths fit for a log. Kept apart from ``calls`` so the call's flow is read on its own.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

import orjson
import redis
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Request, Response

from pipeline.codec import exact_json, json_bytes, nesting_depth_exceeds
from pipeline.credentials import session_of_key
from pipeline.errors import unreadable_body
from pipeline.settings import Settings
from proxy.content_encoding import decoded
from proxy.errors import BadRequest, PayloadTooLarge, ProxyError, Unavailable, UpstreamError
from proxy.hot_redis import RedisReplyError as HotRedisError
from proxy.providers import Provider

log = logging.getLogger("polar.proxy")

JSON = "application/json"
_REASONS = {499: "Client Closed Request"}  # nginx's; not in werkzeug's table
MAX_JSON_DEPTH = 128  # harness requests nest tool schemas deeply, but never this deep
# A body read before its key is checked: a coding agent's request (the 10-message one: 4.5 kB); what
# a stranger can make a worker hold is this times its connections. A larger one costs a round trip.
EARLY_READ_BYTES = 64 * 1024


class Answer:
    """What a model call answers: written straight to WSGI on the hot path (a werkzeug Response
    costs more to build and finalise than the rest of the answer), or as a Response for Flask."""

    __slots__ = ("status", "content_type", "body", "headers")

    def __init__(self, status: int, content_type: str, body: bytes | Iterable[bytes],
                 headers: list[tuple[str, str]] | None = None) -> None:
        self.status = status
        self.content_type = content_type if content_type.startswith(JSON) else f"{content_type}; charset=utf-8"
        self.body = body
        self.headers = headers or []

    def wsgi(self, start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = [("Content-Type", self.content_type), *self.headers]
        if isinstance(self.body, bytes):
            headers.append(("Content-Length", str(len(self.body))))
            body: Iterable[bytes] = [self.body]
        else:
            body = self.body  # an event stream of unknown length: the server chunks it
        start_response(f"{self.status} {_REASONS.get(self.status) or HTTP_STATUS_CODES.get(self.status, 'Unknown')}",
                       headers)
        return body

    def response(self) -> Response:
        body = [self.body] if isinstance(self.body, bytes) else self.body
        return Response(body, status=self.status, content_type=self.content_type, headers=self.headers)


def json_body(req: Request) -> Any:
    return json_of(body_bytes(req))


def _small_plain_body(req: Request) -> bool:
    """A body read before the caller's key is checked: small, of known length, not compressed."""
    length = req.content_length
    return length is not None and length <= EARLY_READ_BYTES and not req.environ.get("HTTP_CONTENT_ENCODING")


def body_bytes(req: Request) -> bytes:
    """The request's body (decompressed when it came compressed), within the size limit."""
    raw = _plain_body(req)
    if raw is not None:
        return raw
    raw = req.get_data(cache=True)
    limit = req.max_content_length
    if limit is not None and len(raw) >= limit and req.content_length is None and _more_input(req):
        # A chunked body (no Content-Length) is cut at the limit by werkzeug without an error.
        raise RequestEntityTooLarge()
    encoding = req.environ.get("HTTP_CONTENT_ENCODING")
    if encoding:
        raw = decoded(raw, encoding, limit or Settings.model_fields["max_request_bytes"].default)
    return raw


def _plain_body(req: Request) -> bytes | None:
    """A body of a stated length within the limit, neither chunked nor compressed (every coding
    agent's call), read from ``wsgi.input`` as werkzeug's ``get_data`` would read it but without
    its stream wrappers (a tenth of the proxy's own work on a 10-message call went to reading
    the body that way); None for any other body (``get_data`` reads it). Read once: the bytes
    are kept in the environ for a second reader."""
    environ = req.environ
    kept = environ.get("polar.body")
    if kept is not None:
        return kept
    length = environ.get("CONTENT_LENGTH")
    limit = req.max_content_length
    if (not length or not length.isascii() or not length.isdigit() or "HTTP_TRANSFER_ENCODING" in environ
            or environ.get("HTTP_CONTENT_ENCODING") or (limit is not None and int(length) > limit)):
        return None
    want = int(length)
    stream = environ["wsgi.input"]
    try:
        raw = stream.read(want) if want else b""
        while len(raw) < want:  # (a server's stream may hand a body over in parts)
            more = stream.read(want - len(raw))
            if not more:
                break
            raw += more
    except (OSError, ValueError):
        raise ClientDisconnected() from None
    if len(raw) < want and "wsgi.input_terminated" not in environ:
        # werkzeug's reading: short of a stated length is a client that left, unless the server
        # ends the stream itself (gunicorn: then what came is the body, as werkzeug reads it).
        raise ClientDisconnected()
    environ["polar.body"] = raw
    return raw


def json_of(raw: bytes) -> Any:
    """A request body's JSON: strict, integers beyond 64 bits exact, nesting bounded."""
    try:
        # strict JSON: valid UTF-8 without lone surrogates, no NaN/Infinity, 64-bit integers
        body = exact_json(raw, orjson.loads(raw))  # integers beyond 64 bits kept exact, not rounded
    except (ValueError, RecursionError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise BadRequest(f"malformed JSON body: {exc}") from None
    # Depth needs an open bracket per level: a body with fewer of them (strings included) cannot
    # exceed it, and most requests are decided without walking them.
    if _brackets_exceed(raw, MAX_JSON_DEPTH) and nesting_depth_exceeds(body, MAX_JSON_DEPTH):
        raise BadRequest(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    return body


def _brackets_exceed(raw: bytes, limit: int) -> bool:
    """Whether ``raw`` holds more than ``limit`` open brackets (``[`` and ``{``): found one by one
    with ``find`` (memchr), stopping past ``limit``, where ``count`` steps through every byte
    twice (4x the instructions on a 4.5 kB request; 60x on a 132 kB one, which has ten times
    ``limit`` brackets)."""
    seen = 0
    for bracket in (b"[", b"{"):
        at = raw.find(bracket)
        while at >= 0:
            seen += 1
            if seen > limit:
                return True
            at = raw.find(bracket, at + 1)
    return False


def _more_input(req: Request) -> bool:
    stream = req.environ.get("wsgi.input")
    try:
        return bool(stream is not None and stream.read(1))
    except (OSError, ValueError):
        return False


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(json_bytes(payload), status=status, mimetype="application/json")


def as_proxy_error(exc: Exception, method: str, path: str, max_request_bytes: int) -> ProxyError:
    """Any failure of a request as the ProxyError its caller is answered with."""
    if isinstance(exc, ProxyError):
        return exc
    if isinstance(exc, RequestEntityTooLarge):
        return PayloadTooLarge(f"request body exceeds {max_request_bytes} bytes")
    if isinstance(exc, HTTPException):
        status, message = unreadable_body(exc) or (exc.code or 400, exc.description or str(exc))
        err = BadRequest(message)
        err.status = status
        return err
    if isinstance(exc, (redis.RedisError, HotRedisError, ConnectionError)):
        return Unavailable("the proxy's Redis is unavailable; retry shortly")
    log.exception("unexpected error on %s %s", method, loggable(path), exc_info=exc)
    return UpstreamError(f"internal proxy error: {type(exc).__name__}")


def error_answer(provider: Provider, err: ProxyError, method: str, path: str) -> Answer:
    if err.status >= 500:
        log.warning("%s %s: %s", method, loggable(path), err.message)
    headers = request_id_headers(err.request_id) if err.request_id else None
    return Answer(err.status, JSON, json_bytes(provider.error(err)), headers)


def request_id(session_id: str, seq: int) -> str:
    """An admitted call's id, as the SDKs log it (``x-request-id`` for OpenAI's, ``request-id``
    for Anthropic's): ``req_<session>_<seq>`` names the session and the call's ``seq`` in its
    completion or error record. Public ids only: the session's key is never in it."""
    return f"req_{session_id.removeprefix('sess-')}_{seq}"


def request_id_headers(rid: str) -> list[tuple[str, str]]:
    return [("x-request-id", rid), ("request-id", rid)]


def loggable(path: str) -> str:
    """A request path fit for a log: a session key in it becomes its public session id."""
    if not path.startswith("/s/"):
        return path
    key, sep, rest = path[3:].partition("/")
    return f"/s/{session_of_key(key) or '<key>'}{sep}{rest}"
