"""Random agent conversations (hypothesis) and a script that answers with reasoning and tool
calls, shared by the token-in tests: the tiny model never emits tool markup by itself."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from .conftest import BASH_TOOL

EDIT_TOOL = {"type": "function", "function": {
    "name": "edit", "description": "Replace text in a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old": {"type": "string"},
                                                    "new": {"type": "string"}}}}}
TOOLS = [BASH_TOOL, EDIT_TOOL]

# Played by the "mix" policy: turn i answers the conversation holding i assistant messages.
MIX_SCRIPT = {"turns": [
    {"reasoning": "Look first.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]},
    {"content": "Two edits.", "tool_calls": [
        {"name": "edit", "arguments": {"path": "a.py", "old": "x = 1", "new": "x = 2 ✓"}},
        {"name": "bash", "arguments": {"command": "pytest -q"}}]},
    {"reasoning": "Green now.", "content": "All tests pass."},
    {"content": "Nothing more to do."},
]}

# No ChatML markers (a user writing "<|im_start|>" is a different test), but JSON, newlines and
# non-ASCII that tool arguments and tokenisation care about.
_text = st.text(alphabet=st.sampled_from(list("abxyz019 _-.,:;{}[]\"'\n\tÄéΩ✓中")), min_size=1, max_size=16)


@st.composite
def tool_call(draw, index: int):
    name = draw(st.sampled_from(["bash", "edit"]))
    args = ({"command": draw(_text)} if name == "bash"
            else {"path": draw(_text), "old": draw(_text), "new": draw(_text)})
    # Harnesses send arguments back re-serialised every which way; the engine parses them first.
    style = draw(st.sampled_from(["canonical", "compact", "ascii", "object"]))
    arguments = (args if style == "object" else
                 json.dumps(args, separators=(",", ":")) if style == "compact" else
                 json.dumps(args) if style == "ascii" else json.dumps(args, ensure_ascii=False))
    return {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


@st.composite
def conversation(draw, max_assistant_turns: int = 3):
    """system? + user, then up to ``max_assistant_turns`` assistant turns (content and/or tool calls,
    maybe reasoning) each followed by its tool results or a user message; ends ready to sample."""
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(_text)})
    messages.append({"role": "user", "content": draw(_text)})
    for turn in range(draw(st.integers(0, max_assistant_turns))):
        calls = [draw(tool_call(f"{turn}_{j}")) for j in range(draw(st.integers(0, 2)))]
        content = draw(st.none() | _text) if calls else draw(_text)
        msg: dict = {"role": "assistant", "content": content}
        if draw(st.booleans()):
            msg["reasoning_content"] = draw(_text)
        if calls:
            msg["tool_calls"] = calls
        messages.append(msg)
        if calls:
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": draw(_text)} for c in calls]
        else:
            messages.append({"role": "user", "content": draw(_text)})
    return messages
