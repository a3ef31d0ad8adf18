"""Exit codes, the same for every ``polar`` command, and the errors that carry them.

0 success; 1 the command ran but the outcome is bad (a task not fully completed, a verify
violation, a doctor failure, a benchmark goal missed); 2 a usage or configuration error, or a
service the command needs is unreachable (click's own usage errors exit 2 too); 130 interrupted
(Ctrl-C). Errors are one readable message on stderr, never a traceback.
"""

from __future__ import annotations

from typing import Any

import click

OK, BAD_OUTCOME, UNUSABLE, INTERRUPTED = 0, 1, 2, 130

EPILOG = """\b
Exit codes:
  0    success
  1    it ran, but the outcome is bad: a task not fully completed, a verify violation,
       a doctor failure, a benchmark goal missed
  2    usage or configuration error, bad input (a payload the API refuses), or a service
       it needs unreachable (no running stack)
  130  interrupted (Ctrl-C); `polar up` and the servers (api, proxy, worker, flower,
       model serve) stopped by Ctrl-C exit 0 after a clean shutdown
"""


class Unusable(click.ClickException):
    """Bad input, bad configuration, or nothing to talk to: exit 2."""

    exit_code = UNUSABLE


class BadOutcome(click.ClickException):
    """The command did its work and the result is a failure: exit 1."""

    exit_code = BAD_OUTCOME


def translate(exc: Exception) -> click.ClickException | None:
    """The client errors a command lets through, as exit-2 messages (None: not one of ours)."""
    # Imported only now: `polar proxy` must patch with gevent before httpx/redis/ssl load.
    import httpx
    import redis

    from pipeline.client import RolloutError
    from pipeline.errors import PolarError
    from pipeline.weight_sync import WeightSyncError

    if isinstance(exc, RolloutError):
        error = exc.body.get("error") if isinstance(exc.body, dict) else None
        fields = error.get("fields") if isinstance(error, dict) else None
        listed = [f"  {f.get('field')}: {f.get('message')}" for f in fields or [] if isinstance(f, dict)]
        # (the message sums the fields up for a caller that reads no list: said once here)
        head = f"{exc.status}: the API refused the request:" if listed else str(exc)
        return Unusable("\n".join([head, *listed]))
    if isinstance(exc, WeightSyncError):  # the proxy's admin surface: unreachable, closed, or refusing
        hint = "; is `polar up` running, or POLAR_PROXY_URL set?" if exc.status == 0 else ""
        return Unusable(f"{exc}{hint}" if exc.status == 0 else f"{exc.status}: the proxy refused: {exc}")
    if isinstance(exc, httpx.TransportError):
        where = _url(exc)
        return Unusable(f"cannot reach {where} ({type(exc).__name__}: {exc}); is `polar up` running, "
                        "or POLAR_API_URL / POLAR_UPSTREAM_URL set?")
    if isinstance(exc, redis.ConnectionError):
        return Unusable(f"cannot reach Redis ({exc}); is `polar up` running, or POLAR_REDIS_URL set?")
    if isinstance(exc, PolarError):  # the project's own "this input or setting is wrong"
        return Unusable(str(exc))
    if isinstance(exc, OSError):  # a path given on the command line that cannot be used as asked
        return Unusable(str(exc))
    return None


def _url(exc: Any) -> str:
    try:
        return str(exc.request.url)
    except RuntimeError:  # an httpx error raised without its request
        return "the service"


class PolarGroup(click.Group):
    """Every subcommand's errors become an exit code and one message (also under CliRunner,
    which calls the group, not ``main``)."""

    def invoke(self, ctx: click.Context) -> Any:
        # With --json, stdout carries one JSON document, a failure's too (it was empty: a
        # `polar status X --json | jq` had nothing to read, the API's field errors only on stderr).
        from infra.cli import output

        wants_json = "--json" in [*getattr(ctx, "_protected_args", ()), *ctx.args]
        output.reset_emitted()
        try:
            return self._invoke(ctx)
        except click.ClickException as exc:
            if wants_json:
                output.emit_json_error(exc)
            raise

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("\ninterrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except click.exceptions.Abort:  # click's own Ctrl-C at a prompt
            click.echo("\ninterrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except (click.ClickException, click.exceptions.Exit):
            raise
        except Exception as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            raise mapped from exc
