"""The six CLI presets without their CLIs: the files each writes into the session's HOME, its
command line, its environment -- and the options each refuses by name. (The CLIs themselves
run in tests/e2e/test_harness_presets.py.)"""

from __future__ import annotations

import json
import shlex
import tomllib

import pytest

from pipeline import plugins
from pipeline.errors import HarnessError
from pipeline.schemas import SessionSpec, TaskRequest
from pipeline.schemas.harness import HarnessOptions
from workers import harnesses
from workers.harnesses import HarnessContext
from workers.harnesses.cli import CliHarness, options, refuse

KEY = "sk-polar-abc-" + "0" * 48
ENV = {"OPENAI_BASE_URL": f"http://127.0.0.1:9/s/{KEY}/v1", "OPENAI_API_KEY": KEY,
       "ANTHROPIC_BASE_URL": f"http://127.0.0.1:9/s/{KEY}", "GOOGLE_API_KEY": KEY, "GEMINI_API_KEY": KEY}


def ctx_for(preset: str, **settings) -> HarnessContext:
    task = TaskRequest.model_validate({"instruction": "fix the bug; rm -rf / '$(x)'", "agent": {
        "harness": preset, "model_name": "policy-7", "settings": settings}})
    return HarnessContext(SessionSpec.expand(task)[0], dict(ENV))


def preset(name: str) -> CliHarness:
    h = harnesses.create(name)
    assert isinstance(h, CliHarness)
    return h


@pytest.mark.parametrize("name", plugins.CLI_PRESETS)
def test_every_preset_runs_headless_with_stdin_closed_and_the_instruction_as_data(name):
    cmd = preset(name).command(ctx_for(name))
    words = shlex.split(cmd.command.split("exec ", 1)[1])
    assert words[0] == preset(name).cli
    assert cmd.command.rstrip().endswith(("< /dev/null", '< "$POLAR_SESSION_DIR/instruction.txt"'))
    assert "rm -rf" not in cmd.command  # the instruction is read from its file, never spliced in
    assert KEY not in cmd.command and all(KEY not in v for v in cmd.env.values())


@pytest.mark.parametrize("name", plugins.CLI_PRESETS)
def test_every_file_a_preset_writes_parses_and_names_the_sessions_policy(name):
    h = preset(name)
    files = h.files(ctx_for(name), options(ctx_for(name)))
    assert files, "each CLI needs its config in the session's HOME"
    text = "\n".join(files.values()) + json.dumps(h.env(ctx_for(name), options(ctx_for(name))))
    for rel, content in files.items():
        parsed = tomllib.loads(content) if rel.endswith(".toml") else json.loads(content)
        assert parsed is not None
    if name != "claude_code":  # claude takes its model names from the environment
        assert "policy-7" in text


@pytest.mark.parametrize("name", ["codex", "claude_code", "gemini_cli", "qwen_code", "opencode"])
def test_the_session_key_stays_out_of_config_files_where_the_cli_reads_the_environment(name):
    files = preset(name).files(ctx_for(name), options(ctx_for(name)))
    assert all(KEY not in content for content in files.values())


def test_claude_code_maps_every_model_alias_to_the_policy():
    env = preset("claude_code").env(ctx_for("claude_code"), HarnessOptions())
    aliases = ["ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
               "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"]
    assert {env[a] for a in aliases} == {"policy-7"} and env["IS_SANDBOX"] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"


def test_codex_reaches_the_proxy_through_a_custom_provider_not_openai_base_url():
    ctx = ctx_for("codex", reasoning_effort="high",
                  mcp_servers=[{"name": "files", "command": "mcp-files", "args": ["--root", "."]},
                               {"name": "docs", "type": "http", "url": "http://127.0.0.1:7/mcp"}],
                  cli_settings={"analytics": {"enabled": False}, "model_verbosity": "low"})
    config = tomllib.loads(preset("codex").files(ctx, options(ctx))[".codex/config.toml"])
    assert config["model_provider"] == "polar" and config["model_providers"]["polar"]["wire_api"] == "responses"
    assert config["model_providers"]["polar"]["env_key"] == "OPENAI_API_KEY"
    assert config["model_reasoning_effort"] == "high" and config["model_verbosity"] == "low"
    assert config["mcp_servers"]["files"]["args"] == ["--root", "."]
    assert config["mcp_servers"]["docs"]["url"] == "http://127.0.0.1:7/mcp"
    assert 'model_providers.polar.base_url="$OPENAI_BASE_URL"' in preset("codex").command(ctx).command


