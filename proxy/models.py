"""Model listings in each provider's shape, from the engine's OpenAI-style ``/v1/models``."""

from __future__ import annotations

from typing import Any


def listing(provider: str, upstream: dict[str, Any]) -> dict[str, Any]:
    models = [m for m in upstream.get("data") or [] if isinstance(m, dict) and m.get("id")]
    if provider == "anthropic":
        data = [anthropic_model(m) for m in models]
        return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}
    if provider == "google":
        return {"models": [google_model(m) for m in models]}
    return {"object": "list", "data": models}


def one(provider: str, upstream: dict[str, Any], model_id: str) -> dict[str, Any] | None:
    for m in upstream.get("data") or []:
        if isinstance(m, dict) and m.get("id") == model_id:
            return {"anthropic": anthropic_model, "google": google_model}.get(provider, dict)(m)
    return None


def anthropic_model(m: dict[str, Any]) -> dict[str, Any]:
    return {"type": "model", "id": m["id"], "display_name": m["id"], "created_at": "1970-01-01T00:00:00Z",
            "max_input_tokens": m.get("max_model_len")}


def google_model(m: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"models/{m['id']}", "baseModelId": m["id"], "version": "1", "displayName": m["id"],
            "inputTokenLimit": m.get("max_model_len"), "outputTokenLimit": m.get("max_model_len"),
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}
