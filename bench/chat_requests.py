"""Realistic OpenAI Chat requests of a coding agent, for the proxy benchmark.

``coding_turns(4)`` is a 10-message conversation (~4.5 kB): a system prompt, the user's task,
then four rounds of an assistant tool call with JSON arguments and the tool's result (a file's
code, a test run, an edit's diff, a listing), with the agent's four tools declared, as a harness
sends it on its fifth turn. ``long_conversation(32_768)`` continues the same session until the
prompt is ~32k tokens (the fake engine counts one token per 4 bytes, as real tokenizers roughly
do on code).
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM = (
    "You are a coding agent working in a git repository on the user's machine. You can read and edit files and run "
    "shell commands with the tools below. Work in small verified steps: read the code you are about to change, make "
    "the smallest edit that solves the task, then run the tests that cover it. "
    "When a command fails, read its output before trying something else.\n\n"
    "Environment:\n  cwd: /workspace/repo\n  platform: linux\n  shell: bash\n"
)

TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in the repository and return its stdout and stderr.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The command line to run."},
            "timeout": {"type": "integer", "description": "Seconds before the command is killed.", "default": 120}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file, optionally a range of its lines.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace one exact occurrence of old_string with new_string in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
            "required": ["path", "old_string", "new_string"]}}},
    {"type": "function", "function": {
        "name": "list_files", "description": "List files under a directory matching a glob pattern.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "pattern": {"type": "string", "default": "**/*"}}, "required": ["path"]}}},
]

CODE = '''import re
from dataclasses import dataclass


@dataclass
class Version:
    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> "Version":
        match = re.fullmatch(r"(\\d+)\\.(\\d+)\\.(\\d+)", text.strip())
        if match is None:
            raise ValueError(f"not a version: {text!r}")
        return cls(*(int(part) for part in match.groups()))

    def bump(self, part: str) -> "Version":
        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, 0)
        return Version(self.major, self.minor, self.patch + 1)
'''

TEST_RUN = '''============================= test session starts ==============================
collected 6 items

tests/test_version.py ....F.                                             [100%]

=================================== FAILURES ===================================
____________________________ test_parse_prerelease _____________________________
    def test_parse_prerelease():
>       assert Version.parse("1.2.3-rc1") == Version(1, 2, 3)
E       ValueError: not a version: '1.2.3-rc1'
src/semver/version.py:14: ValueError
=========================== 1 failed, 5 passed in 0.04s ========================
'''


def _call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n:02d}_9f2c1a7e4b", "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _result(n: int, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{n:02d}_9f2c1a7e4b", "content": content}


def _round(n: int) -> list[dict[str, Any]]:
    """One assistant tool call and its result; the four kinds a coding agent cycles through."""
    kind = n % 4
    if kind == 0:
        return [_call(n, "read_file", {"path": "src/semver/version.py"}), _result(n, CODE)]
    if kind == 1:
        return [_call(n, "bash", {"command": "python -m pytest tests/test_version.py -q", "timeout": 120}),
                _result(n, TEST_RUN)]
    if kind == 2:
        return [_call(n, "edit_file", {
            "path": "src/semver/version.py",
            "old_string": 'r"(\\d+)\\.(\\d+)\\.(\\d+)"',
            "new_string": 'r"(\\d+)\\.(\\d+)\\.(\\d+)(?:-[0-9A-Za-z.]+)?"'}),
            _result(n, "Edited src/semver/version.py: 1 replacement.")]
    return [_call(n, "list_files", {"path": "tests", "pattern": "test_*.py"}),
            _result(n, "tests/test_version.py\ntests/test_cli.py\ntests/conftest.py")]


def coding_turns(rounds: int = 4, *, stream: bool = False) -> dict[str, Any]:
    """System + task + ``rounds`` x (tool call, tool result): 2 + 2*rounds messages."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "The version parser rejects pre-release versions such as 1.2.3-rc1. Make "
                                    "Version.parse accept them (ignore the pre-release part) and keep the tests green."},
    ]
    for n in range(rounds):
        messages += _round(n)
    return {"model": "agent", "messages": messages, "tools": TOOLS, "tool_choice": "auto", "temperature": 1.0,
            "max_tokens": 4096, "stream": stream}


def long_conversation(tokens: int = 32_768, *, stream: bool = False) -> dict[str, Any]:
    """The same session continued until its body is ~4 bytes per prompt token."""
    rounds = 4
    while len(json.dumps(coding_turns(rounds), separators=(",", ":"))) < tokens * 4:
        rounds += 4
    return coding_turns(rounds, stream=stream)


def two_messages(*, stream: bool = False) -> dict[str, Any]:
    """The README's earlier figure's request: a system line and one short user message (not realistic)."""
    return {"model": "fake", "max_tokens": 16, "stream": stream, "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List the files in the current directory and summarise them."}]}
