"""The benchmark's second floor: the proxy's previous stack (Flask + geventhttpclient on the same
gunicorn + gevent worker), forwarding the request bytes to the upstream and its bytes back, with
no session gate, conversion or capture. It is what the earlier "0.5-0.6x a pass-through" figure
was measured against; bench/passthrough.py is the floor of the stack the proxy runs on now."""

from __future__ import annotations

import os

from flask import Flask, Response, request
from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

app = Flask("passthrough", static_folder=None)
_client = HTTPClient.from_url(URL(os.environ["POLAR_UPSTREAM_URL"]), concurrency=1024,
                              connection_timeout=10.0, network_timeout=600.0)


@app.post("/s/<sid>/v1/chat/completions")
def forward(sid: str) -> Response:
    resp = _client.request("POST", "/v1/chat/completions", body=request.get_data(),
                           headers={"content-type": "application/json"})
    try:
        return Response(resp.read(), status=resp.status_code, mimetype="application/json")
    finally:
        resp.release()
