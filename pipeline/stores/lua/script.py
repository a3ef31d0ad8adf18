"""How a script is registered and sent: ``Lua`` (name, source, SHA), ``bind`` for a store's
client, ``queue`` + ``execute`` for a bare EVALSHA inside a pipeline, ``after_reads`` for a
script with plain reads sent ahead of it in its round trip."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import redis
from redis.commands.core import Script


@dataclass(frozen=True)
class Lua:
    name: str
    source: str

    @cached_property  # the proxy sends it on every call
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()


def bind(r: redis.Redis, script: Lua) -> Script:
    return r.register_script(script.source)


def queue(pipe: Any, script: Lua, keys: list[str], args: list[Any]) -> None:
    """Add ``script`` to a pipeline as a bare EVALSHA. (redis-py's ``Script`` would first ask
    whether it is loaded -- a round trip -- and EVAL would send its source every time.) Run the
    pipeline with ``execute``, which loads the scripts and runs it again after a Redis restart."""
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def execute(r: redis.Redis, build: Callable[[Any], None], *, transaction: bool) -> list[Any]:
    """Build a pipeline with ``build`` and run it; when Redis has forgotten the script (NOSCRIPT:
    restarted since), load every script and run the whole pipeline once more. A pipeline holds
    one script at most, so a NOSCRIPT means no script of it ran (a MULTI runs its other commands
    regardless: with two scripts, one could run without the other); its other commands are plain
    writes, safe to apply twice, as its script is (ours recognise their own retry)."""
    for attempt in (1, 2):
        pipe = r.pipeline(transaction=transaction)
        build(pipe)
        scripts = sum(1 for args, _ in pipe.command_stack if args[0] == "EVALSHA")
        if scripts > 1:
            raise ValueError(f"a pipeline run by lua.execute holds one script at most, not {scripts}")
        replies = pipe.execute(raise_on_error=False)
        errors = [x for x in replies if isinstance(x, redis.ResponseError)]
        if not errors:
            return replies
        if attempt == 1 and any(
            isinstance(x, redis.exceptions.NoScriptError) or str(x).startswith("NOSCRIPT") for x in errors
        ):
            from pipeline.stores.lua import ALL  # the package collects every script

            for script in ALL.values():
                r.script_load(script.source)
            continue
        raise errors[0]
    raise AssertionError("unreachable")


def after_reads(r: redis.Redis, bound: Script, script: Lua, keys: list[str], args: list[Any],
                reads: Callable[[Any], None] | None) -> tuple[Any, list[Any] | None]:
    """Run ``script`` (``bound``: it bound to ``r``), with ``reads`` -- which queues plain reads
    on a pipeline -- sent ahead of it in the same round trip; returns the script's reply and the
    reads' replies (None without ``reads``)."""
    if reads is None:
        return bound(keys=keys, args=args), None

    def build(pipe: Any) -> None:
        reads(pipe)
        queue(pipe, script, keys, args)

    *read, reply = execute(r, build, transaction=False)
    return reply, read
