"""A real HTTP receiver for callback tests: records every POST, answers from a script."""

from __future__ import annotations

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
