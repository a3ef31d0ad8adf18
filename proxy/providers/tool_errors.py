"""How a failed tool's result reads to the policy, for the APIs that flag one (Anthropic's
``tool_result.is_error``, Gemini's ``functionResponse.response.error``). A chat tool message
has no error flag, so its text says it: dropped, the policy would read an error as a success."""

from __future__ import annotations

TOOL_ERROR = "Error: the tool call failed."


def marked(text: str, failed: bool) -> str:
    """``text`` as the tool message's content: after TOOL_ERROR's line when the call failed."""
    if not failed:
        return text
    return f"{TOOL_ERROR}\n{text}" if text else TOOL_ERROR
