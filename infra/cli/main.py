"""``polar``: run the stack, submit tasks, watch them, and run any one service by itself.

Services are started from import strings (``proxy.wsgi:app``, ``workers.stages.tasks``) in
their own processes; commands import what they run lazily so ``polar --help`` stays fast and
``polar proxy`` can patch with gevent before anything else loads.
"""

from __future__ import annotations

import os
import tempfile

# Every service packs token arrays with numpy but none does linear algebra, and numpy's OpenBLAS
# otherwise starts a thread per core in every process (and pool child) that wakes and spins now
# and then: ~3 % of a proxy worker's CPU under load. Set before anything imports numpy; the
# children the CLI starts inherit it. An operator's own value wins. (Not OMP_NUM_THREADS: the
# reference model's torch sizes its pool by that.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402

from infra.cli.errors import EPILOG, BadOutcome, PolarGroup, Unusable  # noqa: E402
from infra.cli.output import emit_json, json_option  # noqa: E402
from infra.cli.params import ID, SECONDS  # noqa: E402
from infra.cli.state import client_settings  # noqa: E402
from pipeline.loopback import is_loopback_name  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.status import Stage  # noqa: E402


@click.group(cls=PolarGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
def cli() -> None:
    """polar-rollout: RL rollouts on unmodified agent harnesses."""


# --- services ----------------------------------------------------------------------------------

@cli.command()
@click.option("--stage", type=click.Choice([s.value for s in Stage]), required=True)
@click.option("-c", "--concurrency", type=int, default=None, help="Slots (threads or processes).")
@click.option("--pool", default=None, help="Override the stage's pool (threads, prefork, ...).")
@click.option("--hostname", default="%h", help="Worker name suffix (name is <stage>@<hostname>).")
@click.option("--loglevel", default="INFO")
@click.option("--soft-shutdown-timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="On SIGTERM, stop taking messages and let running stages finish for this long, then "
                   "shut down cold (prefork: re-queued; a thread pool waits for them anyway). "
                   "A deploy's drain; give its grace period more.")
def worker(stage: str, concurrency: int | None, pool: str | None, hostname: str, loglevel: str,
           soft_shutdown_timeout: float) -> None:
    """Run the Celery worker of one stage queue (e.g. `polar worker --stage run -c 8`)."""
    from infra.stack import STAGE_CONCURRENCY, STAGE_POOLS
    from pipeline.celery_app import STAGE_TASKS_MODULE, make_app

    st = Stage(stage)
    settings = Settings.from_env()
    settings.require_redis()
    os.environ.setdefault("REMAP_SIGTERM", "SIGQUIT")  # SIGTERM -> soft shutdown, then cold (see the option)
    # The worker's own temporary files (a patch being graded, a container's files on their way
    # out) under POLAR_HOME, which no sandbox sees, not in the /tmp every bwrap session can read.
    private_tmp = settings.home / "tmp"
    private_tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(private_tmp)
    tempfile.tempdir = None  # read TMPDIR again
    argv = ["worker", "-Q", st.queue, "-n", f"{st.value}@{hostname}",
            "-P", pool or STAGE_POOLS[st], "-c", str(concurrency or STAGE_CONCURRENCY[st]),
            "-I", STAGE_TASKS_MODULE, *(["-E"] if settings.task_events else []),
            "--without-gossip", "--without-mingle", "--loglevel", loglevel]
    app = make_app(settings)
    app.conf.worker_soft_shutdown_timeout = soft_shutdown_timeout
    app.worker_main(argv)


@cli.command()
@click.option("--host", default="127.0.0.1")
@click.option("--port", type=int, default=None, help="Default: the port of POLAR_PROXY_URL.")
@click.option("--workers", type=int, default=None, help="gunicorn worker processes (gevent).")
@click.option("--socket", "socket_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also listen on this Unix socket (default: POLAR_PROXY_SOCKET): runtimes without a "
                   "network reach the proxy through it.")
def proxy(host: str, port: int | None, workers: int | None, socket_path: Path | None) -> None:
    """Run the model-API proxy (gunicorn + gevent)."""
    settings = Settings.from_env()
    settings.require_redis()
    _refuse_open_bind(host, settings.secret("admin_token"), "POLAR_ADMIN_TOKEN", "the proxy's /admin endpoints")
    from gevent import monkey

    monkey.patch_all()  # before redis/ssl are imported anywhere in this process (nothing above imports them)
    from infra.serve import metrics_folder, run, slow_client_limits

    binds = [f"{host}:{port or _port(settings.proxy_url)}"]
    socket_path = socket_path or settings.proxy_socket
    if socket_path:
        socket_path.parent.mkdir(parents=True, exist_ok=True)
        binds.append(f"unix:{socket_path}")
    slow_client_limits(settings)
    with metrics_folder() as child_exit:
        run("proxy.wsgi:app", binds, "proxy", workers=workers, child_exit=child_exit)


@cli.command()
@click.option("--host", default="127.0.0.1")
@click.option("--port", type=int, default=None, help="Default: the port of POLAR_API_URL.")
def api(host: str, port: int | None) -> None:
    """Run the rollout API (gunicorn + gevent)."""
    settings = Settings.from_env()
    settings.require_redis()
    _refuse_open_bind(host, settings.secret("api_token"), "POLAR_API_TOKEN", "the rollout API")
    from gevent import monkey

    monkey.patch_all()  # before redis is imported anywhere in this process (nothing above imports it)
    from infra.serve import run, slow_client_limits

    slow_client_limits(settings)
    run("pipeline.api.wsgi:app", f"{host}:{port or _port(settings.api_url)}", "api")


@cli.command()
@click.option("--port", type=int, default=5555)
@click.option("--address", default="127.0.0.1")
def flower(port: int, address: str) -> None:
    """Run Flower on this project's broker (the running `polar up`, or POLAR_REDIS_URL)."""
    from pipeline.celery_app import make_app

    settings = client_settings()
    settings.require_redis()
    auth = settings.secret("flower_basic_auth")
    if not auth:
        # Never without a login, loopback or not: Flower's unauthenticated API answers any web
        # page the user visits (it sends Access-Control-Allow-Origin: *), and it can shut
        # workers down. The home's stored login, else a new one stored there.
        from infra.tokens import make_home, stored_secret

        make_home(settings)
        auth = stored_secret(settings, "flower_basic_auth")
        click.echo(f"Flower's login (user:password) is flower_basic_auth in {settings.home / 'tokens.json'}", err=True)
    os.environ["FLOWER_BASIC_AUTH"] = auth  # (an environment variable: a command line is visible to every local user)
    os.environ.pop("FLOWER_UNAUTHENTICATED_API", None)
    from infra.flower import patch_flower

    patch_flower()  # a stage queue without a worker is still listed, /metrics asks for auth (infra/flower.py)
    # Flower keeps 100,000 tasks by default (5 a session: ~550 MB); FLOWER_MAX_TASKS still wins.
    max_tasks = [] if os.environ.get("FLOWER_MAX_TASKS") else [f"--max_tasks={FLOWER_MAX_TASKS}"]
    app = make_app(settings)
    try:
        app.start(["flower", f"--port={port}", f"--address={address}", *max_tasks])
    finally:
        # Flower turned task events on in every worker (enable_events); they cost CPU per task and
        # nothing turns them off once it is gone.
        try:
            app.control.disable_events()
        except Exception as exc:  # noqa: BLE001 - the broker may be the reason Flower stopped
            click.echo(f"could not turn the workers' task events off: {exc}", err=True)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


FLOWER_MAX_TASKS = 10_000  # the tasks Flower keeps in memory (2,000 sessions' worth; ~47 MB)


def _refuse_open_bind(host: str, secret: str | None, variable: str, what: str) -> None:
    """Beyond loopback, a control surface without its secret is open to the network: refuse."""
    if secret is None and not is_loopback_name(host):  # (not resolved: 127.example.com may be anywhere)
        raise Unusable(f"refusing to expose {what} on {host} without {variable}: set it, "
                                   "or bind to 127.0.0.1")


# --- tasks -------------------------------------------------------------------------------------

@cli.command(epilog="Exit 0 when every session completed (with --wait), 1 when one did not or the wait "
                     "timed out, 2 when the API refuses the payload (its field errors are printed).")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait/--no-wait", default=False, help="Follow progress and print a summary.")
@click.option("--timeout", type=SECONDS, default=None)
@json_option
def submit(file: Path, wait: bool, timeout: float | None, as_json: bool) -> None:
    """Submit a TaskRequest JSON file (relative upload paths resolve against its folder)."""
    from infra.cli.render import FollowTimeout, follow, task_summary
    from pipeline.client import RolloutClient, load_task_file

    try:
        task = load_task_file(file)
    except (ValueError, UnicodeDecodeError) as exc:  # not JSON, or not a JSON object
        raise Unusable(f"{file}: not a task payload: {exc}") from exc
    client = RolloutClient.from_settings(client_settings())
    task_id = client.submit(task)
    if not wait:
        emit_json({"task_id": task_id}) if as_json else click.echo(task_id)
        return
    if not as_json:
        click.echo(task_id)
    try:
        status = follow(client, task_id, timeout=timeout, tables=not as_json)
    except FollowTimeout as exc:
        if as_json:  # the caller still learns the task id and how far it got, as JSON
            emit_json({**task_summary(exc.last), "timed_out": True})
        raise BadOutcome(str(exc)) from exc
    if as_json:
        emit_json(task_summary(status))
    if status.counts.get("COMPLETED", 0) != status.total_sessions:
        sys.exit(1)


@cli.command()
@click.argument("task_id", required=False, type=ID)
@json_option
def status(task_id: str | None, as_json: bool) -> None:
    """Pipeline status, or one task's sessions."""
    from infra.cli.render import print_pipeline, print_task
    from pipeline.client import RolloutClient

    client = RolloutClient.from_settings(client_settings())
    if task_id is None:
        data = client.pipeline_status()
        emit_json(data) if as_json else print_pipeline(data)
        return
    st = client.status(task_id, results=False)
    click.echo(st.model_dump_json(indent=2)) if as_json else print_task(st)


@cli.command()
@click.argument("task_id", type=ID)
def cancel(task_id: str) -> None:
    """Cancel every unfinished session of a task (their runtimes are torn down)."""
    from pipeline.client import RolloutClient

    click.echo(json.dumps(RolloutClient.from_settings(client_settings()).cancel(task_id)))


def _register_subcommands() -> None:
    from infra.cli.bench import bench
    from infra.cli.generate import generate
    from infra.cli.harnesses import harnesses
    from infra.cli.model import model
    from infra.cli.runtimes import runtimes
    from infra.cli.tools import tools
    from infra.cli.up import demo, up
    from infra.cli.verify import verify
    from infra.cli.weights import weights

    cli.add_command(verify)
    cli.add_command(weights)
    cli.add_command(up)
    cli.add_command(demo)
    cli.add_command(model)
    cli.add_command(runtimes)
    cli.add_command(tools)
    cli.add_command(harnesses)
    cli.add_command(generate)
    cli.add_command(bench)


_register_subcommands()


def main() -> None:
    """Entry point; errors and exit codes are the group's (infra/cli/errors.py)."""
    cli(standalone_mode=True)


if __name__ == "__main__":
    main()
