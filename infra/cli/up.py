"""``polar up`` (the whole stack in the foreground) and ``polar demo`` (up + one example task)."""

from __future__ import annotations

import signal
import sys
import time
import uuid
from pathlib import Path

import click

from infra.cli.state import up_state_file, write_up_state
from infra.tokens import tokens_file
from pipeline.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # a source checkout


def _stack(settings: Settings, policies: dict[str, str], flower_port: int | None, model: bool,
           fixed_ports: bool, persist: bool = False):
    from infra.stack import Stack, StackConfig

    return Stack(StackConfig(settings=settings, policies=policies, flower_port=flower_port,
                             upstream="reference" if model else "external", fixed_ports=fixed_ports,
                             persist_redis=persist))


def _policies(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=FILE, got {item!r}", param_hint="--policy")
        out[name] = str(Path(path).resolve())
    return out


def _sigterm_as_interrupt() -> None:
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@click.command()
@click.option("--flower-port", type=int, default=None, help="Also start Flower on this port.")
@click.option("--policy", "policies", multiple=True, metavar="NAME=FILE",
              help="Serve a scripted policy as model NAME (repeatable).")
@click.option("--no-model", is_flag=True, help="Use POLAR_UPSTREAM_URL (vLLM/SGLang) instead of the reference server.")
def up(flower_port: int | None, policies: tuple[str, ...], no_model: bool) -> None:
    """Start embedded Redis (unless POLAR_REDIS_URL is set), one worker per stage, the proxy,
    the API and the reference model; Ctrl-C stops everything."""
    _sigterm_as_interrupt()
    settings = Settings.from_env()
    stack = _stack(settings, _policies(policies), flower_port, not no_model, fixed_ports=True, persist=True)
    click.echo("starting ...")
    try:
        stack.start()
        write_up_state(stack.settings, stack.state())
        for k, v in stack.state().items():
            click.echo(f"  {k:13} {v}")
        click.echo(f"  {'tokens':13} {tokens_file(stack.settings)} (API bearer token, proxy admin token, Flower "
                   "user:password, callback signing key; `polar` commands read it)")
        click.echo(f"  {'uploads from':13} {stack.settings.upload_roots} (POLAR_UPLOAD_ROOTS)")
        click.echo(f"  {'proxy socket':13} {stack.settings.proxy_socket} (runtimes without a network use it)")
        click.echo(f"  {'runtime':13} {stack.settings.default_runtime_backend} by default "
                   "(POLAR_DEFAULT_RUNTIME_BACKEND; a task may ask for another)")
        click.echo("ready; a service that dies is restarted; Ctrl-C stops everything")
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        click.echo("stopping ...")
    finally:
        stack.stop()
        up_state_file(stack.settings).unlink(missing_ok=True)


@click.command()
@click.option("--samples", type=int, default=4, show_default=True)
@click.option("--timeout", type=float, default=600.0, show_default=True)
def demo(samples: int, timeout: float) -> None:
    """Start the stack, run the example agent on an example task, print what happened."""
    from infra.cli.render import console, follow
    from infra.refserver import build_tiny_model
    from pipeline.client import RolloutClient, load_task_file

    _sigterm_as_interrupt()
    started = time.monotonic()
    task_file = EXAMPLES / "demo_task.json"
    if not task_file.exists():
        raise click.ClickException(f"{task_file} not found: run `polar demo` from a source checkout")
    settings = Settings.from_env()
    if settings.redis_url is None:
        console.print("redis: embedded (no POLAR_REDIS_URL)")
    t = time.monotonic()
    model_dir = build_tiny_model(settings.model_dir)
    console.print(f"model: {model_dir} ({time.monotonic() - t:.1f}s)")
    stack = _stack(settings, {"demo-policy": str(EXAMPLES / "demo_policy.json")}, None, True, False)
    ok = False
    try:
        t = time.monotonic()
        stack.start()
        console.print(f"stack up in {time.monotonic() - t:.1f}s: api {stack.settings.api_url}, "
                      f"proxy {stack.settings.proxy_url}, model {stack.settings.upstream_url}; "
                      f"logs in {stack.log_dir}")
        client = RolloutClient.from_settings(stack.settings)
        task = load_task_file(task_file)
        task.update(num_samples=samples, task_id=f"demo-{uuid.uuid4().hex[:8]}")
        task_id = client.submit(task)
        status = follow(client, task_id, timeout=timeout)
        received = []
        for item in client.results(group=f"demo-{task_id}", consumer="demo", block_ms=500, stop_after=5):
            if item.result.task_id == task_id:
                received.append(item.result)
                item.ack()
            if len(received) == samples:
                break
        completed = [r for r in received if r.status.value == "COMPLETED"]
        rewards = sorted({r.reward for r in received if r.reward is not None})
        console.print(f"results stream: {len(received)} msgpack results received by a trainer consumer group; "
                      f"rewards {rewards}")
        ok = len(completed) == samples == status.counts.get("COMPLETED", 0)
        console.print(f"[bold]{len(completed)}/{samples} sessions completed[/bold]")
    except KeyboardInterrupt:
        console.print("interrupted")
    finally:
        stack.stop()
        console.print(f"demo wall time: {time.monotonic() - started:.1f}s")
    sys.exit(0 if ok else 1)
