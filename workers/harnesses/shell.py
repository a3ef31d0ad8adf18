"""``shell``: any command line. ``{{INSTRUCTION}}`` in the template becomes the shell-quoted
instruction; the instruction is also in ``$POLAR_INSTRUCTION`` and in
``/polar/session/instruction.txt`` for agents that prefer to read it."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from pipeline.errors import HarnessError
from workers.harnesses.base import AgentCommand, HarnessContext
from workers.runtimes import Runtime

PLACEHOLDER = "{{INSTRUCTION}}"


class ShellHarness:
    name = "shell"

    def setup(self, runtime: Runtime, ctx: HarnessContext) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "instruction.txt"
            path.write_text(ctx.spec.instruction)
            runtime.upload(str(path), "/polar/session/instruction.txt")

    def command(self, ctx: HarnessContext) -> AgentCommand:
        shell = ctx.spec.agent.custom_shell
        if shell is None:
            raise HarnessError("the shell harness needs agent.custom_shell")
        cmd = shell.command.replace(PLACEHOLDER, shlex.quote(ctx.spec.instruction))
        return AgentCommand(command=cmd, cwd=shell.cwd, env=dict(shell.env))
