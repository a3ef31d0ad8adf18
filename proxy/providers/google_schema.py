"""Gemini's ``Schema`` (an OpenAPI 3.0 subset: ``type: OBJECT``, ``nullable``) as the JSON Schema
an engine's tools and guided decoding read (pure).

The REST API takes schema keywords in either spelling and the genai SDK sends them in snake_case
(``any_of``, ``max_items``, ``property_ordering``); property names are the caller's own and are
never touched. ``nullable: true`` becomes a ``"null"`` type (or a ``{"type": "null"}`` choice),
``propertyOrdering`` (an output-order hint with no JSON Schema meaning) is dropped.
``parametersJsonSchema`` / ``responseJsonSchema`` are JSON Schema already and do not come here.
"""

from __future__ import annotations

from typing import Any

_SCHEMA_VALUED = {"items", "not", "additionalProperties"}  # one schema
_SCHEMA_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}  # a list of schemas
_SCHEMA_MAPS = {"properties", "$defs", "defs", "definitions", "patternProperties"}  # name -> schema
_RENAMED = {"defs": "$defs", "ref": "$ref"}  # Gemini's Schema names them without JSON Schema's "$"
_DROPPED = {"propertyOrdering"}


def camel(key: str) -> str:
    """A proto field name in camelCase (``max_items`` -> ``maxItems``)."""
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest) if rest else key


def json_schema(schema: Any) -> Any:
    """``schema`` (Gemini's) as JSON Schema."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    nullable = False
    for raw_key, value in schema.items():
        key = camel(raw_key) if not raw_key.startswith("$") else raw_key
        key = _RENAMED.get(key, key)
        if key in _DROPPED:
            continue
        if key == "nullable":
            nullable = value is True
            continue
        if key == "type" and isinstance(value, str):
            value = value.lower()
            if value == "type_unspecified":
                continue
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            value = {name: json_schema(s) for name, s in value.items()}
        elif key in _SCHEMA_VALUED or key in _SCHEMA_LISTS:
            value = json_schema(value)
        out[key] = value  # enum, default, example, format, ...: values as given
    if nullable:
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
        elif "anyOf" in out and isinstance(out["anyOf"], list):
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out
