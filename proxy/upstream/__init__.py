"""Upstream inference engines (dialects: vLLM, SGLang), registered here, and the endpoint pool
that calls them. Adding an engine: write its module (see ``base.Engine``), add one line below."""

from __future__ import annotations

from pipeline.errors import CaptureError, EngineError
from pipeline.registry import Registry
from proxy.upstream.base import Captured, Engine
from proxy.upstream.pool import UpstreamPool, between_engine_waits
from proxy.upstream.sglang import SGLangEngine
from proxy.upstream.transport import UpstreamTransport, WSGITransport
from proxy.upstream.vllm import VLLMEngine

ENGINES: Registry[Engine] = Registry("upstream engine", EngineError)
ENGINES.register("vllm", VLLMEngine())
ENGINES.register("sglang", SGLangEngine())


def create(name: str) -> Engine:
    """A registered engine, or a plug-in's (an import path to an instance or a class)."""
    item = ENGINES.resolve(name)
    return item() if isinstance(item, type) else item


__all__ = ["ENGINES", "CaptureError", "Captured", "Engine", "UpstreamPool", "between_engine_waits", "UpstreamTransport", "WSGITransport",
           "create"]