def test_mcp_servers_take_each_clis_own_shape():
    servers = [{"name": "a", "command": "srv", "args": ["-v"]}, {"name": "b", "type": "sse", "url": "http://h/sse"},
               {"name": "c", "type": "http", "url": "http://h/mcp"}]
    gem = json.loads(preset("gemini_cli").files(ctx_for("gemini_cli", mcp_servers=servers),
                                                HarnessOptions(mcp_servers=servers))[".gemini/settings.json"])
    assert gem["mcpServers"] == {"a": {"command": "srv", "args": ["-v"], "env": {}},
                                 "b": {"url": "http://h/sse", "headers": {}}, "c": {"httpUrl": "http://h/mcp", "headers": {}}}
    ctx = ctx_for("claude_code", mcp_servers=servers, max_turns=7)
    claude = json.loads(preset("claude_code").files(ctx, options(ctx))[".claude/polar-mcp.json"])
    assert claude["mcpServers"]["b"]["type"] == "sse" and claude["mcpServers"]["c"]["type"] == "http"
    line = preset("claude_code").command(ctx).command
    assert '--mcp-config "$HOME/.claude/polar-mcp.json"' in line and "--max-turns 7" in line
    oc = json.loads(preset("opencode").files(ctx_for("opencode", mcp_servers=servers),
                                             HarnessOptions(mcp_servers=servers))[".config/opencode/opencode.json"])
    assert oc["mcp"]["a"] == {"type": "local", "command": ["srv", "-v"], "environment": {}}
    assert oc["mcp"]["c"]["type"] == "remote"


@pytest.mark.parametrize("name, setting", [("codex", {"max_turns": 5}), ("pi", {"mcp_servers": [
    {"name": "a", "command": "x"}]}), ("opencode", {"skills_dir": "/skills"}), ("gemini_cli", {"reasoning_effort": "low"})])
def test_an_option_the_cli_cannot_honour_is_an_error_naming_it(name, setting):
    ctx = ctx_for(name, **setting)
    with pytest.raises(HarnessError, match=f"agent.settings.{next(iter(setting))}"):
        refuse(name, options(ctx), preset(name).unsupported)


@pytest.mark.parametrize("settings, field", [
    ({"max_turn": 3}, "max_turn"), ({"max_turns": 0}, "max_turns"), ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"mcp_servers": [{"name": "a", "type": "http"}]}, "url"), ({"version": "latest"}, "version"),
    ({"mcp_servers": [{"name": "a b", "command": "x"}]}, "name"),
])
def test_bad_preset_settings_are_refused_at_submit_naming_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        TaskRequest.model_validate({"instruction": "x", "agent": {"harness": "codex", "settings": settings}})


def test_a_preset_with_a_custom_shell_is_refused():
    with pytest.raises(ValueError, match="custom_shell"):
        TaskRequest.model_validate({"instruction": "x", "agent": {"harness": "pi", "custom_shell": "true"}})


@pytest.mark.parametrize("output, wanted, ok", [
    ("codex-cli 0.171.0", "0.171.0", True), ("2.1.197 (Claude Code)", "2.1.197", True), ("v0.61.0", "0.61.0", True),
    ("0.1.10", "0.1.1", False), ("codex-cli 0.171.0", "0.17", False),
])
def test_a_version_pin_matches_the_clis_version_as_a_whole_word(output, wanted, ok):
    from workers.harnesses.cli import version_matches

    assert version_matches(output, wanted) is ok
