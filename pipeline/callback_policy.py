"""Where a task's ``callback_url`` may point (pure). A payload must not turn the callback POST
into a request against this service's own control surfaces (the API, the proxy's admin
endpoints, Flower); with ``POLAR_CALLBACK_ALLOWED_HOSTS`` set, only those hosts are allowed."""

from __future__ import annotations

from urllib.parse import urlsplit

from pipeline.settings import Settings

LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "ip6-localhost"}


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return ("loopback" if host in LOOPBACK or host.startswith("127.") else host), port


def refusal(url: str, settings: Settings, *, own_urls: tuple[str, ...] = ()) -> str | None:
    """Why ``url`` may not receive callbacks, or None when it may. A templated URL (``{...}``)
    cannot be judged yet: it is judged again when the callback is delivered."""
    if "{" in url:
        return None
    target = _host_port(url)
    if target[1] is None:
        return "callback_url has an invalid port"
    allowed = [h.strip().lower() for h in settings.callback_allowed_hosts.split(",") if h.strip()]
    if allowed and urlsplit(url).hostname not in allowed and target[0] not in allowed:
        return f"callback_url host is not in POLAR_CALLBACK_ALLOWED_HOSTS ({', '.join(allowed)})"
    for own in (settings.api_url, settings.proxy_url, *own_urls):
        if _host_port(own) == target:
            return "callback_url points at this service's own endpoints"
    return None
