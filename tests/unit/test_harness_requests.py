"""Golden conversions of real requests captured from the harness CLIs
(shared/reference/harness-probe logs, copied to tests/fixtures/harness_requests/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.detection import detect
from proxy.providers import PROVIDERS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness_requests"
SCHEMA = {"type": "object", "properties": {"arg": {"type": "string"}}}


def load(harness: str, index: int = -1) -> dict:
    req = json.loads((FIXTURES / f"{harness}.json").read_text())["requests"][index]
    return req


def with_tools(body: dict, shape: str) -> dict:
    """The probe logs kept tool names only; rebuild full definitions in each API's shape."""
    names = body["tools"]["_names"]
    if shape == "anthropic":
        body["tools"] = [{"name": n, "description": f"{n} tool", "input_schema": SCHEMA} for n in names]
    elif shape == "responses":
        body["tools"] = [{"type": "namespace", "name": n.split("(")[0], "tools": [
            {"type": "function", "name": "spawn_agent", "parameters": SCHEMA}]} if "(namespace)" in n else
            {"type": "function", "name": n, "description": n, "strict": False, "parameters": SCHEMA} for n in names]
        body["tools"].append({"type": "web_search"})
    elif shape == "google":
        body["tools"] = [{"functionDeclarations": [{"name": n, "description": n, "parametersJsonSchema": SCHEMA}
                                                   for n in names]}]
    else:
        body["tools"] = [{"type": "function", "function": {"name": n, "parameters": SCHEMA}} for n in names]
    return body


def route_of(req: dict):
    return detect(req["method"], req["path"], {k.lower(): v for k, v in req["headers"].items()})


def test_claude_code_request():
    req = load("claude")
    route = route_of(req)
    assert (route.kind, route.provider) == ("generate", "anthropic")
    body = with_tools(req["body"], "anthropic")
    parsed = PROVIDERS["anthropic"].parse(body)
    chat = parsed.chat
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "system"]  # the mid-conversation system message stays in place
    assert chat["messages"][0]["content"].startswith("x-anthropic-billing-header:")
    assert "You are a Claude agent" in chat["messages"][0]["content"]
    assert [p["type"] for p in chat["messages"][1]["content"]] == ["text", "text"]
    assert chat["messages"][1]["content"][1]["text"] == "say DONE"
    assert len(chat["tools"]) == 24 and chat["tools"][0]["function"]["parameters"] == SCHEMA
    assert chat["max_tokens"] == 32000 and chat["chat_template_kwargs"] == {"enable_thinking": True}
    assert parsed.stream is True and parsed.model == "fake-model"
    for vendor_only in ("metadata", "context_management", "output_config", "thinking", "system"):
        assert vendor_only not in chat


def test_claude_code_preflight_is_served():
    req = load("claude", 0)
    assert req["method"] == "HEAD" and req["path"] == "/"


def test_codex_request():
    req = load("codex")
    assert route_of(req).provider == "openai_responses"
    body = with_tools(req["body"], "responses")
    parsed = PROVIDERS["openai_responses"].parse(body)
    chat = parsed.chat
    assert [m["role"] for m in chat["messages"]] == ["system", "system", "user", "user"]  # developer items
    assert chat["messages"][1]["content"][1]["text"].startswith("<permissions instructions>")
    names = [t["function"]["name"] for t in chat["tools"]]
    assert "exec_command" in names and "spawn_agent" in names  # namespace flattened
    assert len(names) == 8  # web_search dropped: it cannot run on a local engine
    assert parsed.extra["namespaces"] == {"spawn_agent": "multi_agent_v1"}
    assert parsed.extra["store"] is False and parsed.extra["encrypt_reasoning"] is True
    assert chat["tool_choice"] == "auto" and "reasoning_effort" not in chat
    for vendor_only in ("include", "prompt_cache_key", "client_metadata", "store", "input"):
        assert vendor_only not in chat


def test_gemini_cli_request():
    req = load("gemini")
    route = route_of(req)
    assert (route.provider, route.model, route.stream) == ("google", "fake-model", True)
    body = with_tools(req["body"], "google")
    parsed = PROVIDERS["google"].parse(body, path_model=route.model, stream=route.stream)
    chat = parsed.chat
    assert [m["role"] for m in chat["messages"]] == ["system", "user"]
    assert chat["messages"][0]["content"].startswith("You are Gemini CLI")
    assert [p["text"] for p in chat["messages"][1]["content"]][1] == "say DONE"
    assert len(chat["tools"]) == 15 and chat["tools"][0]["function"]["parameters"] == SCHEMA
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (1, 0.95, 64)
    assert parsed.extra["include_thoughts"] is True and chat["chat_template_kwargs"] == {"enable_thinking": True}
    assert parsed.stream and parsed.model == "fake-model"


@pytest.mark.parametrize("harness", ["qwen", "opencode", "pi"])
def test_chat_harness_requests(harness):
    for req in json.loads((FIXTURES / f"{harness}.json").read_text())["requests"]:
        assert route_of(req).provider == "openai_chat"
        body = req["body"]
        if isinstance(body.get("tools"), dict):
            body = with_tools(body, "chat")
        parsed = PROVIDERS["openai_chat"].parse(body)
        chat = parsed.chat
        assert chat["messages"][0]["role"] == "system" and parsed.stream is True
        assert parsed.extra["include_usage"] is True
        assert chat["max_tokens"] == (body.get("max_completion_tokens") or body.get("max_tokens"))
        assert "store" not in chat and "stream_options" not in chat
