"""Upstream inference engines (dialects) and the HTTP client that calls them."""

from __future__ import annotations

from typing import Any

from pipeline.registry import Registry
from proxy.upstream.base import CaptureError, Captured, Engine
from proxy.upstream.client import UpstreamClient
from proxy.upstream.vllm import VLLMEngine

REGISTRY: Registry[Any] = Registry("upstream engine", ValueError)
REGISTRY.register(VLLMEngine.name, VLLMEngine)


def create(name: str) -> Engine:
    return REGISTRY.build(name)


__all__ = ["REGISTRY", "CaptureError", "Captured", "Engine", "UpstreamClient", "create"]
