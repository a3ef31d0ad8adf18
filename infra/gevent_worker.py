"""gunicorn's gevent pywsgi worker, answering each response in one write.

gevent's pywsgi sends a response's status line and headers with one ``send`` and its body with
another. On loopback every ``send`` wakes the reader, and on a small machine each wake-up is a
context switch pair in the middle of the request; for the proxy (a client, its engine and Redis
on the same few cores) that second write was a measurable part of its added latency
(bench/proxy_bench.py). The headers and the first body chunk now go out together, through a
plain send loop; gunicorn's access line is only built when an access log is configured.
Everything else (chunked streams, keepalives, errors) is gunicorn's and gevent's own.
"""

from __future__ import annotations

from typing import Any

from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler

from infra.http_errors import error_body, error_response
from proxy.hot_redis import send_all


class OneWriteHandler(PyWSGIHandler):
    def handle_one_request(self) -> Any:
        """gevent's, with its answer to an unparseable request (an empty 400 or 414) in JSON."""
        result = super().handle_one_request()
        if isinstance(result, tuple) and str(result[0]) in ("400", "414"):
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
    wsgi_handler = OneWriteHandler
