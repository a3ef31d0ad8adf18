"""Which provider API a request speaks: by path, then headers, then body (pure).

Each provider module says which paths it serves (``match``); a path only one API serves decides
at once. Shared paths (a bare base URL, ``/v1/models``) go to the API whose headers claim the
request, then (POST) to the one whose body does, in registration order. Paths are matched after
the ``/s/<key>`` prefix is removed, with or without ``/v1`` (base URLs differ per harness:
Claude Code appends ``/v1/messages`` to a root URL, Codex appends ``/responses`` to one ending
in ``/v1``).
"""

from __future__ import annotations

from typing import Any

from pipeline.registry import Registry
from proxy.providers import DEFAULT, PROVIDERS, Provider, Route
from proxy.providers.base import Headers

HEALTH_PATHS = ("/", "/health")


def api_path(path: str) -> str:
    """The path an API sees: ``/s/<key>`` removed, one leading slash, none trailing."""
    if path.startswith("/s/"):
        path = "/" + path[3:].partition("/")[2]
    return "/" + path.strip("/")


def serves(method: str, path: str, providers: Registry[Provider] = PROVIDERS) -> bool:
    """Whether some API here serves this path (a POST no API serves is refused before its body
    is read: its error says so, not that the body is not JSON)."""
    path = "/" + path.strip("/")
    return any(p.match(method, path) is not None for _, p in providers.items())


def error_provider(path: str, headers: Headers, providers: Registry[Provider] = PROVIDERS) -> Provider:
    """Whose format a request's error answers in before (or without) a route: the API its headers
    claim, else the one whose paths it is on, else ``DEFAULT``'s."""
    path = "/" + path.strip("/")
    for _, p in providers.items():
        if p.claims_headers(headers):
            return p
    for _, p in providers.items():
        if p.claims_path(path):
            return p
    return providers[DEFAULT]


# What ``path_route`` answers for a path several APIs serve: their headers (or body) decide.
BY_HEADERS: Any = Route("by_headers", DEFAULT)


def path_route(method: str, path: str, providers: Registry[Provider] = PROVIDERS) -> Route | None:
    """The route when the path alone decides it (None: no API serves it), else ``BY_HEADERS``:
    what ``detect`` answers without reading headers or body (the hot path keeps it per path)."""
    path = "/" + path.strip("/")
    if method == "GET" and path in HEALTH_PATHS:
        return Route("health", DEFAULT)
    routes = [route for _, p in providers.items() if (route := p.match(method, path)) is not None]
    return (routes[0] if routes else None) if len(routes) <= 1 else BY_HEADERS


def detect(method: str, path: str, headers: Headers, body: Any = None,
           providers: Registry[Provider] = PROVIDERS) -> Route | None:
    """The route, or None when no API serves the request (for a bare-URL POST: pass the body)."""
    decided = path_route(method, path, providers)
    if decided is not BY_HEADERS:
        return decided
    path = "/" + path.strip("/")
    routes = {name: route for name, p in providers.items() if (route := p.match(method, path)) is not None}
    for name, p in providers.items():
        if name in routes and p.claims_headers(headers):
            return routes[name]
    if method != "POST":
        return routes.get(DEFAULT) or next(iter(routes.values()))
    if body is None:
        return None
    for name, p in providers.items():
        if name in routes and p.claims_body(body):
            return routes[name]
    return None
