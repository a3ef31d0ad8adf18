"""Reference inference server: a tiny offline model behind vLLM's or SGLang's OpenAI-compatible dialect."""

from .app import create_app
from .engine import ModelEngine
from .policy import ScriptedPolicy
from .tiny_model import build_tiny_model

__all__ = ["build_tiny_model", "ModelEngine", "ScriptedPolicy", "create_app"]
