"""``codex``: OpenAI's Codex CLI (``@openai/codex``), ``codex exec`` headless over the Responses API.

codex ignores ``OPENAI_BASE_URL``: the proxy is a custom model provider (``wire_api =
"responses"``, key from ``OPENAI_API_KEY``), which also skips the built-in provider's WebSocket
attempts. Update checks, analytics, plugins and web search are off. Transcripts: ``~/.codex/sessions``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import HarnessContext
from workers.harnesses.cli import INSTRUCTION, CliHarness, Shell, deep_merge, model_name
from workers.harnesses.toml import dumps


def mcp_table(opts: HarnessOptions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in opts.mcp_servers:
        out[s.name] = ({"command": s.command, "args": s.args, "env": s.env} if s.type == "stdio"
                       else {"url": s.url, "http_headers": s.headers})
    return out


class CodexHarness(CliHarness):
    name = "codex"
    cli = "codex"
    transcripts = (".codex/sessions", ".codex/log")
    skills_home = ".codex/skills"  # $CODEX_HOME/skills: <name>/SKILL.md
    unsupported = {"max_turns": "codex exec has no turn limit; the session budget bounds it",
                   "max_output_tokens": "codex has no output cap; the proxy clamps to the context"}

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        if any(s.type == "sse" for s in opts.mcp_servers):
            from pipeline.errors import HarnessError

            raise HarnessError("the codex preset takes stdio and http MCP servers, not sse")
        config: dict[str, Any] = {
            "model": model_name(ctx), "model_provider": "polar", "check_for_update_on_startup": False,
            "web_search": "disabled",
            "analytics": {"enabled": False}, "features": {"plugins": False},
            "model_providers": {"polar": {"name": "polar", "env_key": "OPENAI_API_KEY", "wire_api": "responses"}},
        }
        if opts.reasoning_effort:
            config["model_reasoning_effort"] = opts.reasoning_effort
        if opts.mcp_servers:
            config["mcp_servers"] = mcp_table(opts)
        return {".codex/config.toml": dumps(deep_merge(config, opts.cli_settings))}

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        # The base URL carries the session key: expanded by the shell, never written to a file.
        return ["codex", "exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check",
                "-c", Shell('model_providers.polar.base_url="$OPENAI_BASE_URL"'), INSTRUCTION]
