"""The proxy's exception tree. Every error reaches the harness in its own provider's format.

    ProxyError                      status  code
     ├── BadRequest                  400    invalid_request_error (bad JSON, bad fields)
     │    ├── PayloadTooLarge        413
     │    ├── UnsupportedMediaType   415    a request Content-Encoding the proxy cannot undo
     │    ├── UnsupportedFeature     400    valid for the vendor, impossible on a local engine
     │    └── ContextOverflow        400    context_length_exceeded: the prompt (+ output) does not fit
     ├── NotFound                    404    unknown model or stored response
     │    └── SessionNotFound        404    unknown session id
     ├── SessionNotActive            403    the session no longer accepts model calls
     ├── Unauthorized                401    /admin/* without the admin token
     ├── AdminDisabled               403    /admin/* on a proxy started without an admin token
     ├── Conflict                    409    a resume that would end another's pause or swap under a call
     ├── Unavailable                 503    Redis is unreachable: retry
     ├── UnsupportedEndpoint         404    a path no provider serves
     ├── ClientGone                  499    the client left while the engine sampled (call aborted)
     └── UpstreamError               502    the inference server failed or misbehaved
          ├── UpstreamRejected       4xx    it refused the request (its status is passed on)
          └── UpstreamTimeout        504
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import PolarError


class ProxyError(PolarError):
    status = 500
    type = "api_error"
    code: str | None = None
    details: dict[str, Any] | None = None  # machine-readable detail a vendor's error carries (Anthropic's)
    request_id: str | None = None  # the admitted call's id (``calls.request_id``), once there is one

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class BadRequest(ProxyError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class PayloadTooLarge(BadRequest):
    status, code = 413, "request_too_large"


class UnsupportedMediaType(BadRequest):
    status, code = 415, "unsupported_media_type"


class UnsupportedFeature(BadRequest):
    code = "unsupported_feature"


class ContextOverflow(BadRequest):
    """The prompt, or the prompt plus the requested output, does not fit the engine's context.
    The message is OpenAI Chat's wording; every other provider words it as its vendor does
    (harnesses compact their history when they recognise it)."""

    code = "context_length_exceeded"

    def __init__(self, *, prompt_tokens: int, context_length: int, max_prompt_tokens: int,
                 output_tokens: int | None = None) -> None:
        self.prompt_tokens = prompt_tokens  # at least this many (exact unless the engine refused to count)
        self.context_length = context_length
        self.max_prompt_tokens = max_prompt_tokens  # the longest prompt that leaves room for one output token
        self.output_tokens = output_tokens  # None: the prompt alone does not fit
        if output_tokens is None:
            message = (f"This model's maximum context length is {context_length} tokens. However, your messages "
                       f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.")
        else:
            message = (f"This model's maximum context length is {context_length} tokens. However, you requested "
                       f"{prompt_tokens + output_tokens} tokens ({prompt_tokens} in the messages, {output_tokens} "
                       "in the completion). Please reduce the length of the messages or completion.")
        super().__init__(message, param="messages")

    @property
    def prompt_fits(self) -> bool:
        return self.output_tokens is not None


class NotFound(ProxyError):
    status, type, code = 404, "invalid_request_error", "not_found"


class SessionNotFound(NotFound):
    code = "session_not_found"


class SessionNotActive(ProxyError):
    status, type, code = 403, "permission_error", "session_not_active"


class Unauthorized(ProxyError):
    status, type, code = 401, "authentication_error", "unauthorized"


class AdminDisabled(ProxyError):
    """The proxy has no admin token: its control surface answers nobody (the pause state is
    shared through Redis, so an open proxy would pause the token-protected ones too)."""

    status, type, code = 403, "permission_error", "admin_disabled"


class Conflict(ProxyError):
    status, type, code = 409, "invalid_request_error", "conflict"

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class Unavailable(ProxyError):
    status, type, code = 503, "overloaded_error", "service_unavailable"


class UnsupportedEndpoint(ProxyError):
    status, type, code = 404, "invalid_request_error", "unsupported_endpoint"


class ClientGone(ProxyError):
    """The client closed its connection while the engine was sampling its answer: the engine
    call was aborted (``proxy/client_watch.py``). Nobody reads the answer; kept as an error
    record. 499: nginx's "client closed request"."""

    status, type, code = 499, "api_error", "client_closed_request"


class UpstreamError(ProxyError):
    status, type, code = 502, "api_error", "upstream_error"


class UpstreamRejected(UpstreamError):
    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int, param: str | None = None,
                 upstream_url: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        self.type = "invalid_request_error"
        self.upstream_url = upstream_url  # the endpoint that refused


class UpstreamTimeout(UpstreamError):
    status, code = 504, "upstream_timeout"
