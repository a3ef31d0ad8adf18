"""What the HTTP servers answer for a request they cannot parse (an over-long request line or
header, a malformed request line): JSON, as every answer of the app behind them, instead of
gunicorn's HTML page (gthread: the API, the reference model) or gevent's empty body (the proxy).

The body holds the fields each caller's SDK reads from an error: ``error.message`` and
``error.type`` (OpenAI, the rollout API), the top-level ``type: "error"`` (Anthropic),
``error.code`` and ``error.status`` (Gemini). The request was never parsed, so its API is unknown:
one body serves them all.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from typing import Any

import orjson
from gunicorn.workers.gthread import _DEFER, ThreadWorker

_STATUS = {400: ("Bad Request", "INVALID_ARGUMENT"), 408: ("Request Timeout", "DEADLINE_EXCEEDED"),
           414: ("URI Too Long", "INVALID_ARGUMENT"),
           431: ("Request Header Fields Too Large", "INVALID_ARGUMENT"), 417: ("Expectation Failed", "FAILED_PRECONDITION"),
           403: ("Forbidden", "PERMISSION_DENIED"), 500: ("Internal Server Error", "INTERNAL"),
           501: ("Not Implemented", "UNIMPLEMENTED")}


def error_body(status: int, message: str) -> tuple[str, bytes]:
    """The status line's ``"<code> <reason>"`` and the JSON body."""
    reason, grpc_status = _STATUS.get(status, ("Bad Request", "INVALID_ARGUMENT"))
    kind = "invalid_request_error" if status < 500 else "api_error"
    return f"{status} {reason}", orjson.dumps({"type": "error", "error": {
        "type": kind, "message": message, "code": status, "status": grpc_status}})


