"""``polar model build`` / ``polar model serve``: the reference inference server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from infra.cli.errors import Unusable
from infra.tokens import make_home
from pipeline.loopback import is_loopback_name
from pipeline.settings import Settings


@click.group()
def model() -> None:
    """The reference inference server (transformers, CPU, vLLM's token-id API)."""


@model.command("build")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Default: $POLAR_HOME/models/tiny-qwen2")
@click.option("--seed", type=int, default=0)
@click.option("--force", is_flag=True)
def build(out: Path | None, seed: int, force: bool) -> None:
    """Build the tiny offline model (BPE tokenizer, ChatML template, tiny Qwen2)."""
    from infra.refserver import build_tiny_model

    settings = Settings.from_env()
    if out is None:
        make_home(settings)
    click.echo(build_tiny_model(out or settings.model_dir, seed=seed, force=force))


@model.command("serve")
@click.option("--model-dir", type=click.Path(path_type=Path), default=None,
              help="Any local Hugging Face causal-LM folder (default: the tiny model, built if missing).")
@click.option("--host", default="127.0.0.1")
@click.option("--port", type=int, default=None, help="Default: the port of POLAR_UPSTREAM_URL.")
@click.option("--served-name", default="tiny")
@click.option("--policy", "policies", multiple=True, metavar="NAME=FILE",
              help="Serve a scripted policy as model NAME (repeatable).")
@click.option("--max-model-len", type=int, default=32768)
@click.option("--dialect", type=click.Choice(["vllm", "sglang"]), default="vllm",
              help="Which engine's token-id fields to speak.")
@click.option("--chat-template", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Render prompts with this Jinja template instead of the model's (like vLLM's flag).")
@click.option("--unauthenticated", is_flag=True,
              help="Allow a --host beyond loopback: the server has no auth, like vLLM without --api-key, so only "
                   "on a private network (a compose network, a cluster service).")
def serve(model_dir: Path | None, host: str, port: int | None, served_name: str,
          policies: tuple[str, ...], max_model_len: int, dialect: str, chat_template: Path | None,
          unauthenticated: bool) -> None:
    """Serve a model with vLLM's OpenAI-compatible token-id API."""
    from infra.http_errors import configure_threads
    from infra.refserver import build_tiny_model
    from infra.serve import run

    if not unauthenticated and not is_loopback_name(host):
        raise Unusable(f"refusing to serve the model on {host} without auth: bind to 127.0.0.1, or pass "
                       "--unauthenticated on a private network")

    settings = Settings.from_env()
    if model_dir is None:
        make_home(settings)
        model_dir = build_tiny_model(settings.model_dir)
    elif not (model_dir / "config.json").is_file():
        # (checked here: the server would find out in its worker, as a traceback and gunicorn's exit 3)
        raise Unusable(f"--model-dir {model_dir}: not a model folder (no config.json there)")
    parsed = {}
    for item in policies:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"expected NAME=FILE, got {item!r}", param_hint="--policy")
        parsed[name] = str(Path(path).resolve())
    os.environ.update({"POLAR_REFSERVER_MODEL_DIR": str(model_dir), "POLAR_REFSERVER_NAME": served_name,
                       "POLAR_REFSERVER_POLICIES": json.dumps(parsed),
                       "POLAR_REFSERVER_MAX_MODEL_LEN": str(max_model_len), "HF_HUB_OFFLINE": "1",
                       "POLAR_REFSERVER_DIALECT": dialect,
                       "POLAR_REFSERVER_CHAT_TEMPLATE": str(chat_template.resolve()) if chat_template else ""})
    port = port or int(settings.upstream_url.rsplit(":", 1)[1].split("/")[0])
    configure_threads(settings.http_head_seconds, settings.http_idle_seconds)
    run("infra.refserver.wsgi:app", f"{host}:{port}", "model")


@model.command("fake")
@click.option("--host", default="127.0.0.1")
@click.option("--port", type=int, required=True)
@click.option("--workers", type=int, default=1)
def fake(host: str, port: int, workers: int) -> None:
    """Serve the instant fake upstream (benchmarks and fault tests; see infra/fake_upstream.py)."""
    from infra.serve import run

    run("infra.fake_upstream:app", f"{host}:{port}", "proxy", workers=workers)
