"""``qwen_code``: Qwen Code (``@qwen-code/qwen-code``), ``qwen --yolo -p`` over Chat Completions.

OpenAI auth from the environment; usage statistics, telemetry, auto-update off, and the managed
auto-memory off (it adds a second "memory extraction" call after every answer). Transcripts:
``~/.qwen/tmp`` and ``~/.qwen/projects``.
"""

from __future__ import annotations

from typing import Any

from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import HarnessContext
from workers.harnesses.cli import INSTRUCTION, CliHarness, deep_merge, model_name, to_json
from workers.harnesses.gemini_cli import gemini_style_settings


class QwenCodeHarness(CliHarness):
    name = "qwen_code"
    cli = "qwen"
    transcripts = (".qwen/tmp", ".qwen/projects")
    unsupported = {"reasoning_effort": "set generation settings through cli_settings",
                   "skills_dir": "not a qwen-code setting"}

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        settings = {
            "security": {"auth": {"selectedType": "openai"}}, "model": {"name": model_name(ctx)},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False}, "memory": {"enableManagedAutoMemory": False},
        }
        settings = deep_merge(deep_merge(settings, gemini_style_settings(opts)), opts.cli_settings)
        return {".qwen/settings.json": to_json(settings)}

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        return ["qwen", "--auth-type", "openai", "--yolo", "-p", INSTRUCTION]

    def env(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        env = {"OPENAI_MODEL": model_name(ctx), "QWEN_CODE_NO_RELAUNCH": "1"}
        if opts.max_output_tokens:
            env["QWEN_CODE_MAX_OUTPUT_TOKENS"] = str(opts.max_output_tokens)
        return env