def error_response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response closing the connection (the request's framing is unknown)."""
    line, body = error_body(status, message)
    head = (f"HTTP/1.1 {line}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def _write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:  # gunicorn.util.write_error's place
    from gunicorn.util import write_nonblock

    write_nonblock(sock, error_response(status_int, mesg or reason))


BODY_MIN_RATE = 500  # bytes a second a body must keep up after its grace (as the gevent workers')
HEAD_GATHER_MAX = 1 << 20  # more than any head gunicorn's limits let through: the parser refuses it


def _send_408(sock: socket.socket, message: str) -> None:
    """A 408 in JSON on a connection nothing was answered on yet: its send buffer is empty, so
    this never waits (and a client already gone is no error)."""
    try:
        sock.send(error_response(408, message), getattr(socket, "MSG_DONTWAIT", 0))
    except OSError:
        pass


class _Deadlines:
    """The connections whose request body a worker thread is waiting to read, each with the time
    it must have arrived by. A thread blocked past it is freed from a watcher thread: the client
    gets a 408 in JSON and the connection is shut down, so the blocked read returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[int, tuple[float, socket.socket, str]] = {}

    def arm(self, key: int, sock: socket.socket, deadline: float, message: str) -> None:
        with self._lock:
            self._due[key] = (deadline, sock, message)

    def disarm(self, key: int) -> None:
        with self._lock:
            self._due.pop(key, None)

    def expire(self, now: float) -> int:
        with self._lock:
            late = [k for k, (deadline, _, _) in self._due.items() if deadline <= now]
            expired = [self._due.pop(k) for k in late]
        for _, sock, message in expired:
            _send_408(sock, message)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(expired)

    def watch(self, every: float = 0.25) -> None:
        while True:
            time.sleep(every)
            self.expire(time.monotonic())


class _PacedReads:
    """A request body's reads from the socket held to a pace: its bytes are due within ``grace``
    seconds of the app's first read, plus one second per BODY_MIN_RATE bytes. Only a thread
    blocked in a read is watched: the app's own work after it (a generation) is never timed."""

    def __init__(self, chunk: Any, deadlines: _Deadlines, key: int, sock: socket.socket, grace: float) -> None:
        self.chunk, self.deadlines, self.key, self.sock, self.grace = chunk, deadlines, key, sock, grace
        self.start: float | None = None
        self.got = 0

    def __call__(self, size_hint: int | None = None) -> bytes:
        if self.start is None:
            self.start = time.monotonic()
        self.deadlines.arm(self.key, self.sock, self.start + self.grace + self.got / BODY_MIN_RATE,
                           f"the request's body came slower than {BODY_MIN_RATE} bytes a second")
        try:
            data: bytes = self.chunk(size_hint)
        finally:
            self.deadlines.disarm(self.key)
        self.got += len(data)
        return data


class JsonErrorThreadWorker(ThreadWorker):
    """gunicorn's gthread worker, answering unparseable requests in JSON (``error_response``),
    with a quick shutdown that exits once, and held against slow clients.

    Slow clients: gthread hands a connection to one of its few threads (the reference model has
    8) as soon as it is accepted, and the thread then reads the request head with no deadline: 8
    connections that sent half a head froze the model server for every session, and idle ones
    each held a thread 5 s (40 of them: a call waited 25 s), then a connection slot for 75 s.
    Here a thread only takes what has arrived: a connection with nothing or part of a head goes
    back to the poller (no thread waits on it) until the rest comes, a head must be whole within
    ``head_seconds`` of its first byte, or of the connection for a new one
    (Settings.http_head_seconds; a 408 in JSON otherwise), a body keep up BODY_MIN_RATE
    bytes a second after that grace, and a read or write that makes no progress for
    ``idle_seconds`` ends the connection (``configure_threads``, before gunicorn forks).

    Ctrl-C signals the process group: the worker gets SIGINT, then SIGQUIT from its master, and
    each ran gunicorn's ``handle_quit``, which raises ``SystemExit`` in the main thread. The
    second landed while the interpreter ran its exit handlers (torch's, in the reference model)
    and was printed as a traceback in model.log."""

    _quitting = False
    head_seconds = 20.0
    idle_seconds = 75.0
    _deadlines: _Deadlines | None = None

    def handle(self, conn: Any) -> Any:
        if not conn.initialized and not conn.data_ready and not conn.wait_for_data(0):
            if getattr(conn, "polar_head_due", None) is None:  # a new connection has the head's time to speak
                conn.polar_head_due = time.monotonic() + self.head_seconds
            return _DEFER  # nothing sent yet: the poller waits for it, not a thread
        conn.init()
        conn.parser.unreader.__dict__.pop("chunk", None)  # the last request's pacing (handle_request)
        state = self._gather_head(conn)
        if state == "wait":
            return _DEFER  # part of a head: the poller waits for the rest
        if state == "late":
            self._refuse_late(conn)
            return False
        return super().handle(conn)

    def _gather_head(self, conn: Any) -> str:
        """Read what has come of the request's head without waiting ("in": all of it, or the
        connection's end, or more than a head may be: the parser takes it from here; "wait":
        not all yet; "late": not all by its deadline)."""
        unreader = conn.parser.unreader
        held, ended = unreader.take_buffered(), False
        conn.sock.setblocking(False)
        try:
            while len(held) < HEAD_GATHER_MAX:
                try:
                    data = conn.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    ended = True
                    break
                if not data:
                    ended = True
                    break
                held += data
        finally:
            conn.sock.setblocking(True)
        unreader.unread(held)
        if ended or len(held) >= HEAD_GATHER_MAX or b"\r\n\r\n" in held or b"\n\n" in held:
            conn.polar_head_due = None
            return "in"
        if not held:
            return "wait"
        now = time.monotonic()
        due = getattr(conn, "polar_head_due", None)  # (a new connection's: from when it was accepted)
        if due is None:
            due = conn.polar_head_due = now + self.head_seconds
        return "late" if now >= due else "wait"

    def _refuse_late(self, conn: Any) -> None:
        _send_408(conn.sock, f"the request's headers did not arrive within {self.head_seconds:g} s")

    def murder_pending(self) -> None:
        """gthread's (connections silent past the keep-alive timeout), and connections whose
        half-sent head is past its deadline: answered 408, closed."""
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c in self.pending_conns if (getattr(c, "polar_head_due", None) or now + 1) <= now]:
            self.pending_conns.remove(conn)
            try:
                self.poller.unregister(conn.sock)
            except (OSError, KeyError, ValueError):
                pass
            self.nr_conns -= 1
            self._refuse_late(conn)
            conn.close()

    def handle_request(self, req: Any, conn: Any) -> Any:
        deadlines = self._deadlines
        if deadlines is not None:  # the body's reads (the head is in the buffer already)
            unreader = conn.parser.unreader
            unreader.chunk = _PacedReads(functools.partial(type(unreader).chunk, unreader), deadlines, id(conn),
                                         conn.sock, self.head_seconds)
        conn.sock.settimeout(self.idle_seconds)  # (the next request's handle sets it blocking again)
        try:
            return super().handle_request(req, conn)
        finally:  # answered: draining what the app left unread has gthread's own deadline
            conn.parser.unreader.__dict__.pop("chunk", None)

    def handle_quit(self, sig: Any, frame: Any) -> None:
        if self._quitting:
            return
        self._quitting = True
        super().handle_quit(sig, frame)

    def init_process(self) -> None:
        from gunicorn import util

        util.write_error = _write_json_error  # this worker process serves one app: patched for it alone
        self._deadlines = _Deadlines()
        threading.Thread(target=self._deadlines.watch, name="slow-clients", daemon=True).start()
        super().init_process()


def configure_threads(head_seconds: float, idle_seconds: float) -> None:
    """The slow-client limits of the gthread workers this process will fork (see the class's doc)."""
    JsonErrorThreadWorker.head_seconds = head_seconds
    JsonErrorThreadWorker.idle_seconds = idle_seconds
