"""The environment every harness gets: each provider's base URL pointing at the proxy with the
session's secret key in the path, and the same key as every API key. The key exists only here
(in the session's runtime); the public session id is ``POLAR_SESSION_ID``."""

from __future__ import annotations

from pipeline.schemas import SessionSpec

# Linux refuses to start a program whose single environment string exceeds 128 KiB; a longer
# instruction is only in the file (``{{INSTRUCTION}}`` reads it from there in any case).
INSTRUCTION_ENV_LIMIT = 100_000


def proxy_env(proxy_url: str, spec: SessionSpec, key: str) -> dict[str, str]:
    base = f"{proxy_url.rstrip('/')}/s/{key}"
    env = {
        "OPENAI_BASE_URL": f"{base}/v1",
        "OPENAI_API_KEY": key,
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": key,
        "GOOGLE_GEMINI_BASE_URL": base,
        "GOOGLE_API_URL": base,
        "GOOGLE_API_KEY": key,
        "GEMINI_API_KEY": key,
        "POLAR_SESSION_ID": spec.session_id,
        "POLAR_TASK_ID": spec.task_id,
        "POLAR_PROXY_URL": base,
    }
    if len(spec.instruction.encode()) <= INSTRUCTION_ENV_LIMIT:
        env["POLAR_INSTRUCTION"] = spec.instruction
    if spec.agent.model_name:  # every provider's own model variable, so any SDK picks the policy
        for name in ("POLAR_MODEL", "OPENAI_MODEL", "ANTHROPIC_MODEL", "GEMINI_MODEL"):
            env[name] = spec.agent.model_name
    return env


def harness_env(proxy_url: str, spec: SessionSpec, key: str) -> dict[str, str]:
    """Proxy wiring, then the runtime's env, then the agent's env (later wins)."""
    return {**proxy_env(proxy_url, spec, key), **spec.runtime.env, **spec.agent.env}
