"""One registry shape for every plug-in seam (builder, runtime, harness, evaluator, engine,
provider): ``Registry[T]`` maps names to implementations of the seam's Protocol ``T``.

A name resolves to a registered item, or, when it looks like ``package.module:Name``, to that
attribute loaded with ``pkgutil.resolve_name`` -- but only from a module the operator allowed
(``POLAR_PLUGIN_MODULES``, applied by each process with ``allow_plugin_modules``): a task payload
can never name an arbitrary callable such as ``subprocess:Popen``. Every failure is the seam's
own error type (one per seam, see ``pipeline.errors``).
"""

from __future__ import annotations

import pkgutil
from typing import Any, Generic, Iterator, Sequence, TypeVar

from pipeline.errors import PolarError

T = TypeVar("T")

_allowed_modules: tuple[str, ...] = ()


def allow_plugin_modules(modules: Sequence[str]) -> None:
    """Which modules (and their submodules) import-path plug-ins may come from, in this process."""
    global _allowed_modules
    _allowed_modules = tuple(m.strip() for m in modules if m.strip())


def plugin_allowed(path: str) -> bool:
    """Whether an import path ``module:attr`` names an allowed module."""
    module = path.partition(":")[0]
    return any(module == m or module.startswith(m + ".") for m in _allowed_modules)


class Registry(Generic[T]):
    def __init__(self, kind: str, error: type[PolarError]) -> None:
        self.kind = kind
        self.error = error
        self._items: dict[str, T] = {}
        self._paths: dict[str, str] = {}  # registered by import string, loaded on first use

    @classmethod
    def from_catalog(cls, kind: str, error: type[PolarError], catalog: dict[str, str]) -> "Registry[T]":
        """A registry of the catalogue's plug-ins (``pipeline/plugins.py``), each imported only
        when first resolved."""
        registry: Registry[T] = cls(kind, error)
        registry._paths.update(catalog)
        return registry

    def register(self, name: str, item: T) -> T:
        if name in self._items and self._items[name] is not item:
            raise self.error(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def names(self) -> list[str]:
        return sorted({*self._items, *self._paths})

    def __getitem__(self, name: str) -> T:
        """A registered item (no import paths)."""
        if name not in self:
            raise self.error(f"{self.kind} {name!r} is not registered")
        return self.resolve(name)

    def __iter__(self) -> Iterator[str]:
        return iter([*self._items, *(n for n in self._paths if n not in self._items)])

    def items(self) -> Iterator[tuple[str, T]]:
        """Registered items in registration order (detection order, for providers)."""
        return iter([(name, self.resolve(name)) for name in self])

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._paths

    def resolve(self, name: str) -> T:
        item = self._items.get(name)
        if item is not None:
            return item
        if name in self._paths:
            item = self._import(name, self._paths[name])
            self._items[name] = item
            return item
        if ":" in name:
            if not plugin_allowed(name):
                raise self.error(f"{self.kind} {name!r} is not allowed: its module is not in POLAR_PLUGIN_MODULES")
            return self._import(name, name)
        raise self.error(f"{self.kind} {name!r} is not available in this build "
                         f"(available: {', '.join(self.names())})")

    def _import(self, name: str, path: str) -> T:
        try:
            resolved: T = pkgutil.resolve_name(path)
            return resolved
        except (ImportError, AttributeError, ValueError) as exc:
            raise self.error(f"cannot import {self.kind} {name!r}: {exc}") from exc

    def build(self, name: str, config: dict[str, Any] | None = None) -> Any:
        """Resolve a factory and call it with ``config`` as keywords; a bad config is the seam's
        error."""
        factory: Any = self.resolve(name)
        try:
            return factory(**(config or {}))
        except TypeError as exc:
            raise self.error(f"bad config for {self.kind} {name!r}: {exc}") from exc
