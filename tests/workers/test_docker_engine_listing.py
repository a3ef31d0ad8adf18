"""Listing a stack's containers while podman removes one: podman 4 fails the whole listing with a
500 ("getting container from store ...: container not known"); it is asked again. Against a
small HTTP server speaking the two Docker API calls the listing makes (a race podman's own
timing decides cannot be staged on demand)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest

from workers.runtimes import docker_engine

GONE = 'getting container from store "71a8": container not known'


def serve(answers: list[tuple[int, object]]) -> tuple[ThreadingHTTPServer, list[str]]:
    """A Docker API answering /version, and each container listing with the next of ``answers``."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.endswith("/version"):
                status, body = 200, {"ApiVersion": "1.41", "Version": "4.3.1"}
            else:
                asked.append(self.path)
                status, body = answers.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, asked


def test_a_listing_that_podman_fails_for_a_container_removed_meanwhile_is_asked_again(tmp_path: Path):
    row = {"Id": "c1", "Names": ["/polar-s1"], "Labels": {"polar.session": "s1", "polar.created": "12.5"}}
    server, asked = serve([(500, {"message": GONE}), (200, [row])])
    try:
        got = docker_engine.session_containers(f"tcp://127.0.0.1:{server.server_port}", tmp_path, timeout=5)
    finally:
        server.shutdown()
    assert got == [("polar-s1", "s1", 12.5)] and len(asked) == 2


def test_another_engine_error_is_not_retried(tmp_path: Path):
    server, asked = serve([(500, {"message": "no space left on device"})])
    try:
        with pytest.raises(docker.errors.APIError, match="no space left"):
            docker_engine.session_containers(f"tcp://127.0.0.1:{server.server_port}", tmp_path, timeout=5)
    finally:
        server.shutdown()
    assert len(asked) == 1
