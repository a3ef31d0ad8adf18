"""What an ERROR session says of its agent: the end of its output, whole lines, colours removed."""

from __future__ import annotations

from workers.runtimes.base import ExecResult
from workers.stages.run import output_tail


def test_short_output_is_kept_whole_and_stdout_stands_in_for_an_empty_stderr():
    assert output_tail(ExecResult(1, stdout="Error: no key\n", stderr="")) == "Error: no key"
    assert output_tail(ExecResult(1, stderr="\x1b[31mboom\x1b[0m\n")) == "boom"
    assert output_tail(ExecResult(1)) == "(no output)"


def test_long_output_ends_in_whole_lines():
    lines = [f"line {i:04d}: " + "x" * 40 for i in range(200)]
    tail = output_tail(ExecResult(1, stderr="\n".join(lines)), limit=1000)
    assert tail.startswith("...\nline ") and tail.endswith(lines[-1]) and len(tail) <= 1004
    kept = tail[4:].split("\n")
    assert all(line in lines for line in kept)  # none cut in the middle


def test_one_huge_line_is_cut_rather_than_dropped():
    tail = output_tail(ExecResult(1, stderr="y" * 5000), limit=1000)
    assert tail == "..." + "y" * 1000
