"""Anthropic tools as OpenAI function tools (pure: no I/O).

Custom tools (``input_schema``) translate as they are. Anthropic-defined client tools — the
``bash_*`` and ``text_editor_*`` versions — carry no schema (the vendor's model knows theirs), so
the policy gets their documented input fields as a schema; the tool calls come back under the
tool's name with that input, which the harness runs as usual. ``computer_*`` needs screenshots
a text model cannot read: refused. Server tools (web search, web fetch, code execution, ...) run
at the vendor, not in the harness, and cannot run behind a local engine: dropped from the list.
Tool results: each must answer a ``tool_use`` of the message before.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers.base import function_tool

_BASH = ("Run a command in a persistent bash shell. Give `command`; `restart: true` restarts the shell.",
         {"type": "object", "properties": {"command": {"type": "string"}, "restart": {"type": "boolean"}}})
_EDITOR_FIELDS = {"path": {"type": "string"}, "file_text": {"type": "string"}, "old_str": {"type": "string"},
                  "new_str": {"type": "string"}, "insert_line": {"type": "integer"},
                  "view_range": {"type": "array", "items": {"type": "integer"}}}


def _editor(commands: list[str]) -> tuple[str, dict[str, Any]]:
    return (f"View, create and edit text files. `command` is one of {', '.join(commands)}; `path` names the "
            "file; `view_range` [start, end] for view, `file_text` for create, `old_str`/`new_str` for "
            "str_replace, `insert_line`/`new_str` for insert.",
            {"type": "object", "properties": {"command": {"type": "string", "enum": commands}, **_EDITOR_FIELDS},
             "required": ["command", "path"]})


_OLD_EDITOR = _editor(["view", "create", "str_replace", "insert", "undo_edit"])
_NEW_EDITOR = _editor(["view", "create", "str_replace", "insert"])  # Claude 4's versions: no undo_edit
CLIENT_TOOLS = {"bash_20241022": _BASH, "bash_20250124": _BASH, "text_editor_20241022": _OLD_EDITOR,
                "text_editor_20250124": _OLD_EDITOR, "text_editor_20250429": _NEW_EDITOR,
                "text_editor_20250728": _NEW_EDITOR}


def tools_of(tools: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """(the function tools, the names of the server tools dropped)."""
    if tools is None:
        return [], []
    if not isinstance(tools, list):
        raise BadRequest("tools: must be a list", param="tools")
    out, dropped = [], []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise BadRequest(f"tools.{i}: must be an object", param=f"tools.{i}")
        kind = t.get("type")
        if kind in (None, "custom"):
            if not isinstance(t.get("input_schema"), dict):
                raise BadRequest(f"tools.{i}.custom.input_schema: Field required", param=f"tools.{i}.input_schema")
            out.append(function_tool(t.get("name"), t.get("description"), t["input_schema"], f"tools.{i}.name"))
        elif kind in CLIENT_TOOLS:
            description, schema = CLIENT_TOOLS[kind]
            out.append(function_tool(t.get("name"), description, schema, f"tools.{i}.name"))
        elif isinstance(kind, str) and kind.startswith("computer_"):
            raise UnsupportedFeature(f"tools.{i}: the computer-use tool needs screenshots, which this text model "
                                     "cannot read", param=f"tools.{i}.type")
        else:
            dropped.append(str(t.get("name") or kind))  # a server tool: runs at the vendor
    return out, dropped


def tool_choice(choice: Any, names: set[str]) -> dict[str, Any]:
    if choice is None:
        return {}
    if not isinstance(choice, dict):
        raise BadRequest("tool_choice: must be an object with a 'type'", param="tool_choice")
    out: dict[str, Any] = {}
    kind = choice.get("type")
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        if choice.get("name") not in names:
            raise BadRequest(f"tool_choice.name: no tool named {choice.get('name')!r}", param="tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise BadRequest("tool_choice.type: must be auto, any, tool or none", param="tool_choice.type")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def check_tool_results(messages: list[dict[str, Any]]) -> None:
    """As Anthropic answers it: every tool_result answers a tool_use of the message just before
    (an orphan would reach the engine as a tool message answering no call), and a user message
    after tool_use blocks answers every one of them (served, the engine would sample on calls
    that never got a result, a history the vendor refuses; a final assistant message with
    calls is a prefill and answers nothing yet)."""
    asked: set[Any] = set()
    for i, m in enumerate(messages):
        content = m.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if m.get("role") == "user" and asked:
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if missing := [str(c) for c in asked if c not in answered]:
                raise BadRequest(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                                 f"after: {', '.join(sorted(missing))}. Each `tool_use` block must have a "
                                 "corresponding `tool_result` block in the next message.", param=f"messages.{i}")
        if m.get("role") == "user":
            for j, b in enumerate(blocks):
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in asked:
                    raise BadRequest(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                                     f"blocks: {b.get('tool_use_id')}. Each `tool_result` block must have a "
                                     "corresponding `tool_use` block in the previous message.",
                                     param=f"messages.{i}.content.{j}")
        asked = {b.get("id") for b in blocks if b.get("type") == "tool_use"} if m.get("role") == "assistant" else set()
