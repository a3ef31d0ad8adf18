"""``polar tools``: Node.js and the harness CLIs, installed once on a worker host and mounted
read-only at /polar/tools into every container (``infra/harness_tools.py``)."""

from __future__ import annotations

import json

import click

from infra.cli.errors import BadOutcome, Unusable
from infra.cli.output import console, emit_json, json_option, progress
from infra.cli.state import client_settings


@click.group()
def tools() -> None:
    """The harness tools folder (POLAR_TOOLS_DIR, default $POLAR_HOME/tools)."""


@tools.command(epilog="Exit 1 when node is missing or npm fails.")
@click.argument("packages", nargs=-1)
def install(packages: tuple[str, ...]) -> None:
    """Copy this host's node into the tools folder and npm-install PACKAGES there
    (e.g. @openai/codex @anthropic-ai/claude-code @google/gemini-cli)."""
    from infra.harness_tools import ToolsInstallError
    from infra.harness_tools import install as do_install

    folder = client_settings().tools_path
    with progress(counted=False) as bars:
        bars.add_task("npm install" if packages else "copying node", total=None, detail=", ".join(packages))
        try:
            manifest = do_install(folder, packages)
        except ToolsInstallError as exc:
            raise BadOutcome(str(exc)) from exc
    click.echo(f"{folder}: node {manifest['node']}; commands: {', '.join(manifest['bins'])}")


@tools.command(name="list", epilog="Exit 2 when the folder holds no tools yet.")
@json_option
def list_(as_json: bool) -> None:
    """What the tools folder holds: node's version, the packages, the commands."""
    from rich.table import Table

    folder = client_settings().tools_path
    path = folder / "manifest.json"
    if not path.exists():
        raise Unusable(f"{folder} has no tools yet (polar tools install)")
    manifest = json.loads(path.read_text())
    if as_json:
        emit_json({"folder": str(folder), **manifest})
        return
    table = Table(title=f"{folder}")
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("node", str(manifest.get("node")))
    table.add_row("packages", "\n".join(manifest.get("packages") or []) or "-")
    table.add_row("commands", ", ".join(manifest.get("bins") or []) or "-")
    console.print(table)
