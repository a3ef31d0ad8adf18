"""``polar harnesses``: the six agent CLIs of the harness presets, pinned, in the tools folder."""

from __future__ import annotations

from typing import Any

import click

from infra.cli.errors import BadOutcome, Unusable
from infra.cli.output import console, emit_json, json_option, progress
from infra.cli.params import SECONDS
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


@harnesses.command(epilog="Exit 1 when npm fails, 2 for an unknown harness or a bad --pin.")
@click.argument("names", nargs=-1)
@click.option("--pin", "pins", multiple=True, help="NAME=VERSION instead of the tested version.")
def install(names: tuple[str, ...], pins: tuple[str, ...]) -> None:
    """Install the CLIs of NAMES (default: all six) at their pinned versions. Idempotent."""
    from infra.harness_tools import ToolsInstallError, harness_specs
    from infra.harness_tools import install as do_install

    folder = client_settings().tools_path
    try:
        missing = harness_specs(folder, names, _pins(pins))
    except ToolsInstallError as exc:
        raise Unusable(str(exc)) from exc
    with progress(counted=False) as bars:
        bars.add_task("npm install", total=None, detail=", ".join(missing) or "nothing to do")
        try:
            do_install(folder, missing)
        except ToolsInstallError as exc:
            raise BadOutcome(str(exc)) from exc
    click.echo(f"{folder}: " + (f"installed {', '.join(missing)}" if missing else "already up to date"))


@harnesses.command(name="list")
@json_option
def list_(as_json: bool) -> None:
    """Each preset: its CLI, the pinned version and the installed one."""
    from rich.table import Table

    from infra.harness_tools import HARNESS_CLIS, installed_versions

    have = installed_versions(client_settings().tools_path)
    rows = [{"harness": name, "command": command, "package": package, "pinned": pinned, "installed": have[name]}
            for name, (package, pinned, command) in HARNESS_CLIS.items()]
    if as_json:
        emit_json(rows)
        return
    table = Table(title="harness CLIs")
    for col in ("harness", "command", "pinned", "installed"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["harness"], row["command"], row["pinned"], row["installed"] or "-")
    console.print(table)


@harnesses.command(epilog="Exit 1 when a CLI's --version or its smoke session fails; 2 when --smoke cannot "
                          "reach the stack.")
@click.option("--smoke/--no-smoke", default=True, show_default=True,
              help="Also run one real session per installed CLI through the running stack (polar up).")
@click.option("--timeout", type=SECONDS, default=180.0, show_default=True)
@json_option
def doctor(smoke: bool, timeout: float, as_json: bool) -> None:
    """Run each installed CLI's --version; then a one-call session per CLI against the stack's model."""
    from infra.harness_tools import HARNESS_CLIS, cli_version, installed_versions

    settings = client_settings()
    folder, have = settings.tools_path, installed_versions(settings.tools_path)
    present = [n for n in HARNESS_CLIS if have[n]]
    clis: list[dict[str, Any]] = []
    with progress() as bars:
        bar = bars.add_task("--version", total=len(HARNESS_CLIS), detail="")
        for name in HARNESS_CLIS:
            bars.update(bar, detail=name)
            ok, text = cli_version(folder, name) if have[name] else (None, f"not installed (polar harnesses install "
                                                                          f"{name})")
            clis.append({"harness": name, "installed": have[name], "ok": ok, "detail": text})
            bars.advance(bar)
        bars.update(bar, detail="done")
    sessions: list[dict[str, Any]] = []
    skipped = None
    if smoke and present:
        from infra.cli.smoke import smoke_sessions

        if settings.api_url:
            sessions = smoke_sessions(settings, present, timeout)
        else:
            skipped = "no running stack (start `polar up`)"
    problems = sum(c["ok"] is False for c in clis) + sum(not s["ok"] for s in sessions)
    if as_json:
        emit_json({"clis": clis, "smoke": sessions, "smoke_skipped": skipped, "problems": problems})
    else:
        _print_doctor(clis, sessions, skipped)
    if problems:
        raise BadOutcome(f"{problems} problem(s)")


def _print_doctor(clis: list[dict[str, Any]], sessions: list[dict[str, Any]], skipped: str | None) -> None:
    from rich.table import Table

    table = Table(title="harness CLIs: --version" + (", then one smoke session each" if sessions else ""))
    for col in ("harness", "check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for c in clis:
        table.add_row(c["harness"], "--version", "-" if c["ok"] is None else "ok" if c["ok"] else "BAD", c["detail"])
    for s in sessions:
        table.add_row(s["harness"], "smoke session", "ok" if s["ok"] else "BAD", f"{s['session_id']}: {s['detail'][:300]}")
    console.print(table)
    if skipped:
        console.print(f"smoke test skipped: {skipped}")
