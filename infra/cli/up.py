"""``polar up`` (the whole stack in the foreground) and ``polar demo`` (up + one example task)."""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import time
import uuid
from pathlib import Path

import click

from infra.cli.errors import INTERRUPTED, Unusable
from infra.cli.output import emit_json, json_option, note
from infra.cli.params import SAMPLES, SECONDS
from infra.cli.state import up_state_file, write_up_state
from infra.tokens import make_home, tokens_file
from pipeline.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # a source checkout


def _stack(settings: Settings, policies: dict[str, str], flower_port: int | None, model: bool,
           fixed_ports: bool, persist: bool = False):
    from infra.stack import Stack, StackConfig

    return Stack(StackConfig(settings=settings, policies=policies, flower_port=flower_port,
                             upstream="reference" if model else "external", fixed_ports=fixed_ports,
                             persist_redis=persist))


DEMO_POLICY = {"demo-policy": str(EXAMPLES / "demo_policy.json")}


def _policies(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=FILE, got {item!r}", param_hint="--policy")
        try:  # checked now: the model server would fail on it only once the whole stack is starting
            json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise click.BadParameter(f"{path}: not a readable JSON policy file ({exc})", param_hint="--policy") from None
        out[name] = str(Path(path).resolve())
    return out


def _start(stack) -> None:
    """Start the stack with a progress bar (stderr) naming what is still starting; a stack that
    cannot start is a configuration problem (exit 2), its error shown."""
    from infra.cli.output import progress

    with progress() as bars:
        bar = bars.add_task("starting", total=None, detail="")
        total: list[int] = []

        def waiting(names: list[str]) -> None:
            if not total:
                total.append(len(names))
                bars.update(bar, total=len(names))
            bars.update(bar, completed=total[0] - len(names), detail="waiting for " + ", ".join(names))

        try:
            stack.start(on_waiting=waiting)
        except (RuntimeError, TimeoutError) as exc:
            raise Unusable(f"the stack did not start: {exc}\n(logs: {stack.log_dir})") from exc
        bars.update(bar, completed=total[0] if total else 1, total=total[0] if total else 1, detail="all ready")


def _sigterm_as_interrupt() -> None:
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@click.command(epilog="Ctrl-C (or SIGTERM) stops everything and exits 0; exit 2 when the stack cannot start, "
                      "130 when interrupted while it starts.")
@click.option("--flower-port", type=int, default=None, help="Also start Flower on this port.")
@click.option("--policy", "policies", multiple=True, metavar="NAME=FILE",
              help="Serve a scripted policy as model NAME (repeatable; demo-policy is served already).")
@click.option("--no-model", is_flag=True, help="Use POLAR_UPSTREAM_URL (vLLM/SGLang) instead of the reference server.")
def up(flower_port: int | None, policies: tuple[str, ...], no_model: bool) -> None:
    """Start embedded Redis (unless POLAR_REDIS_URL is set), one worker per stage, the proxy,
    the API and the reference model; Ctrl-C stops everything."""
    extra = _policies(policies)
    _sigterm_as_interrupt()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack on stderr
    settings = Settings.from_env()
    # The demo task's scripted policy comes with the reference model, so the README's
    # `polar up` + `polar submit examples/demo_task.json` works as written.
    served = {**({} if no_model else DEMO_POLICY), **extra}
    stack = _stack(settings, served, flower_port, not no_model, fixed_ports=True, persist=True)
    click.echo("starting ...")
    ready = False
    try:
        _start(stack)
        ready = True
        write_up_state(stack.settings, stack.state())
        for k, v in stack.state().items():
            click.echo(f"  {k:13} {v}")
        click.echo(f"  {'tokens':13} {tokens_file(stack.settings)} (API bearer token, proxy admin token, Flower "
                   "user:password, callback signing key; `polar` commands read it)")
        click.echo(f"  {'uploads from':13} {stack.settings.upload_roots} (POLAR_UPLOAD_ROOTS)")
        click.echo(f"  {'proxy socket':13} {stack.settings.proxy_socket} (runtimes without a network use it)")
        allowed = stack.settings.allowed_runtime_backends
        click.echo(f"  {'runtime':13} {stack.settings.default_runtime_backend} by default "
                   "(POLAR_DEFAULT_RUNTIME_BACKEND); a task may ask for "
                   + (f"{allowed} (POLAR_ALLOWED_RUNTIME_BACKENDS)" if allowed is not None else "any backend"))
        click.echo("ready; a service that dies is restarted; Ctrl-C stops everything")
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        click.echo("stopping ...")
    finally:
        stack.stop()
        if ready:  # (written by this stack; a refused one leaves the running one's alone)
            up_state_file(stack.settings).unlink(missing_ok=True)
    if not ready:
        sys.exit(INTERRUPTED)


@click.command(epilog="Exit 0 when every session completed, 1 when one did not, 2 when the stack cannot "
                      "start, 130 when interrupted.")
@click.option("--samples", type=SAMPLES, default=4, show_default=True)
@click.option("--timeout", type=SECONDS, default=600.0, show_default=True)
@json_option
def demo(samples: int, timeout: float, as_json: bool) -> None:
    """Start the stack, run the example agent on an example task, print what happened."""
    from infra.cli.render import FollowTimeout, follow, task_summary
    from infra.refserver import build_tiny_model
    from pipeline.client import RolloutClient, load_task_file

    _sigterm_as_interrupt()
    started = time.monotonic()
    task_file = EXAMPLES / "demo_task.json"
    if not task_file.exists():
        raise Unusable(f"{task_file} not found: run `polar demo` from a source checkout")
    settings = Settings.from_env()
    if settings.redis_url is None:
        note("redis: embedded (no POLAR_REDIS_URL)", as_json)
    t = time.monotonic()
    make_home(settings)
    model_dir = build_tiny_model(settings.model_dir)
    note(f"model: {model_dir} ({time.monotonic() - t:.1f}s)", as_json)
    stack = _stack(settings, DEMO_POLICY, None, True, False)
    ok, interrupted, summary = False, False, {}
    try:
        t = time.monotonic()
        _start(stack)
        note(f"stack up in {time.monotonic() - t:.1f}s: api {stack.settings.api_url}, "
             f"proxy {stack.settings.proxy_url}, model {stack.settings.upstream_url}; logs in {stack.log_dir}", as_json)
        client = RolloutClient.from_settings(stack.settings)
        task = load_task_file(task_file)
        task.update(num_samples=samples, task_id=f"demo-{uuid.uuid4().hex[:8]}")
        task_id = client.submit(task)
        status = follow(client, task_id, timeout=timeout, tables=not as_json)
        received = []
        for item in client.results(group=f"demo-{task_id}", consumer="demo", block_ms=500, stop_after=5):
            if item.result.task_id == task_id:
                received.append(item.result)
                item.ack()
            if len(received) == samples:
                break
        completed = [r for r in received if r.status.value == "COMPLETED"]
        rewards = sorted({r.reward for r in received if r.reward is not None})
        note(f"results stream: {len(received)} msgpack results received by a trainer consumer group; "
             f"rewards {rewards}", as_json)
        ok = len(completed) == samples == status.counts.get("COMPLETED", 0)
        note(f"[bold]{len(completed)}/{samples} sessions completed[/bold]", as_json)
        summary = {"task": task_summary(status), "samples": samples, "completed": len(completed),
                   "results_received": len(received), "rewards": rewards, "ok": ok}
    except KeyboardInterrupt:
        interrupted = True
        note("interrupted", as_json)
    except TimeoutError as exc:  # the task outlived --timeout: the outcome is bad, not the input
        note(f"error: {exc}", as_json)
        last = exc.last if isinstance(exc, FollowTimeout) else None
        summary = {"task": task_summary(last) if last is not None else None, "samples": samples, "ok": False,
                   "timed_out": True}
    finally:
        stack.stop()
        note(f"demo wall time: {time.monotonic() - started:.1f}s", as_json)
    if as_json and summary:
        emit_json({**summary, "wall_s": round(time.monotonic() - started, 1)})
    sys.exit(INTERRUPTED if interrupted else 0 if ok else 1)
