"""Just enough TOML to write a CLI's config (codex): tables, strings, numbers, booleans, arrays."""

from __future__ import annotations

import json
from typing import Any


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table (inside arrays)
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def dumps(data: dict[str, Any], _prefix: str = "") -> str:
    """Scalars first, then one [table] per nested dict (dotted names), as TOML requires."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in data.items():
        if isinstance(v, dict):
            name = f"{_prefix}.{_key(k)}" if _prefix else _key(k)
            out += f"\n[{name}]\n" + dumps(v, name)
    return out
