"""Harness-noise rules, on the real captured Claude Code request."""

import copy
import json
from pathlib import Path

import pytest

from proxy.noise import rules_from, scrub
from proxy.providers import PROVIDERS

CLAUDE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests" / "claude.json")
                    .read_text())["requests"][1]["body"]


def claude_chat(billing: str) -> dict:
    body = copy.deepcopy(CLAUDE)
    body["tools"] = [{"name": "Bash", "input_schema": {"type": "object"}}]
    body["system"][0]["text"] = billing
    return PROVIDERS["anthropic"].parse(body).chat


def test_billing_header_line_is_removed_and_chains_hold():
    a = claude_chat("x-anthropic-billing-header: cc_version=2.1.197.a9d; cc_entrypoint=sdk-cli; cch=3fa1;")
    b = claude_chat("x-anthropic-billing-header: cc_version=2.1.197.a9d; cc_entrypoint=sdk-cli; cch=9b07;")
    assert a != b  # per-request noise: without the rule every prompt differs
    rules = rules_from("anthropic_billing_header")
    (ca, fired), (cb, _) = scrub(a, rules), scrub(b, rules)
    assert fired == ["anthropic_billing_header"] and ca == cb
    system = ca["messages"][0]["content"]
    assert system.startswith("You are a Claude agent") and "billing" not in system
    assert ca["messages"][1:] == a["messages"][1:]  # nothing else touched
    assert a["messages"][0]["content"].startswith("x-anthropic-billing-header")  # input not mutated


def test_the_captured_request_itself():
    chat = PROVIDERS["anthropic"].parse({**copy.deepcopy(CLAUDE), "tools": []}).chat
    cleaned, fired = scrub(chat, rules_from("anthropic_billing_header"))
    assert fired and not cleaned["messages"][0]["content"].startswith("x-anthropic")
    again, fired_again = scrub(cleaned, rules_from("anthropic_billing_header"))
    assert again is cleaned and fired_again == []  # idempotent, and no copy when nothing fires


def test_the_rule_only_touches_system_messages():
    line = "x-anthropic-billing-header: cc_version=1;\nhello"
    chat = {"messages": [{"role": "user", "content": line}, {"role": "system", "content": line}]}
    cleaned, _ = scrub(chat, rules_from("anthropic_billing_header"))
    assert cleaned["messages"][0]["content"] == line and cleaned["messages"][1]["content"] == "hello"


def test_timestamps_and_custom_patterns():
    rules = rules_from("timestamps", json.dumps([{"name": "req", "pattern": r"request-id: \w+", "replace": "",
                                                  "roles": ["user"]}]))
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "at 2026-11-29T10:33:17Z request-id: ab12"}]}]}
    cleaned, fired = scrub(chat, rules)
    assert cleaned["messages"][0]["content"][0]["text"] == "at <timestamp> " and fired == ["req", "timestamps"]


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown noise rule"):
        rules_from("billing")


def test_timestamps_rule_on_the_captured_codex_request():
    """No captured harness sends per-request times (Codex and Claude Code send the date only,
    which changes daily); a per-request time injected into Codex's environment context shows the
    rule keeps such requests chainable without touching the date."""
    req = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests" / "codex.json")
                     .read_text())["requests"][0]["body"]

    def at(time: str) -> dict:
        body = copy.deepcopy(req)
        body["tools"] = []
        ctx = body["input"][2]["content"][0]
        ctx["text"] = ctx["text"].replace("</current_date>", f"</current_date>\n  <now>2026-11-29T{time}Z</now>")
        return PROVIDERS["openai_responses"].parse(body).chat

    rules = rules_from("timestamps")
    (a, fired), (b, _) = scrub(at("10:33:17"), rules), scrub(at("10:34:02"), rules)
    assert fired == ["timestamps"] and a == b
    text = a["messages"][2]["content"][0]["text"]
    assert "<now><timestamp></now>" in text and "<current_date>2026-11-29</current_date>" in text
