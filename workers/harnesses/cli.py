"""What the six CLI presets share: the instruction file, config files written into the session's
own HOME during INIT, one command line run headless with stdin closed, and where each CLI keeps
its own transcript (kept as a session artifact).

A preset says only what differs: ``files`` (HOME-relative path -> content), ``argv`` (the words
of its command line, ``INSTRUCTION`` standing for the instruction), ``env`` and ``transcripts``.
The session key never enters a command line or a file where the CLI can read it from the
environment instead (base URLs carry it, so they stay ``$VARIABLES`` expanded by the shell).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pipeline.errors import HarnessError
from pipeline.schemas.harness import HarnessOptions
from workers.harnesses.base import AgentCommand, HarnessContext
from workers.harnesses.shell import INSTRUCTION_FILE, REFERENCE
from workers.runtimes import Runtime
from workers.runtimes.base import SESSION_MOUNT

HOME = "/polar/session/home"  # every runtime's HOME, as a runtime path
INSTRUCTION = object()  # stands for the instruction in ``argv``: one word, read from its file
# The CLIs' own update checks, telemetry and crash reporting: nothing leaves for the vendor.
QUIET_ENV = {"NO_UPDATE_NOTIFIER": "1", "DO_NOT_TRACK": "1", "CI": "1"}


class Shell(str):
    """An argv word the shell must expand (``"$OPENAI_BASE_URL"``), written as it is."""


def options(ctx: HarnessContext) -> HarnessOptions:
    return HarnessOptions.model_validate(ctx.spec.agent.settings)


def model_name(ctx: HarnessContext) -> str:
    """The name the CLI sends: the session's policy (the proxy serves POLAR_UPSTREAM_MODEL when
    set, whatever a request names)."""
    return ctx.spec.agent.model_name or "polar-policy"


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2) + "\n"


def refuse(harness: str, opts: HarnessOptions, unsupported: dict[str, str]) -> None:
    """Options a CLI has no way to honour are an error naming them, never silently dropped."""
    given = {name: why for name, why in unsupported.items()
             if getattr(opts, name) not in (None, [], {})}
    if given:
        raise HarnessError(f"the {harness} preset cannot honour " + "; ".join(
            f"agent.settings.{name} ({why})" for name, why in given.items()))


class CliHarness:
    name = ""
    cli = ""  # the command on PATH (the tools folder's bin first)
    transcripts: tuple[str, ...] = ()  # HOME-relative folders where the CLI writes its own logs
    unsupported: dict[str, str] = {}  # option -> why this CLI cannot honour it
    stdin_instruction = False  # the instruction goes on stdin instead of argv
    skills_home = ""  # HOME-relative folder where the CLI looks for skills (agent.settings.skills_dir links there)

    # --- what a preset says ---------------------------------------------------------------

    def files(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        return {}

    def argv(self, ctx: HarnessContext, opts: HarnessOptions) -> list[Any]:
        raise NotImplementedError

    def env(self, ctx: HarnessContext, opts: HarnessOptions) -> dict[str, str]:
        return {}

    def prelude(self, ctx: HarnessContext, opts: HarnessOptions) -> str:
        """Shell run before the CLI (e.g. ``unset`` a variable that confuses it)."""
        return ""

    # --- the harness seam -------------------------------------------------------------------

    def setup(self, runtime: Runtime, ctx: HarnessContext) -> None:
        opts = options(ctx)
        refuse(self.name, opts, self.unsupported)
        files = {INSTRUCTION_FILE: ctx.spec.instruction}
        files.update({f"{HOME}/{rel}": content for rel, content in self.files(ctx, opts).items()})
        for dst, content in files.items():
            runtime.write(dst, content.encode())
        if opts.skills_dir:
            self._link_skills(runtime, opts.skills_dir)
        if opts.version:
            self._check_version(runtime, opts.version)

    def _link_skills(self, runtime: Runtime, skills_dir: str) -> None:
        if not self.skills_home:
            raise HarnessError(f"the {self.name} preset has no skills folder")
        # Each skill is linked into the CLI's own folder, never the folder itself: CLIs write there
        # (codex installs its bundled skills into it), and the task's folder must stay as it is.
        # The links name the folder by its absolute path in the runtime: a relative one (from the
        # workdir) left links relative to the CLI's folder, dangling.
        target = f'"$HOME/{self.skills_home}"'
        res = runtime.exec(f'src="$(cd -- {runtime_word(skills_dir)} 2>/dev/null && pwd)" && test -n "$src" && '
                           f'mkdir -p {target} && for skill in "$src"/*/; do '
                           f'ln -sfn "${{skill%/}}" {target}/"$(basename "$skill")"; done',
                           timeout=30, log_name="skills")
        if res.exit_code != 0:
            raise HarnessError(f"agent.settings.skills_dir {skills_dir!r} is not a folder in the runtime")

    def command(self, ctx: HarnessContext) -> AgentCommand:
        opts = options(ctx)
        words = [*self.argv(ctx, opts), *opts.extra_args]
        line = " ".join(_word(w) for w in words)
        stdin = '"$POLAR_SESSION_DIR/instruction.txt"' if self.stdin_instruction else "/dev/null"
        # stdin closed (or the instruction): codex, opencode and pi wait for EOF before their first call.
        command = f"{self.prelude(ctx, opts)}exec {line} < {stdin}"
        return AgentCommand(command=command, env={**QUIET_ENV, **self.env(ctx, opts)})

    def _check_version(self, runtime: Runtime, wanted: str) -> None:
        res = runtime.exec(f"{shlex.quote(self.cli)} --version < /dev/null", timeout=60, log_name=f"{self.cli}-version")
        # pi prints its version on stderr (as `polar harnesses doctor` reads it: stdout, else stderr)
        found = (res.stdout or "").strip() or (res.stderr or "").strip()
        if res.exit_code != 0:
            raise HarnessError(f"{self.cli} is not installed where the runtime can run it (`polar harnesses "
                               f"install`): {res.stderr.strip()[-300:] or res.stdout.strip()[-300:]}")
        if not version_matches(found, wanted):
            raise HarnessError(f"the task wants {self.cli} {wanted}, the runtime has {found!r} "
                               f"(`polar harnesses install --pin {self.name}={wanted}`)")


def version_matches(version_output: str, wanted: str) -> bool:
    """Whether a CLI's ``--version`` output names exactly ``wanted`` ("codex-cli 0.171.0",
    "2.1.197 (Claude Code)", "v1.2.3"): a whole word, so 0.1.1 is not found in 0.1.10."""
    return wanted in {word.lstrip("v") for word in version_output.split()}


def runtime_word(path: str) -> str:
    """``path``, a runtime path, as one shell word naming it inside the runtime: what is under
    /polar/session through ``$POLAR_SESSION_DIR`` (a host folder for local and bwrap runtimes,
    where /polar/session does not exist), anything else as it is."""
    path = path.rstrip("/") or "/"
    if path == SESSION_MOUNT or path.startswith(SESSION_MOUNT + "/"):
        rest = path[len(SESSION_MOUNT):]
        return '"$POLAR_SESSION_DIR"' + (shlex.quote(rest) if rest else "")
    return shlex.quote(path)


def _word(word: Any) -> str:
    if word is INSTRUCTION:
        return f'"{REFERENCE}"'
    if isinstance(word, Shell):
        return str(word)
    return shlex.quote(str(word))
