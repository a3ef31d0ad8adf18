"""gunicorn's gevent pywsgi worker, answering each response in one write.

gevent's pywsgi sends a response's status line and headers with one ``send`` and its body with
another. On loopback every ``send`` wakes the reader, and on a small machine each wake-up is a
context switch pair in the middle of the request; for the proxy (a client, its engine and Redis
on the same few cores) that second write was a measurable part of its added latency
(bench/proxy_bench.py). The headers and the first body chunk now go out together, through a
plain send loop; gunicorn's access line is only built when an access log is configured.
Everything else (chunked streams, keepalives, errors) is gunicorn's and gevent's own.

Slow clients: gevent's pywsgi waits for a request as long as its client likes, and a greenlet
waiting on a half-sent head holds one of the worker's connections for good (a few thousand
connections trickling their headers took the proxy, and 16 the thread-pooled API, out of
service). So a connection whose reads or writes make no progress for ``idle_seconds`` is closed
(a kept-alive connection left idle too), and a request's line and headers must all arrive within
``head_seconds`` of its first byte, or it is answered 408 (Settings.http_head_seconds,
http_idle_seconds; set on the class by ``configure`` before gunicorn forks its workers). A body
must then keep up BODY_MIN_RATE bytes a second after a grace of ``head_seconds`` from the app's
first read of it. When a worker's connections are nearly all taken, the one waiting longest for
a request is closed to make room (``infra/shedding.py``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import gevent
from gevent.pywsgi import MAX_REQUEST_LINE, Input, headers_factory
from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler

from infra import shedding
from infra.http_errors import error_body, error_response
from proxy.hot_redis import send_all


class _SlowHead(ValueError):
    """A request's head did not arrive in time (a ValueError: gevent hands it, as any bad
    request, to ``_handle_client_error``)."""


class _BadHead(ValueError):
    """A head too large, or framed two ways (answered with ``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


HEAD_MAX_BYTES = 64 * 1024  # all header lines together (http.client alone allows 100 x 64 kB)
DRAIN_SECONDS, DRAIN_MAX_BYTES = 1.0, 1 << 20
ANSWER_DRAIN_SECONDS = 0.2  # before an answer given ahead of the body (then DRAIN_SECONDS after it)
BODY_MIN_RATE, BODY_READ_PIECE = 500, 64 * 1024  # bytes a second a body must keep up (as Apache's reqtimeout)
FRAMING_MAX_BYTES = 64 * 1024  # a chunked body's extensions and trailers, together
CHUNK_FRAMING_BYTES = 12  # a chunk's own framing: its size (8 hex digits: up to 4 GB) and two CRLFs


class _CappedLines:
    """The request's header lines, ``HEAD_MAX_BYTES`` at most (http.client reads only ``readline``)."""

    def __init__(self, fp: Any) -> None:
        self.fp, self.left = fp, HEAD_MAX_BYTES

    def readline(self, limit: int = -1) -> bytes:
        line = self.fp.readline(min(limit, self.left + 1) if limit >= 0 else self.left + 1)
        self.left -= len(line)
        if self.left < 0:
            raise _BadHead(431, f"the request's headers are longer than {HEAD_MAX_BYTES} bytes")
        if line[:1] in (b" ", b"\t"):  # obs-fold: a front proxy may read the folded line as its own header
            raise _BadHead(400, "a header line is folded (continued on a line starting with whitespace)")
        return line


class _SlowBody(TimeoutError):
    """A request's body came slower than BODY_MIN_RATE (made only when it does: gevent's timer
    raises the class)."""

    def __init__(self) -> None:
        super().__init__(f"the request's body came slower than {BODY_MIN_RATE} bytes a second")


class _BadBody(ValueError):
    """A chunked body framed beyond bounds (a 400 from the app's read, and the connection closes)."""


class _PacedReader:
    """The request body's reads, held to a pace: its bytes are due within ``grace`` seconds of
    the app's first read, plus one second per ``BODY_MIN_RATE`` bytes. The idle timeout alone let a client
    send a byte a minute for as long as it liked (every byte restarting it), holding a connection
    -- and what the app had read so far -- for hours. Reads take what has come, so a large body
    on a slow but steady link earns its time as it arrives."""

    def __init__(self, rfile: Any, grace: float, chunked: bool) -> None:
        self.rfile, self.grace, self.got, self.chunked, self.framing = rfile, grace, 0, chunked, 0
        self.start: float | None = None
        self.chunks = 0
        self.input: Any = None  # the gevent Input reading through this one (its chunk position)

    def _paced(self, reader: Any, size: int, earns: bool = True) -> bytes:
        # The clock starts at the app's first read, not with the head: what the app does before
        # reading (the proxy checks a large body's key first, waiting out a Redis restart) is not
        # the client's time -- counted, a body already sent was refused unread.
        if self.start is None:
            self.start = time.monotonic()
        left = self.start + self.grace + self.got / BODY_MIN_RATE - time.monotonic()
        if left <= 0:
            raise _SlowBody()
        with gevent.Timeout(left, _SlowBody):
            data: bytes = reader(size)
        if earns:
            self.got += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        if self.chunked and self._at_framing():
            return self._framing(self.rfile.read, size)  # gevent reads it a byte at a time
        if size is None or size < 0:
            return self._paced(self.rfile.read, -1)
        parts, piece = [], getattr(self.rfile, "read1", self.rfile.read)  # read1: what has come, at once
        while size > 0 and (data := self._paced(piece, min(size, BODY_READ_PIECE))):
            parts.append(data)
            size -= len(data)
        return b"".join(parts)

    def readline(self, size: int = -1) -> bytes:
        if not (self.chunked and self._at_framing()):
            return self._paced(self.rfile.readline, size)
        return self._framing(self.rfile.readline, min(size, FRAMING_MAX_BYTES) if size >= 0 else FRAMING_MAX_BYTES)

    def _at_framing(self) -> bool:
        """Whether gevent is reading a chunked body's framing -- a chunk's size line, the CRLF
        after its data, the trailers -- rather than a chunk's data: its Input's position says."""
        body = self.input
        if body is None or not body.chunk_length or body.position >= body.chunk_length:
            return True
        if body.position == 0:
            self.chunks += 1  # a chunk's data begins
        return False

    def _framing(self, reader: Any, size: int) -> bytes:
        """A chunked body's framing (chunk sizes, their extensions, trailers), which gevent reads
        and drops itself: it earns no time, and it may not outgrow the data by more than
        FRAMING_MAX_BYTES beyond each chunk's own (extensions or trailers sent at pace held a
        connection for ever, and never counted against the app's body limit; a body of many
        small chunks, as a streaming encoder sends, is within bounds)."""
        data = self._paced(reader, size, earns=False)
        self.framing += len(data)
        if self.framing > FRAMING_MAX_BYTES + self.got + CHUNK_FRAMING_BYTES * (self.chunks + 1):
            raise _BadBody(f"the request's chunk framing (sizes, extensions, trailers) outgrew its data by more "
                           f"than {FRAMING_MAX_BYTES} bytes")
        return data


class _LeftUnread(Input):
    """The request body, where what the app left unread (a 401 answered before a stranger's
    body) is not read to its end -- a client trickling it would hold the connection as long as
    it likes -- but drained for a moment as the answer starts (so the answer is not lost to a
    reset); a body that was not all in by then has the answer close the connection, saying so."""

    __slots__ = ("on_unread",)

    def done(self) -> bool:
        return self.chunk_length == 0 if self.chunked_input else self.position >= (self.content_length or 0)

    def drain(self, seconds: float = DRAIN_SECONDS) -> bool:
        """Read what the app left unread, for a moment: True once the body's end is reached
        (the connection can then serve its next request)."""
        if self._chunked_input_error:  # the body's framing is unknown: what follows is not a request
            return False
        if self.done():
            return True
        self.send_100_continue_enabled = False  # (an interim 100 is no use once the answer is due)
        budget = DRAIN_MAX_BYTES
        with gevent.Timeout(seconds, False):
            try:
                while budget > 0 and (data := self.read(min(16384, budget))):
                    budget -= len(data)
            except Exception:  # noqa: BLE001 - a body the client got wrong: the connection closes anyway
                return False
        return self.done()

    def _discard(self) -> None:
        if not self.drain():
            self.on_unread()


class OneWriteHandler(PyWSGIHandler):
    head_seconds = 20.0
    idle_seconds = 75.0
    _head_timer: Any = None
    _shedding: shedding.WaitingConnections  # this server's (set as the connection starts, in handle)
    _served = False  # (a handler serves one connection: set once its first request has begun)

    def handle(self) -> None:
        # Every read and write on this connection, the wait for a kept-alive connection's next
        # request included: a client that makes no progress this long is gone.
        self.socket.settimeout(self.idle_seconds)
        self._shedding = shedding.of(self.server)
        self._shedding.make_room(self.server.pool)
        try:
            super().handle()
        finally:
            self._shedding.done(self)

    def read_requestline(self) -> str:
        """gevent's, with the head's deadline started at the request's first byte (a new
        connection's first byte due within that deadline too: a client opens one to send)."""
        first, self._served = not self._served, True
        self._shedding.waiting(self, self.socket)  # until its head is in (read_request)
        waiting = b""
        with gevent.Timeout(self.head_seconds if first else None, False):
            waiting = self.rfile.peek(1)
        if not waiting:  # the client closed its connection, or sent nothing in time
            return ""
        self._head_timer = gevent.Timeout.start_new(
            self.head_seconds, _SlowHead(f"the request's headers did not arrive within {self.head_seconds:g} s"))
        try:
            line = super().read_requestline()
        except _SlowHead:
            return ""  # not even a request line: the connection just closes
        except BaseException:  # (a reset): no deadline left to fire into this greenlet later
            self._head_timer.close()
            raise
        if not line or len(line) >= MAX_REQUEST_LINE:  # gevent answers it without read_request
            self._head_timer.close()
        return line

    def MessageClass(self, fp: Any, *args: Any) -> Any:
        """The headers, capped in size, and framed one way only: with both a Content-Length and
        a Transfer-Encoding (or two different lengths), a front proxy may read the request's end
        elsewhere than this server does (request smuggling)."""
        headers = headers_factory(_CappedLines(fp), *args)
        lengths = set(headers.get_all("content-length") or [])
        codings = [c.strip().lower() for v in headers.get_all("transfer-encoding") or [] for c in v.split(",")]
        if len(lengths) > 1 or (lengths and codings):
            raise _BadHead(400, "the request's length is given twice (Content-Length with Transfer-Encoding, "
                                "or two Content-Lengths)")
        # What gevent would take loosely, and another parser would read differently: a length int()
        # accepts ("+10", "1_0"), and a Transfer-Encoding other than exactly "chunked" (served as a
        # request without a body, whose body was then parsed as the next request).
        if lengths and not all(v.isascii() and v.isdigit() for v in lengths):
            raise _BadHead(400, "the request's Content-Length is not a number of bytes")
        if codings and codings != ["chunked"]:
            if codings[-1] != "chunked":
                raise _BadHead(400, "the request's Transfer-Encoding does not end with chunked")
            raise _BadHead(501, "the only Transfer-Encoding accepted is chunked")
        return headers

    def get_environ(self) -> Any:
        env = super().get_environ()
        given = self.wsgi_input
        paced = _PacedReader(given.rfile, self.head_seconds, bool(given.chunked_input))
        body = _LeftUnread(paced, given.content_length, socket=given.socket, chunked_input=given.chunked_input)
        paced.input = body
        body.on_unread = self._close_after
        self.wsgi_input = env["wsgi.input"] = body
        return env

    def _close_after(self) -> None:
        self.close_connection = True

    def start_response(self, status: str, headers: Any, exc_info: Any = None) -> Any:
        """gevent's, with a body the app answers before reading (a 401, a 404 for an unserved
        path) drained before the answer goes out, or the answer saying ``Connection: close``.
        Drained only after it, the connection was closed unannounced: a client's pool (the
        OpenAI SDK's httpx) sent its next request on it and got a disconnect, an
        APIConnectionError for a valid call when it does not retry."""
        write = super().start_response(status, headers, exc_info)
        body = self.wsgi_input
        # (briefly: a body sent with its request is in at once; one still coming only delays the answer)
        if isinstance(body, _LeftUnread) and not body.done() and (
                self._expects_continue() or not body.drain(ANSWER_DRAIN_SECONDS)):
            self.close_connection = True
            self.response_headers = [(k, v) for k, v in self.response_headers if k.lower() != b"connection"]
            self.response_headers.append((b"Connection", b"close"))
        return write

    def _expects_continue(self) -> bool:
        """A client waiting for ``100 Continue`` has sent no body to drain: the answer closes."""
        body = self.wsgi_input
        return body.position == 0 and (self.environ or {}).get("HTTP_EXPECT", "").lower() == "100-continue"

    def read_request(self, raw_requestline: str) -> Any:
        try:
            return super().read_request(raw_requestline)
        finally:
            self._head_timer.close()  # the head is in: the app's own time is not limited here
            self._shedding.done(self)

    def _handle_client_error(self, ex: Exception) -> Any:
        if isinstance(ex, (_SlowHead, TimeoutError)):
            self.close_connection = True
            return "408", error_response(408, str(ex) or f"no request data for {self.idle_seconds:g} s")
        if isinstance(ex, _BadHead):
            self.close_connection = True
            return str(ex.status), error_response(ex.status, str(ex))
        return super()._handle_client_error(ex)

    def handle_one_request(self) -> Any:
        """gevent's, with its answer to an unparseable request (an empty 400 or 414) in JSON."""
        result = super().handle_one_request()
        if isinstance(result, tuple) and str(result[0]) in ("400", "414") and b"application/json" not in result[1]:
            code = int(result[0])
            why = ("the request line is longer than 8192 bytes" if code == 414
                   else "the request could not be parsed as HTTP/1.1")
            return result[0], error_response(code, why)
        return result

    def _send_error_response_if_possible(self, error_code: int) -> None:
        """gevent's, for a request that failed mid-way (a malformed chunked body: 400; an
        unexpected error: 500), with a JSON body instead of an empty or plain-text one."""
        if self.response_length:
            self.close_connection = True
            return
        why = "the request body could not be read" if error_code < 500 else "internal server error"
        status, body = error_body(error_code, why)
        self.close_connection = True  # (the request's framing is unknown)
        try:
            self.start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            self.write(body)
        except OSError:
            pass  # the client is gone; the connection closes either way

    def _write_with_headers(self, data: Any) -> None:  # gevent.pywsgi.WSGIHandler's, with one send
        self.headers_sent = True
        self.finalize_headers()
        out = bytearray(b"HTTP/1.1 ")
        out += self.status
        out += b"\r\n"
        for header, value in self.response_headers:
            out += header
            out += b": "
            out += value
            out += b"\r\n"
        out += b"\r\n"
        if data:
            if self.response_use_chunked:
                out += b"%x\r\n" % len(data)
                out += data
                out += b"\r\n"
            else:
                out += data
        self._sendall(out)

    def _sendall(self, data: Any) -> None:  # gevent.pywsgi.WSGIHandler's, without gevent's sendall overhead
        try:
            send_all(self.socket, data)
        except OSError as ex:
            self.status = "socket error: %s" % ex
            if self.code > 0:
                self.code = -self.code
            raise
        self.response_length += len(data)

    def log_request(self) -> None:
        """gunicorn's access line, built only when an access log is configured (it formats dates
        and wraps the response for every request, then drops it)."""
        if getattr(self.server.log, "access_log_enabled", True):  # gunicorn's own test
            super().log_request()


class OneWritePyWSGIWorker(GeventPyWSGIWorker):
    """gunicorn's gevent worker, with a quick shutdown that exits once and quietly.

    Ctrl-C (or ``polar up`` stopping) signals the whole process group: each worker gets SIGINT
    itself and then SIGQUIT from its master, and gunicorn spawned one greenlet per signal that
    calls ``sys.exit`` 0.1 s later. The first ended the worker; the second ran during the
    interpreter's shutdown, where gevent printed its SystemExit as a traceback in every service's
    log at every stop. Now the first signal starts the exit, and it is skipped when the serving
    loop has already returned (the worker is ending anyway)."""

    wsgi_handler = OneWriteHandler
    _quitting = False
    _served = False

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._served = True

    def handle_quit(self, sig: Any, frame: Any) -> None:
        if not self._quitting:
            self._quitting = True
            gevent.spawn(self._quit)

    def _quit(self) -> None:
        self.alive = False
        self.cfg.worker_int(self)
        gevent.sleep(0.1)
        if not self._served:
            sys.exit(0)


def configure(head_seconds: float, idle_seconds: float) -> None:
    """The slow-client limits of every worker this process will fork (see the module's doc)."""
    OneWriteHandler.head_seconds = head_seconds
    OneWriteHandler.idle_seconds = idle_seconds
