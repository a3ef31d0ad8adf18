"""Upstream inference engines (dialects: vLLM, SGLang) and the endpoint pool that calls them."""

from __future__ import annotations

from typing import Any

from pipeline.registry import Registry
from proxy.upstream.base import CaptureError, Captured, Engine
from proxy.upstream.pool import UpstreamPool
from proxy.upstream.sglang import SGLangEngine
from proxy.upstream.vllm import VLLMEngine

REGISTRY: Registry[Any] = Registry("upstream engine", ValueError)
for _cls in (VLLMEngine, SGLangEngine):
    REGISTRY.register(_cls.name, _cls)


def create(name: str) -> Engine:
    return REGISTRY.build(name)


__all__ = ["REGISTRY", "CaptureError", "Captured", "Engine", "UpstreamPool", "create"]
