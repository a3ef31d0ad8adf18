"""One registry shape for every plug-in seam (builder, runtime, harness, evaluator, engine).

A name resolves to a registered factory, or, when it looks like ``package.module:Name``, to
that attribute imported on demand, so users plug in their own without touching this code.
"""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, error: type[Exception]) -> None:
        self.kind = kind
        self.error = error
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        self._items[name] = item
        return item

    def names(self) -> list[str]:
        return sorted(self._items)

    def resolve(self, name: str) -> T:
        item = self._items.get(name)
        if item is not None:
            return item
        if ":" in name:
            module, _, attr = name.partition(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                raise self.error(f"cannot import {self.kind} {name!r}: {exc}") from exc
        raise self.error(f"{self.kind} {name!r} is not available in this build "
                         f"(available: {', '.join(self.names())})")

    def build(self, name: str, config: dict | None = None):
        """Resolve and instantiate with ``config`` as keywords; a bad config is the seam's error."""
        factory = self.resolve(name)
        try:
            return factory(**(config or {}))  # type: ignore[operator]
        except TypeError as exc:
            raise self.error(f"bad config for {self.kind} {name!r}: {exc}") from exc
