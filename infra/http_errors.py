"""What the HTTP servers answer for a request they cannot parse (an over-long request line or
header, a malformed request line): JSON, as every answer of the app behind them, instead of
gunicorn's HTML page (gthread: the API, the reference model) or gevent's empty body (the proxy).

The body holds the fields each caller's SDK reads from an error: ``error.message`` and
``error.type`` (OpenAI, the rollout API), the top-level ``type: "error"`` (Anthropic),
``error.code`` and ``error.status`` (Gemini). The request was never parsed, so its API is unknown:
one body serves them all.
"""

from __future__ import annotations

from typing import Any

import orjson
from gunicorn.workers.gthread import ThreadWorker

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


class JsonErrorThreadWorker(ThreadWorker):
    """gunicorn's gthread worker, answering unparseable requests in JSON (``error_response``),
    with a quick shutdown that exits once.

    Ctrl-C signals the process group: the worker gets SIGINT, then SIGQUIT from its master, and
    each ran gunicorn's ``handle_quit``, which raises ``SystemExit`` in the main thread. The
    second landed while the interpreter ran its exit handlers (torch's, in the reference model)
    and was printed as a traceback in model.log."""

    _quitting = False

    def handle_quit(self, sig: Any, frame: Any) -> None:
        if self._quitting:
            return
        self._quitting = True
        super().handle_quit(sig, frame)

    def init_process(self) -> None:
        from gunicorn import util

        util.write_error = _write_json_error  # this worker process serves one app: patched for it alone
        super().init_process()
