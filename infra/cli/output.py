"""Where the CLI writes, and how: tables and results on stdout, progress and notes on stderr.

With ``--json`` a command prints one JSON document on stdout and nothing else there, so
``polar ... --json | jq`` always parses; progress bars go to stderr either way. Rich draws a
live bar only on a terminal; into a file or a CI log it writes the bar's final state once when
the wait ends, so logs stay readable.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

# Rich assumes 80 columns when output is not a terminal (CI logs, pipes); the tables need more.
console = Console() if sys.stdout.isatty() else Console(width=140)
err_console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=140)

JSON_HELP = "Print the result as JSON on stdout (nothing else there; progress stays on stderr)."


def json_option(f: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(f)


_emitted = [False]  # whether this command printed its JSON document already


def reset_emitted() -> None:
    _emitted[0] = False


def emit_json(data: Any) -> None:
    _emitted[0] = True
    click.echo(json.dumps(data, indent=2, default=str))


def emit_json_error(exc: click.ClickException) -> None:
    """A failed ``--json`` command's one document: ``{"error": {"message", "exit_code",
    "status"?, "fields"?}}`` (an API refusal's status and field errors), unless the command
    printed its own document before failing (``submit --wait`` timing out)."""
    if _emitted[0]:
        return
    error: dict[str, Any] = {"message": exc.format_message(), "exit_code": exc.exit_code}
    cause = exc.__cause__
    body = getattr(cause, "body", None)
    if isinstance(getattr(cause, "status", None), int):
        error["status"] = cause.status  # type: ignore[union-attr]
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("fields"), list):
        error["fields"] = detail["fields"]
    emit_json({"error": error})


def note(message: str, as_json: bool = False) -> None:
    """A line for the human: on stdout with the tables, on stderr when stdout carries JSON."""
    (err_console if as_json else console).print(message, highlight=False)


def progress(counted: bool = True) -> Progress:
    """A progress display on stderr; ``counted``: a bar with done/total, else a spinner per item."""
    columns = [SpinnerColumn(), TextColumn("[bold]{task.description}")]
    if counted:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn("{task.fields[detail]}"), TimeElapsedColumn()]
    # redirect_stdout off: what a command prints to stdout meanwhile must stay on stdout.
    return Progress(*columns, console=err_console, transient=False, redirect_stdout=False)
