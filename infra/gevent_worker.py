"""gunicorn's gevent pywsgi worker, answering each response in one write.

gevent's pywsgi sends a response's status line and headers with one ``send`` and its body with
another. On loopback every ``send`` wakes the reader, and on a small machine each wake-up is a
context switch pair in the middle of the request; for the proxy (a client, its engine and Redis
on the same few cores) that second write was a measurable part of its added latency
(bench/proxy_bench.py). The headers and the first body chunk now go out together; everything
else (chunked streams, keepalives, errors, access logging) is gunicorn's and gevent's own.
"""

from __future__ import annotations

from typing import Any

from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler


class OneWriteHandler(PyWSGIHandler):
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


class OneWritePyWSGIWorker(GeventPyWSGIWorker):
    wsgi_handler = OneWriteHandler
