"""``pi``: the pi coding agent (``@mariozechner/pi-coding-agent``), ``pi -p`` over Chat
Completions through a ``polar`` provider in ``~/.pi/agent/models.json``.

pi has no permission prompts. Offline and telemetry off. Transcripts: ``~/.pi/agent/sessions``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import HarnessContext
from workers.harnesses.cli import INSTRUCTION, CliHarness, deep_merge, model_name, to_json


class PiHarness(CliHarness):
    name = "pi"
    cli = "pi"
    transcripts = (".pi/agent/sessions",)
    unsupported = {"max_turns": "pi -p has no turn limit; the session budget bounds it",
                   "mcp_servers": "pi has no MCP client", "skills_dir": "not a pi setting"}

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        model: dict[str, Any] = {"id": model_name(ctx)}
        if opts.max_output_tokens:
            model["maxTokens"] = opts.max_output_tokens
        provider = {"baseUrl": ctx.env["OPENAI_BASE_URL"], "api": "openai-completions",
                    "apiKey": "OPENAI_API_KEY", "models": [model]}
        return {".pi/agent/models.json": to_json(deep_merge({"providers": {"polar": provider}}, opts.cli_settings))}

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        words: list[Any] = ["pi", "--provider", "polar", "--model", model_name(ctx)]
        if opts.reasoning_effort:
            words += ["--thinking", opts.reasoning_effort]
        return [*words, "-p", INSTRUCTION]

    def env(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        return {"PI_OFFLINE": "1", "PI_TELEMETRY": "0"}
