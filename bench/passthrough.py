"""The floor of the proxy's stack: the same gunicorn + gevent + Flask + upstream client
(geventhttpclient), forwarding the request bytes to the upstream and its bytes back, with no
session gate, conversion or capture."""

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
