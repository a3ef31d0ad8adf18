"""A caller without a good key never gets the proxy to read a large body: the key is checked
first, so a stranger cannot make it buffer and parse megabytes (the real proxy under gunicorn +
gevent). A small body is still parsed while the key's admission runs, and a large one with a good
key is served."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support import running_session

FAKE = "sk-polar-0123456789abcdef-" + "0" * 48


def announce_without_body(proxy_url: str, path: str, headers: dict[str, str], length: int = 50_000_000) -> str:
    """Send a request's head announcing a 50 MB body, none of it: a proxy that reads the body
    before checking the key waits for it (and this times out); one that checks first answers."""
    parts = urlsplit(proxy_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        head = [f"POST {path} HTTP/1.1", f"Host: {parts.hostname}", "Content-Type: application/json",
                f"Content-Length: {length}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        sock.sendall("\r\n".join(head).encode())
        try:
            return sock.recv(65536).decode(errors="replace").split("\r\n", 1)[0]
        except socket.timeout:
            return "no answer"


@pytest.mark.parametrize("path, headers", [
    (f"/s/{FAKE}/v1/chat/completions", {}),
    ("/v1/messages", {"x-api-key": FAKE, "anthropic-version": "2023-06-01"}),
    ("/v1", {"Authorization": f"Bearer {FAKE}"}),  # a bare base URL: only the body would tell the API
    (f"/s/{FAKE}", {}),
])
def test_a_wrong_key_is_refused_before_a_large_body_is_read(ref_stack, path, headers):
    status = announce_without_body(ref_stack.settings.proxy_url, path, headers)
    assert status.startswith("HTTP/1.1 40") and " 413" not in status, status


def test_a_body_past_the_early_read_size_waits_for_the_key_too(ref_stack):
    """A Claude Code request is often 50-150 kB: past 64 kB it is read once the key is good."""
    status = announce_without_body(ref_stack.settings.proxy_url, "/v1/messages",
                                   {"x-api-key": FAKE, "anthropic-version": "2023-06-01"}, length=100_000)
    assert status.startswith("HTTP/1.1 40"), status


def test_a_good_key_with_a_large_body_is_served(ref_stack):
    key = running_session(ref_stack.settings.redis_url)
    body = {"model": "tiny", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
    raw = json.dumps(body).encode()[:-1] + b" " * 300_000 + b"}"  # past the early-read size, a tiny prompt
    answer = httpx.post(f"{ref_stack.settings.proxy_url}/s/{key}/v1/chat/completions", content=raw,
                        headers={"content-type": "application/json"}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] > 0
