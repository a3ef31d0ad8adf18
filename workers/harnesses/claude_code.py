"""``claude_code``: Anthropic's Claude Code (``@anthropic-ai/claude-code``), ``claude -p`` over the
Messages API.

Every model alias the CLI may use (main, small/fast, haiku/sonnet/opus, sub-agents) is the
session's policy; ``IS_SANDBOX=1`` lets it skip permissions as root; non-essential traffic,
auto-update, telemetry and error reporting are off. ``--output-format stream-json`` makes its
stdout a transcript (kept as ``agent.stdout``); its own are in ``~/.claude/projects``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import HarnessContext
from workers.harnesses.cli import INSTRUCTION, CliHarness, Shell, model_name, to_json

THINKING_TOKENS = {"low": 4_000, "medium": 10_000, "high": 31_999}
MCP_FILE = ".claude/polar-mcp.json"


class ClaudeCodeHarness(CliHarness):
    name = "claude_code"
    cli = "claude"
    transcripts = (".claude/projects", ".claude/todos")
    skills_home = ".claude/skills"  # personal skills: <name>/SKILL.md

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        out = {".claude/settings.json": to_json(opts.cli_settings)}
        if opts.mcp_servers:
            servers = {s.name: ({"type": "stdio", "command": s.command, "args": s.args, "env": s.env}
                                if s.type == "stdio" else {"type": s.type, "url": s.url, "headers": s.headers})
                       for s in opts.mcp_servers}
            out[MCP_FILE] = to_json({"mcpServers": servers})
        return out

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        words: list[Any] = ["claude", "-p", "--dangerously-skip-permissions", "--output-format", "stream-json",
                            "--verbose"]
        if opts.max_turns:
            words += ["--max-turns", opts.max_turns]
        if opts.mcp_servers:
            # $HOME: the session's home as this runtime sees it (a host folder for local runtimes).
            words += ["--mcp-config", Shell(f'"$HOME/{MCP_FILE}"'), "--strict-mcp-config"]
        return [*words, INSTRUCTION]

    def env(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        model = model_name(ctx)
        env = {
            "IS_SANDBOX": "1", "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "CLAUDE_CODE_SUBAGENT_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        if opts.max_output_tokens:
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(opts.max_output_tokens)
        if opts.reasoning_effort:
            env["MAX_THINKING_TOKENS"] = str(THINKING_TOKENS[opts.reasoning_effort])
        return env
