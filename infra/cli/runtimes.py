"""``polar runtimes``: what runs on this host for sessions -- and sweeping what they left."""

from __future__ import annotations

import click

from infra.cli.errors import Unusable
from infra.cli.output import emit_json, json_option
from infra.cli.params import NON_NEGATIVE
from infra.cli.state import client_settings


@click.group()
def runtimes() -> None:
    """Session runtimes on this host (directories, processes, containers)."""


@runtimes.command()
@click.option("--min-age", type=NON_NEGATIVE, default=30.0, show_default=True,
              help="Leave runtimes younger than this many seconds (INIT may be making them).")
@click.option("--stack-gone", is_flag=True,
              help="Redis is gone with its stack: treat every session as over and remove everything "
                   "under this host's runtime folder.")
@json_option
def sweep(min_age: float, stack_gone: bool, as_json: bool) -> None:
    """Remove the runtimes of sessions that are over or unknown (the workers do this on their
    own every reaper pass; this is for a host whose stack was lost)."""
    from pipeline.stores import Stores
    from pipeline.stores.connection import connect
    from workers.runtimes import RuntimeHost, sweeper

    settings = client_settings()
    if stack_gone:
        _refuse_while_a_stack_runs(settings.home)
        status_of = lambda _sid: None  # noqa: E731
    else:
        if not settings.redis_url:
            raise Unusable("no Redis to ask which sessions are live (is `polar up` running, or "
                           "POLAR_REDIS_URL set?); --stack-gone removes everything instead")
        status_of = Stores.open(connect(settings, mode="quick"), settings).sessions.status
    removed = sweeper.sweep(RuntimeHost.of(settings), status_of, min_age=min_age)
    if as_json:
        emit_json({"runtime_root": str(settings.runtime_root), "removed": list(removed)})
        return
    for name in removed:
        click.echo(f"removed {name}")
    click.echo(f"{len(removed)} removed from {settings.runtime_root}")


def _refuse_while_a_stack_runs(home) -> None:
    """--stack-gone kills every session's processes: never under a stack still running on this
    home (it holds the home's lock, infra/home_lock.py)."""
    from infra.home_lock import HomeInUse, claim_home, release

    if not home.is_dir():
        return
    try:
        release(claim_home(home))
    except HomeInUse as exc:
        raise Unusable(f"{exc}; --stack-gone is for a stack that is gone (without it, Redis says which "
                       "sessions are over)") from None
