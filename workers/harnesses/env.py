"""The environment every harness gets: each provider's base URL pointing at the proxy, with the
session id in the path and as the API key (so either one identifies the session)."""

from __future__ import annotations

from pipeline.schemas import SessionSpec


def proxy_env(proxy_url: str, spec: SessionSpec) -> dict[str, str]:
    base = f"{proxy_url.rstrip('/')}/s/{spec.session_id}"
    sid = spec.session_id
    env = {
        "OPENAI_BASE_URL": f"{base}/v1",
        "OPENAI_API_KEY": sid,
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": sid,
        "GOOGLE_GEMINI_BASE_URL": base,
        "GOOGLE_API_URL": base,
        "GOOGLE_API_KEY": sid,
        "GEMINI_API_KEY": sid,
        "POLAR_SESSION_ID": sid,
        "POLAR_TASK_ID": spec.task_id,
        "POLAR_PROXY_URL": base,
        "POLAR_INSTRUCTION": spec.instruction,
    }
    if spec.agent.model_name:
        env["POLAR_MODEL"] = spec.agent.model_name
        env["OPENAI_MODEL"] = spec.agent.model_name
    return env


def harness_env(proxy_url: str, spec: SessionSpec) -> dict[str, str]:
    """Proxy wiring, then the runtime's env, then the agent's env (later wins)."""
    return {**proxy_env(proxy_url, spec), **spec.runtime.env, **spec.agent.env}
