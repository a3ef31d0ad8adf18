"""One module per provider API, registered here. Registration order is detection order for a
bare base URL (headers, then body); ``DEFAULT`` answers a shared GET (``/v1/models``) that no
header claims. Adding a provider: write its module (see ``base.Provider``), add one line below."""

from __future__ import annotations

from pipeline.registry import Registry
from proxy.errors import UnsupportedEndpoint
from proxy.providers.anthropic import Anthropic
from proxy.providers.base import Parsed, Provider, ProviderScope, Route, StreamWriter, ToolCall, Turn, turn_from_chat
from proxy.providers.google import Google
from proxy.providers.openai_chat import OpenAIChat
from proxy.providers.openai_responses import OpenAIResponses

PROVIDERS: Registry[Provider] = Registry("provider API", UnsupportedEndpoint)
PROVIDERS.register("google", Google())
PROVIDERS.register("openai_responses", OpenAIResponses())
PROVIDERS.register("anthropic", Anthropic())
PROVIDERS.register("openai_chat", OpenAIChat())

DEFAULT = "openai_chat"

__all__ = ["DEFAULT", "PROVIDERS", "Parsed", "Provider", "ProviderScope", "Route", "StreamWriter", "ToolCall",
           "Turn", "turn_from_chat"]
