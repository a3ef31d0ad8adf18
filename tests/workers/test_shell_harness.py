"""The instruction never enters a shell string: {{INSTRUCTION}} is a reference to the instruction
file, quoted for where it stands, so hostile instructions are data in every quoting."""

from __future__ import annotations

import pytest

from pipeline.schemas import SessionSpec, TaskRequest
from workers import runtimes
from workers.harnesses import HarnessContext, create
from workers.harnesses.shell import expand_instruction

HOSTILE = [
    "$(touch pwned)", "`touch pwned`", "'; touch pwned; '", '"; touch pwned; "', "\\'$(touch pwned)\\'",
    "a b  c\n$HOME * ?", "it's \"quoted\" \\ and ${PATH}",
]
TEMPLATES = {
    "unquoted": "printf '%s' {{INSTRUCTION}} > out.txt",
    "double": 'printf "%s" "{{INSTRUCTION}}" > out.txt',
    "single": "printf '%s' '{{INSTRUCTION}}' > out.txt",
    "mixed": "printf '%s' \"pre {{INSTRUCTION}} post\" > out.txt",
}


def run(tmp_path, template: str, instruction: str):
    task = TaskRequest.model_validate({"instruction": instruction, "agent": {"custom_shell": template}})
    spec = SessionSpec.expand(task)[0]
    runtime = runtimes.create(spec.runtime, spec.session_id, tmp_path)
    runtime.start()
    harness = create("shell")
    ctx = HarnessContext(spec, {})
    harness.setup(runtime, ctx)
    cmd = harness.command(ctx)
    assert instruction not in cmd.command or instruction == ""  # never in the command string
    res = runtime.exec(cmd.command, timeout=30)
    workspace = runtime.path(".")  # type: ignore[attr-defined]
    return res, workspace


@pytest.mark.parametrize("quoting", sorted(TEMPLATES))
@pytest.mark.parametrize("instruction", HOSTILE)
def test_hostile_instructions_are_data_in_every_quoting(tmp_path, quoting, instruction):
    res, workspace = run(tmp_path, TEMPLATES[quoting], instruction)
    assert res.exit_code == 0, res.stderr
    assert not (workspace / "pwned").exists()
    written = (workspace / "out.txt").read_text()
    expected = instruction.rstrip("\n")  # command substitution drops trailing newlines
    assert written == (f"pre {expected} post" if quoting == "mixed" else expected)


def test_escaped_quotes_do_not_confuse_the_quoting():
    # The \" does not close the double quotes: the placeholder is still inside them.
    assert expand_instruction('echo "a \\" {{INSTRUCTION}}"') == 'echo "a \\" $(cat "$POLAR_SESSION_DIR/instruction.txt")"'
    assert expand_instruction("x") == "x"
