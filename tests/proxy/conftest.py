"""Proxy stacks: embedded Redis + an upstream + the proxy under gunicorn/gevent, as real
processes. Sessions are registered directly in RUNNING state (tests/support.py)."""

from __future__ import annotations

import pytest

from infra.stack import Stack, StackConfig
from pipeline.settings import Settings


@pytest.fixture(scope="session")
def fake_stack(tmp_path_factory):
    """The proxy in front of the instant fake upstream (faults chosen by model name)."""
    settings = Settings(home=tmp_path_factory.mktemp("fake-home"), stream_keepalive_seconds=0.3,
                        upstream_timeout_seconds=3, max_request_bytes=1_000_000)
    with Stack(StackConfig(settings=settings, upstream="fake", components=("proxy",))) as stack:
        yield stack


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"
POLICIES = {"sdk-tools": str(FIXTURES / "sdk_tools_policy.json"),
            "sdk-think": str(FIXTURES / "sdk_think_policy.json"),
            "sdk-bigint": str(FIXTURES / "sdk_bigint_policy.json")}


def _ref_stack(tmp_path_factory, model_dir, dialect: str):
    settings = Settings(home=tmp_path_factory.mktemp(f"ref-{dialect}"), upstream_engine=dialect)
    return Stack(StackConfig(settings=settings, upstream="reference", dialect=dialect, model_dir=model_dir,
                             policies=POLICIES, components=("proxy",)))


@pytest.fixture(scope="session")
def ref_stack(tmp_path_factory, model_dir):
    """The proxy in front of the reference model server (vLLM dialect)."""
    with _ref_stack(tmp_path_factory, model_dir, "vllm") as stack:
        yield stack


@pytest.fixture(scope="session")
def sglang_stack(tmp_path_factory, model_dir):
    """The proxy with its SGLang engine, in front of the reference server speaking SGLang."""
    with _ref_stack(tmp_path_factory, model_dir, "sglang") as stack:
        yield stack


@pytest.fixture(scope="session")
def strip_stack(tmp_path_factory, model_dir):
    """The reference server rendering with a template that strips reasoning from history
    (DeepSeek-R1 style): sampled turns are re-rendered differently, i.e. context drift."""
    import infra.refserver

    template = __import__("pathlib").Path(infra.refserver.__file__).parent / "templates" / "strip_history_reasoning.jinja"
    settings = Settings(home=tmp_path_factory.mktemp("ref-strip"))
    with Stack(StackConfig(settings=settings, upstream="reference", model_dir=model_dir, policies=POLICIES,
                           components=("proxy",), chat_template=template)) as stack:
        yield stack, template
