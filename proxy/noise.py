"""Harness noise that changes on every request and would break prefix chains, removed before
the engine sees the prompt (pure). The original request is still recorded verbatim.

Built-in rules (``POLAR_NOISE_RULES``, comma-separated; default ``anthropic_billing_header``):

    anthropic_billing_header  Claude Code's first system line ``x-anthropic-billing-header:
                              cc_version=…; cc_entrypoint=…; cch=<per-request hash>;``
    timestamps                ISO-8601 date-times (``2026-11-29T10:33:17Z``) -> ``<timestamp>``

More rules: ``POLAR_NOISE_PATTERNS`` = JSON list of ``{"name", "pattern", "replace", "roles"}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    replace: str = ""
    roles: tuple[str, ...] = ()  # empty: every role

    def apply(self, text: str) -> str:
        return self.pattern.sub(self.replace, text)


BUILTIN = {
    "anthropic_billing_header": Rule("anthropic_billing_header",
                                     re.compile(r"^x-anthropic-billing-header:[^\n]*(?:\n|$)"), roles=("system",)),
    "timestamps": Rule("timestamps", re.compile(
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b"), "<timestamp>"),
}


def rules_from(names: str | None, patterns: str | None = None) -> list[Rule]:
    out = []
    for name in (n.strip() for n in (names or "").split(",")):
        if not name:
            continue
        if name not in BUILTIN:
            raise ValueError(f"unknown noise rule {name!r} (built in: {', '.join(BUILTIN)})")
        out.append(BUILTIN[name])
    for spec in json.loads(patterns) if patterns else []:
        out.append(Rule(spec.get("name", spec["pattern"]), re.compile(spec["pattern"], re.MULTILINE),
                        spec.get("replace", ""), tuple(spec.get("roles") or ())))
    return out


def scrub(chat: dict[str, Any], rules: list[Rule]) -> tuple[dict[str, Any], list[str]]:
    """The chat request with every rule applied to message text; returns the names that fired.
    Unchanged messages are shared, not copied (this runs on every call)."""
    if not rules:
        return chat, []
    fired: set[str] = set()
    by_role: dict[str | None, list[Rule]] = {}  # the rules that apply to each role, worked out once
    messages = chat.get("messages") or []
    changed: list[Any] | None = None
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        role = role if isinstance(role, str) else None
        applicable = by_role.get(role)
        if applicable is None:
            applicable = by_role[role] = [r for r in rules if not r.roles or role in r.roles]
        if not applicable:
            continue
        new = _scrub_message(m, applicable, fired)
        if new is not m:
            changed = changed if changed is not None else list(messages)
            changed[i] = new
    if not fired:
        return chat, []
    return {**chat, "messages": changed if changed is not None else list(messages)}, sorted(fired)


def _scrub_message(m: dict[str, Any], applicable: list[Rule], fired: set[str]) -> dict[str, Any]:
    content = m.get("content")
    if content is None:
        return m

    def clean(text: str) -> str:
        for rule in applicable:
            new = rule.apply(text)
            if new != text:
                fired.add(rule.name)
                text = new
        return text

    if isinstance(content, str):
        new_content: Any = clean(content)
    elif isinstance(content, list):
        new_content = [{**p, "text": clean(p["text"])} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                       for p in content]
    else:
        return m
    return m if new_content == content else {**m, "content": new_content}
