"""``polar weights``: the proxy's weight-sync pause from the command line -- see who holds it, hold
it, give a hold back, or end every hold (an operator's way out of a pause whose trainer died,
before its lease lapses). The same calls as a trainer's ``pipeline.weight_sync.ProxyAdmin``."""

from __future__ import annotations

from typing import Any

import click

from infra.cli.errors import BadOutcome, Unusable, translate
from infra.cli.output import emit_json, json_option, note
from infra.cli.params import SECONDS
from infra.cli.state import client_settings
from pipeline.weight_sync import ProxyAdmin, WeightSyncError


@click.group()
def weights() -> None:
    """Weight sync on the running stack's proxy: status, pause, resume (needs POLAR_ADMIN_TOKEN,
    which `polar up` stores in its home)."""


@weights.command()
@json_option
def status(as_json: bool) -> None:
    """Whether inference is paused, by how many holders, until when; the policy version."""
    state = _ask(lambda admin: admin.status())
    emit_json(state) if as_json else _print(state)


@weights.command()
@click.option("--holder", default=None, help="Hold (or renew) the pause as this holder; default: a new one.")
@click.option("--lease", "lease_seconds", type=SECONDS, default=600.0, show_default=True,
              help="The hold lapses by itself after this long unless renewed.")
@click.option("--drain", "drain_seconds", type=SECONDS, default=60.0, show_default=True,
              help="Wait up to this long for the calls in flight to end.")
@json_option
def pause(holder: str | None, lease_seconds: float, drain_seconds: float, as_json: bool) -> None:
    """Hold the pause: new model calls wait, the calls in flight drain. Exit 1 when they had not
    drained in time (the hold stays: resume it)."""
    hold = _ask(lambda admin: admin.pause(holder=holder, drain_seconds=drain_seconds, lease_seconds=lease_seconds))
    if as_json:
        emit_json(hold.__dict__)
    else:
        note(f"held by {hold.holder} until {_when(hold.lease_expires_at)}; "
             + ("drained" if hold.drained else f"{hold.inflight} call(s) still in flight"))
    if not hold.drained:
        raise BadOutcome(f"{hold.inflight} call(s) still in flight after {drain_seconds:g} s; the pause is held "
                         f"(`polar weights resume --holder {hold.holder}` gives it back)")


@weights.command()
@click.option("--holder", default=None, help="The hold to give back (the one `pause` answered); "
                                             "may be left out while one holder holds it.")
@click.option("--version", "policy_version", default=None, help="Stamp this policy version from now on.")
@click.option("--force", is_flag=True, help="End every hold and skip the checks (a version older than the "
                                            "current one, calls still in flight).")
@json_option
def resume(holder: str | None, policy_version: str | None, force: bool, as_json: bool) -> None:
    """End a hold (with --force: every hold). Exit 1 when the proxy refuses (409: several
    holders and none named, a holder that holds nothing, calls still in flight under a new
    version, a version going back)."""
    try:
        state = _ask(lambda admin: admin.resume(holder=holder, policy_version=policy_version, force=force))
    except WeightSyncError as exc:
        raise BadOutcome(f"{exc.status} ({exc.code}): {exc}") from exc
    emit_json(state) if as_json else _print(state)


def _ask(call: Any) -> Any:
    """One call to the proxy's admin surface; an unreachable or closed proxy is exit 2, a
    refusal (409) is the caller's to judge."""
    settings = client_settings()
    if not settings.proxy_url:
        raise Unusable("no proxy to ask: is `polar up` running, or POLAR_PROXY_URL set?")
    with ProxyAdmin(settings.proxy_url, settings.secret("admin_token")) as admin:
        try:
            return call(admin)
        except WeightSyncError as exc:
            if exc.status == 409:
                raise
            raise translate(exc) from exc


def _print(state: dict[str, Any]) -> None:
    paused = state.get("paused")
    line = (f"paused by {state.get('holders')} holder(s), the latest lease until {_when(state.get('lease_expires_latest'))}"
            if paused else "not paused")
    note(f"{line}; policy version {state.get('policy_version') or '(none)'}; {state.get('inflight')} call(s) in flight")


def _when(epoch: Any) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(float(epoch))) if epoch else "?"
