"""OpenAI Responses tools and ``tool_choice`` as Chat tools for the engine (pure: no I/O): flat
function tools, ``namespace`` tools (flattened; each name's namespace kept to restore on
output) and ``custom`` tools (one string argument) are translated; hosted tools (web search,
...) cannot run on a local engine and are dropped; client built-ins and MCP tools are refused.
Kept apart from ``openai_responses`` (routes, the request, rendering, stored state), as
Anthropic's are in ``anthropic_tools``.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest, UnsupportedFeature
from proxy.providers.base import function_tool

_CUSTOM_PARAMS = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}

# Built-in tools the client executes (its output items are calls the harness runs), unlike the
# hosted ones the vendor runs; the engine has no schema for them.
_CLIENT_BUILTINS = frozenset({"local_shell", "shell", "apply_patch", "computer_use_preview", "computer"})
# The tools OpenAI runs itself (as the SDK's ToolParam names them): dropped. Any other type is
# refused, as OpenAI refuses it: dropped as if hosted, a misspelt function tool or a client
# built-in newer than this list would leave the policy without the agent's tool, unsaid.
_HOSTED = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
                     "file_search", "code_interpreter", "image_generation", "tool_search",
                     "programmatic_tool_calling"})


def _tools(tools: Any) -> tuple[list[dict[str, Any]], dict[str, str], set[str]]:
    if tools is None:
        return [], {}, set()
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be an array", param="tools")
    out, namespaces, customs = [], {}, set()
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind == "function":
            out.append(function_tool(t.get("name"), t.get("description"), t.get("parameters"), f"tools[{i}].name"))
        elif kind == "namespace":
            inner_tools = t.get("tools") or []
            if not isinstance(inner_tools, list):
                raise BadRequest(f"tools[{i}].tools must be an array of tools", param=f"tools[{i}].tools")
            for j, inner in enumerate(inner_tools):
                # Function and custom tools, as the SDK's NamespaceToolParam has them (a custom one
                # was skipped: the policy never saw it, unsaid); anything else is refused.
                inner_kind = inner.get("type", "function") if isinstance(inner, dict) else None
                if inner_kind not in ("function", "custom"):
                    raise BadRequest(f"tools[{i}].tools[{j}].type must be function or custom",
                                     param=f"tools[{i}].tools[{j}].type")
                params = inner.get("parameters") if inner_kind == "function" else _CUSTOM_PARAMS
                out.append(function_tool(inner.get("name"), inner.get("description"), params, f"tools[{i}].tools"))
                namespaces[inner["name"]] = t.get("name", "")
                if inner_kind == "custom":
                    customs.add(inner["name"])
        elif kind == "custom":
            out.append(function_tool(t.get("name"), t.get("description"), _CUSTOM_PARAMS, f"tools[{i}].name"))
            customs.add(t["name"])
        elif kind is None:
            raise BadRequest(f"tools[{i}].type is required", param=f"tools[{i}].type")
        elif isinstance(kind, str) and kind in _CLIENT_BUILTINS:
            # The harness runs these, not the vendor: dropped, the policy would never see the
            # agent's own tool and the rollout would quietly be one without it.
            raise UnsupportedFeature(f"tools[{i}]: the built-in '{kind}' tool is not supported: the engine knows no "
                                     "built-in tools (declare it as a function or custom tool)", param=f"tools[{i}].type")
        elif kind == "mcp":
            # The harness's own tools, served by a remote MCP server the vendor calls: dropped,
            # the rollout would quietly be one without them (as Anthropic's mcp_servers).
            raise UnsupportedFeature(f"tools[{i}]: MCP tools are not supported: the engine calls no MCP server (run "
                                     "MCP in the agent and declare its tools as functions)", param=f"tools[{i}].type")
        elif not isinstance(kind, str) or kind not in _HOSTED:
            raise BadRequest(f"Invalid value: {kind!r}. tools[{i}].type must be function, custom, namespace or "
                             "a hosted tool's type", param=f"tools[{i}].type")
        # hosted tools (web_search, file_search, tool_search, ...) run at the vendor: dropped
    return out, namespaces, customs


def _tool_choice(choice: Any, names: set[str]) -> dict[str, Any]:
    """``auto`` / ``none`` / ``required``, one function or custom tool by name, or ``allowed_tools``
    (the engine gets only those tools, chosen from as ``mode`` says)."""
    if choice is None:
        return {}
    if choice in ("auto", "none", "required"):
        return {"tool_choice": choice}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("function", "custom"):
        if choice.get("name") not in names:
            raise BadRequest(f"tool_choice.name: no tool named {choice.get('name')!r}", param="tool_choice.name")
        return {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    if kind == "allowed_tools":
        allowed = choice.get("tools")
        if not isinstance(allowed, list) or not all(isinstance(t, dict) for t in allowed):
            raise BadRequest("tool_choice.tools must be an array of tools", param="tool_choice.tools")
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise BadRequest("tool_choice.mode must be 'auto' or 'required'", param="tool_choice.mode")
        return {"allowed": {t.get("name") for t in allowed}, "tool_choice": mode}
    if isinstance(choice, str) or kind is None:
        raise BadRequest("tool_choice must be 'auto', 'none', 'required' or an object naming a tool",
                         param="tool_choice")
    raise UnsupportedFeature(f"tool_choice: a hosted tool ({kind!r}) cannot run on a local engine",
                             param="tool_choice.type")
