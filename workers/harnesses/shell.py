"""``shell``: any command line. The instruction is written to ``/polar/session/instruction.txt``
(and is ``$POLAR_INSTRUCTION`` when it fits an environment variable). It never enters the command
string: ``{{INSTRUCTION}}`` is replaced by a shell *reference* to that file, quoted for where it
stands (outside quotes, inside double quotes, inside single quotes), so an instruction such as
``$(rm -rf ~)`` or ``'; reboot; '`` is only ever data."""

from __future__ import annotations

from pipeline.errors import HarnessError
from workers.harnesses.base import AgentCommand, HarnessContext
from workers.runtimes import Runtime

PLACEHOLDER = "{{INSTRUCTION}}"
INSTRUCTION_FILE = "/polar/session/instruction.txt"
# $POLAR_SESSION_DIR is where /polar/session is for this runtime (a directory on the host for
# `local`, the mount point in a container). $(...) inside double quotes is one word, whatever
# the file holds (trailing newlines aside, which command substitution drops).
REFERENCE = '$(cat "$POLAR_SESSION_DIR/instruction.txt")'


class ShellHarness:
    name = "shell"

    def setup(self, runtime: Runtime, ctx: HarnessContext) -> None:
        runtime.write(INSTRUCTION_FILE, ctx.spec.instruction.encode())

    def command(self, ctx: HarnessContext) -> AgentCommand:
        shell = ctx.spec.agent.custom_shell
        if shell is None:
            raise HarnessError("the shell harness needs agent.custom_shell")
        return AgentCommand(command=expand_instruction(shell.command), cwd=shell.cwd, env=dict(shell.env))


def expand_instruction(template: str) -> str:
    """Replace each ``{{INSTRUCTION}}`` by a reference to the instruction file that expands to
    the instruction as one word in bash, in whatever quoting it stands."""
    out: list[str] = []
    quote: str | None = None  # None, "'" or '"': the quoting at this point of the template
    i = 0
    while i < len(template):
        if template.startswith(PLACEHOLDER, i):
            if quote is None:
                out.append(f'"{REFERENCE}"')
            elif quote == '"':
                out.append(REFERENCE)
            else:  # close the single quotes, a double-quoted reference, reopen them
                out.append(f"'\"{REFERENCE}\"'")
            i += len(PLACEHOLDER)
            continue
        c = template[i]
        if c == "\\" and quote != "'":  # an escaped character never opens or closes quotes
            out.append(template[i:i + 2])
            i += 2
            continue
        if c in "'\"" and quote in (None, c):
            quote = None if quote == c else c
        out.append(c)
        i += 1
    return "".join(out)
