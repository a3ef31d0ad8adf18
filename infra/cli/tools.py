"""``polar tools``: Node.js and the harness CLIs, installed once on a worker host and mounted
read-only at /polar/tools into every container (``infra/harness_tools.py``)."""

from __future__ import annotations

import json

import click

from infra.cli.state import client_settings


@click.group()
def tools() -> None:
    """The harness tools folder (POLAR_TOOLS_DIR, default $POLAR_HOME/tools)."""


@tools.command()
@click.argument("packages", nargs=-1)
def install(packages: tuple[str, ...]) -> None:
    """Copy this host's node into the tools folder and npm-install PACKAGES there
    (e.g. @openai/codex @anthropic-ai/claude-code @google/gemini-cli)."""
    from infra.harness_tools import ToolsInstallError
    from infra.harness_tools import install as do_install

    folder = client_settings().tools_path
    try:
        manifest = do_install(folder, packages)
    except ToolsInstallError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{folder}: node {manifest['node']}; commands: {', '.join(manifest['bins'])}")


@tools.command(name="list")
def list_() -> None:
    """What the tools folder holds."""
    folder = client_settings().tools_path
    manifest = folder / "manifest.json"
    if not manifest.exists():
        raise click.ClickException(f"{folder} has no tools yet (polar tools install)")
    click.echo(json.dumps(json.loads(manifest.read_text()), indent=2))
