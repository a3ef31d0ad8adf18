"""``polar harnesses``: the six agent CLIs of the harness presets, pinned, in the tools folder."""

from __future__ import annotations

import click

from infra.cli.state import client_settings


@click.group()
def harnesses() -> None:
    """The harness presets' CLIs (installed into POLAR_TOOLS_DIR, never globally)."""


def _pins(pins: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pin in pins:
        name, sep, version = pin.partition("=")
        if not sep or not version:
            raise click.BadParameter(f"{pin!r}: expected NAME=VERSION, e.g. codex=0.171.0", param_hint="--pin")
        out[name] = version
    return out


@harnesses.command()
@click.argument("names", nargs=-1)
@click.option("--pin", "pins", multiple=True, help="NAME=VERSION instead of the tested version.")
def install(names: tuple[str, ...], pins: tuple[str, ...]) -> None:
    """Install the CLIs of NAMES (default: all six) at their pinned versions. Idempotent."""
    from infra.harness_tools import ToolsInstallError, harness_specs
    from infra.harness_tools import install as do_install

    folder = client_settings().tools_path
    try:
        missing = harness_specs(folder, names, _pins(pins))
        do_install(folder, missing)
    except ToolsInstallError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{folder}: " + (f"installed {', '.join(missing)}" if missing else "already up to date"))


@harnesses.command(name="list")
def list_() -> None:
    """Each preset: its CLI, the pinned version and the installed one."""
    from infra.harness_tools import HARNESS_CLIS, installed_versions

    have = installed_versions(client_settings().tools_path)
    click.echo(f"{'harness':12} {'command':9} {'pinned':9} installed")
    for name, (_, pinned, command) in HARNESS_CLIS.items():
        click.echo(f"{name:12} {command:9} {pinned:9} {have[name] or '-'}")


@harnesses.command()
@click.option("--smoke/--no-smoke", default=True, show_default=True,
              help="Also run one real session per installed CLI through the running stack (polar up).")
@click.option("--timeout", type=float, default=180.0, show_default=True)
def doctor(smoke: bool, timeout: float) -> None:
    """Run each installed CLI's --version; then a one-call session per CLI against the stack's model."""
    from infra.harness_tools import HARNESS_CLIS, cli_version, installed_versions

    settings = client_settings()
    folder, have, bad = settings.tools_path, installed_versions(settings.tools_path), 0
    present = [n for n in HARNESS_CLIS if have[n]]
    for name in HARNESS_CLIS:
        if not have[name]:
            click.echo(f"{name:12} not installed (polar harnesses install {name})")
            continue
        ok, text = cli_version(folder, name)
        bad += not ok
        click.echo(f"{name:12} {'ok ' if ok else 'BAD'} {text}")
    if smoke and present:
        from infra.cli.smoke import smoke_sessions

        bad += smoke_sessions(settings, present, timeout)
    if bad:
        raise click.ClickException(f"{bad} problem(s)")
