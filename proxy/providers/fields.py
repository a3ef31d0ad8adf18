"""The request-field checks the four translations share: a required body object and model
name, and optional integers, booleans, numbers (within a range), ``top_logprobs`` (0..20) and
stop lists, each failing as a ``BadRequest`` naming the field (the API's own 400). Kept apart
from ``base`` (the provider seam and the neutral turn) so a field check is found by its name."""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def require_model(body: dict[str, Any], missing: str) -> str:
    """The model the caller names: required by every vendor whose path does not name it. The
    proxy answers with the policy whatever the name, but a nameless call is a broken client."""
    model = body.get("model")
    if model is None:
        raise BadRequest(missing, param="model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' must be a non-empty string", param="model")
    return model


def opt_int(body: dict[str, Any], key: str, *, minimum: int = 0, param: str | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 5.0: a JSON number some SDKs type as float (google-genai's top_k)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"'{param or key}' must be an integer >= {minimum}", param=param or key)
    return value


def top_logprobs(body: dict[str, Any], key: str, *, param: str | None = None) -> int:
    """How many alternatives per sampled token the caller asks for: 0 to 20, as every vendor caps it."""
    top = opt_int(body, key, param=param)
    if top is not None and top > 20:
        raise BadRequest(f"'{param or key}' must be an integer between 0 and 20", param=param or key)
    return top or 0


def opt_bool(body: dict[str, Any], key: str, *, param: str | None = None) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"'{param or key}' must be a boolean", param=param or key)
    return value


def opt_number(body: dict[str, Any], key: str, *, param: str | None = None,
               within: tuple[float, float] | None = None) -> float | None:
    """``within``: the closed range the API allows (its own 400 outside it)."""
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadRequest(f"'{param or key}' must be a number", param=param or key)
    if within is not None and not within[0] <= value <= within[1]:
        raise BadRequest(f"{param or key}: must be between {within[0]:g} and {within[1]:g}", param=param or key)
    return value


def stop_list(value: Any, param: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise BadRequest(f"'{param}' must be a string or an array of strings", param=param)


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")  # as OpenAI documents them


def reasoning_effort(value: Any, param: str) -> None:
    """OpenAI's reasoning effort (chat's ``reasoning_effort``, Responses' ``reasoning.effort``):
    a string of its set, else OpenAI's 400 (``invalid_value`` for an unknown one) -- not passed
    on for the engine to read as its default or refuse in its own words."""
    if value is None:
        return
    if not isinstance(value, str):
        err = BadRequest(f"Invalid type for '{param}': expected a string, but got {type(value).__name__} instead.",
                         param=param)
        err.code = "invalid_type"
        raise err
    if value not in REASONING_EFFORTS:
        *head, last = REASONING_EFFORTS
        err = BadRequest(f"Invalid value: '{value}'. Supported values are: "
                         f"{', '.join(repr(e) for e in head)}, and {last!r}.", param=param)
        err.code = "invalid_value"
        raise err
