"""``opencode``: opencode (``opencode-ai``), ``opencode run --auto`` over Chat Completions through
its bundled ``@ai-sdk/openai-compatible`` provider.

The instruction goes on stdin (as an argument, a prompt with spaces reaches the model wrapped in
quotes). The provider reads the base URL and key from the environment (``{env:...}``), so the
session key is in no file. Model list fetches, auto-update, default plugins, LSP downloads and
sharing are off, npm offline (it would fetch a plugin). Transcripts: ``~/.local/share/opencode``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import HarnessContext
from workers.harnesses.cli import CliHarness, deep_merge, model_name, to_json


class OpencodeHarness(CliHarness):
    name = "opencode"
    cli = "opencode"
    transcripts = (".local/share/opencode",)
    stdin_instruction = True
    unsupported = {"max_turns": "opencode run has no turn limit; the session budget bounds it",
                   "reasoning_effort": "set it per model through cli_settings",
                   "skills_dir": "not an opencode setting"}

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        model = model_name(ctx)
        entry: dict[str, Any] = {"name": model}
        if opts.max_output_tokens:
            entry["limit"] = {"output": opts.max_output_tokens, "context": 0}
        config: dict[str, Any] = {
            "$schema": "https://opencode.ai/config.json", "model": f"polar/{model}", "autoupdate": False,
            "share": "disabled",
            "provider": {"polar": {"npm": "@ai-sdk/openai-compatible", "name": "Polar",
                                   "options": {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"},
                                   "models": {model: entry}}},
        }
        if opts.mcp_servers:
            config["mcp"] = {s.name: ({"type": "local", "command": [s.command, *s.args], "environment": s.env}
                                      if s.type == "stdio" else {"type": "remote", "url": s.url, "headers": s.headers})
                             for s in opts.mcp_servers}
        return {".config/opencode/opencode.json": to_json(deep_merge(config, opts.cli_settings))}

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        return ["opencode", "run", "--auto"]

    def env(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        return {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                "OPENCODE_DISABLE_SHARE": "1", "npm_config_offline": "true"}
