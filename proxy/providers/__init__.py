"""One module per provider API. Each translates requests to OpenAI Chat for the engine and
answers back in its own format; none does I/O."""

from __future__ import annotations

from proxy.providers.anthropic import Anthropic
from proxy.providers.base import Parsed, Provider, StreamWriter, ToolCall, Turn, turn_from_chat
from proxy.providers.google import Google
from proxy.providers.openai_chat import OpenAIChat
from proxy.providers.openai_responses import OpenAIResponses

PROVIDERS: dict[str, Provider] = {p.name: p for p in (OpenAIChat(), Anthropic(), OpenAIResponses(), Google())}

__all__ = ["PROVIDERS", "Parsed", "Provider", "StreamWriter", "ToolCall", "Turn", "turn_from_chat"]
