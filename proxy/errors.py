"""The proxy's exception tree. Every error reaches the harness in its own provider's format.

    ProxyError                      status  code
     ├── BadRequest                  400    invalid_request_error (bad JSON, bad fields)
     │    ├── PayloadTooLarge        413
     │    └── UnsupportedFeature     400    valid for the vendor, impossible on a local engine
     ├── NotFound                    404    unknown model or stored response
     │    └── SessionNotFound        404    unknown session id
     ├── SessionNotActive            403    the session no longer accepts model calls
     ├── Unauthorized                401    /admin/* without the admin token
     ├── Unavailable                 503    Redis is unreachable: retry
     ├── UnsupportedEndpoint         404    a path no provider serves
     └── UpstreamError               502    the inference server failed or misbehaved
          ├── UpstreamRejected       4xx    it refused the request (its status is passed on)
          └── UpstreamTimeout        504
"""

from __future__ import annotations

from pipeline.errors import PolarError


class ProxyError(PolarError):
    status = 500
    type = "api_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class BadRequest(ProxyError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class PayloadTooLarge(BadRequest):
    status, code = 413, "request_too_large"


class UnsupportedFeature(BadRequest):
    code = "unsupported_feature"


class NotFound(ProxyError):
    status, type, code = 404, "invalid_request_error", "not_found"


class SessionNotFound(NotFound):
    code = "session_not_found"


class SessionNotActive(ProxyError):
    status, type, code = 403, "permission_error", "session_not_active"


class Unauthorized(ProxyError):
    status, type, code = 401, "authentication_error", "unauthorized"


class Unavailable(ProxyError):
    status, type, code = 503, "overloaded_error", "service_unavailable"


class UnsupportedEndpoint(ProxyError):
    status, type, code = 404, "invalid_request_error", "unsupported_endpoint"


class UpstreamError(ProxyError):
    status, type, code = 502, "api_error", "upstream_error"


class UpstreamRejected(UpstreamError):
    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        self.type = "invalid_request_error"


class UpstreamTimeout(UpstreamError):
    status, code = 504, "upstream_timeout"
