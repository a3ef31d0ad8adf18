"""``gemini_cli``: Google's Gemini CLI (``@google/gemini-cli``), ``gemini --yolo -p`` over
``streamGenerateContent``.

Headless needs ``security.auth.selectedType = gemini-api-key`` in its settings (a base URL alone
makes it pick an auth type it then refuses) and folder trust off (else YOLO is overridden).
Usage statistics, telemetry, update checks off. Only ``GEMINI_API_KEY`` is left set (it warns
when ``GOOGLE_API_KEY`` is set too). Transcripts: ``~/.gemini/tmp``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import HarnessContext
from workers.harnesses.cli import INSTRUCTION, CliHarness, deep_merge, model_name, to_json


def gemini_style_settings(opts: HarnessOptions) -> dict[str, Any]:
    """What gemini-cli and its fork qwen-code share: max turns and MCP servers."""
    settings: dict[str, Any] = {}
    if opts.max_turns:
        settings["model"] = {"maxSessionTurns": opts.max_turns}
    if opts.mcp_servers:
        settings["mcpServers"] = {s.name: ({"command": s.command, "args": s.args, "env": s.env} if s.type == "stdio"
                                           else {"url" if s.type == "sse" else "httpUrl": s.url, "headers": s.headers})
                                  for s in opts.mcp_servers}
    return settings


class GeminiCliHarness(CliHarness):
    name = "gemini_cli"
    cli = "gemini"
    transcripts = (".gemini/tmp",)
    unsupported = {"reasoning_effort": "set generation settings through cli_settings",
                   "skills_dir": "not a gemini-cli setting",
                   "max_output_tokens": "the proxy clamps to the context"}

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "tools": {"useRipgrep": False},
        }
        settings = deep_merge(deep_merge(settings, gemini_style_settings(opts)), opts.cli_settings)
        return {".gemini/settings.json": to_json(settings)}

    def prelude(self, ctx: HarnessContext, opts: HarnessOptions) -> str:
        return "unset GOOGLE_API_KEY; "

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        return ["gemini", "--yolo", "-m", model_name(ctx), "-p", INSTRUCTION]

    def env(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        return {"GEMINI_MODEL": model_name(ctx), "GEMINI_CLI_NO_RELAUNCH": "true"}
