"""Real HTTP servers for tests: ``Receiver`` (callbacks: records every POST, answers from a
script) and ``Scripted`` (a raw HTTP/1.1 engine on a real socket, answering each request as told)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Answers POSTs with the statuses in ``script`` (then 200), deduplicating nothing: the test
    reads ``posts`` (headers, body) to see what a deduplicating receiver would keep."""

    def __init__(self, script: list[int] | None = None, delay: float = 0.0) -> None:
        self.script = list(script or [])
        self.delay = delay
        self.posts: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if outer.delay:
                    threading.Event().wait(outer.delay)
                status = outer.script.pop(0) if outer.script else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered_once(self) -> dict[str, bytes]:
        """What a receiver deduplicating on Idempotency-Key keeps: one body per key."""
        kept: dict[str, bytes] = {}
        for headers, body in self.posts:
            kept.setdefault(headers["idempotency-key"], body)
        return kept

    def close(self) -> None:
        self.server.shutdown()


class Scripted:
    """Answers the n-th request (over all connections) with ``answers[n]``: raw bytes, or a
    callable (connection, request bytes) that does whatever it likes. Records what it got."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                request, buf = head + b"\r\n\r\n" + buf[:length], buf[length:]
                self.requests.append(request)
                answer = self.answers[len(self.requests) - 1]
                if callable(answer):
                    if answer(conn, request) == "close":
                        return
                else:
                    conn.sendall(answer)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (a bare close does not)
        except OSError:
            pass
        self.sock.close()
