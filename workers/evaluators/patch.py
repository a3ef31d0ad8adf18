"""The agent's change as a patch: taken from its runtime, applied in another.

``extract`` diffs the repository against the task's base commit inside the agent's runtime
(``git diff --binary``: binary-safe; untracked files included through ``git add -N``), minus
noise -- byte-code, caches, build outputs -- and the task's ``exclude_patterns``. The patch is
written to a file in the session directory and downloaded (a command's output is only a tail).
``apply`` uploads it into a (fresh) runtime and tries ``git apply``, then ``git apply --reject``,
then ``patch --fuzz``, as SWE-bench's harness does; the first that succeeds wins.

The pathspec filtering is done by git itself (``:(exclude,glob)`` pathspecs), and again on the
worker (``patch_filter``): the runtime's ``git`` is the agent's to replace, so what comes out is
only graded after its sections are checked there (noise, excluded and unsafe paths dropped, with
the reasons in ``Patch.dropped``).
"""

from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EvaluationError
from workers.evaluators.patch_filter import Patch, filter_patch, glob_matches, normal_pattern
from workers.runtimes import Runtime

NOISE = ("**/__pycache__/**", "**/*.pyc", "**/*.pyo", "**/*.egg-info/**", "**/.pytest_cache/**", "**/build/**",
         "**/dist/**", "**/.mypy_cache/**", "**/.ruff_cache/**", "**/node_modules/**", "**/.tox/**", "**/.venv/**")
PATCH_FILE = "/polar/session/artifacts/agent.patch"  # for upload/download: a runtime path
MAX_PATCH_BYTES = 64 * 2**20  # far beyond any change a grader applies; the worker reads it whole
PATCH_IN_SHELL = '"$POLAR_SESSION_DIR/artifacts/agent.patch"'  # the same file, as a command sees it
APPLY_STEPS = (
    ("git apply", "git apply --verbose {patch}"),
    ("git apply --reject", "git apply --verbose --reject {patch}"),
    # --forward: a patch that looks applied already is an error, never silently reversed.
    ("patch --fuzz", "patch --batch --forward --fuzz=5 -p1 -i {patch}"),
)
# A failed attempt may leave hunks, .rej and .orig files behind. Undo exactly that: the tracked
# state is snapshotted before the first attempt (``git stash create``, which changes nothing)
# with the list of untracked files, and restored after each failure.
UNDO_DIR = '"$POLAR_SESSION_DIR/tmp/patch-undo"'
SNAPSHOT = (f"mkdir -p {UNDO_DIR} && git stash create > {UNDO_DIR}/snapshot && "
            f"git ls-files --others --exclude-standard | sort > {UNDO_DIR}/untracked")
RESTORE = (f'git reset -q --hard && snap="$(cat {UNDO_DIR}/snapshot)" && '
           f'{{ [ -z "$snap" ] || git stash apply -q "$snap"; }} && '
           f"git ls-files --others --exclude-standard | sort | comm -13 {UNDO_DIR}/untracked - | "
           "tr '\\n' '\\0' | xargs -0 -r rm -f --")


class PatchUnavailable(EvaluationError):
    """The agent's runtime gave no patch (its git failed or hung, its patch is too big): what the
    agent did to its runtime, so a failed grade -- never an ERROR, which a trainer would skip and
    a policy could learn to reach for."""


@dataclass
class Applied:
    ok: bool
    method: str | None
    log: str


def exclude_list(value: Any) -> list[str]:
    """A config's ``exclude_patterns``: a list of glob strings (a bare string would be taken one
    character at a time, and "." excludes everything)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p.strip() for p in value):
        raise TypeError("'exclude_patterns' must be a list of glob patterns (non-empty strings)")
    for pattern in value:
        try:
            glob_matches(pattern, "x")
        except re.error as exc:
            raise TypeError(f"exclude pattern {pattern!r} is not a glob: {exc}") from None
        if pattern.startswith("!"):  # git's pathspec reads it literally: it would exclude nothing
            raise TypeError(f"exclude pattern {pattern!r} starts with '!': there is no negation here; "
                            "list only what to exclude")
        normal = normal_pattern(pattern)
        if normal.startswith("/") or normal == ".." or normal.startswith("../"):
            # git refuses such a pathspec: every sample's diff would fail
            raise TypeError(f"exclude pattern {pattern!r} is outside the repository "
                            "(patterns are read from its top: 'conftest.py', not '/conftest.py')")
    return list(value)


def check_commit(base_commit: Any) -> str:
    """A commit name safe to put on a command line (no option, no shell)."""
    if not isinstance(base_commit, str) or not re.fullmatch(r"[\w./@^~-]{1,200}", base_commit) \
            or base_commit.startswith("-"):
        raise EvaluationError(f"base_commit {base_commit!r} is not a commit name")
    return base_commit


def diff_command(repo_dir: str, base_commit: str, exclude_patterns: tuple[str, ...] | list[str]) -> str:
    check_commit(base_commit)
    excludes = " ".join(shlex.quote(f":(exclude,glob){p}") for p in (*NOISE, *exclude_patterns))
    repo = shlex.quote(repo_dir)
    return (f"cd {repo} && git add --all --intent-to-add . && "
            f"GIT_DIFF_OPTS= git {_DIFF_CONFIG} diff {_DIFF_OPTIONS} {shlex.quote(base_commit)} -- . {excludes} > {PATCH_IN_SHELL}")


# The patch as the filter reads it and git apply applies it, whatever the repository's (or the
# image's) git config says: a/ and b/ prefixes (diff.noprefix, diff.mnemonicPrefix), a space
# before an empty context line (diff.suppressBlankEmpty), three lines of context (diff.context=0
# makes hunks git apply refuses), a submodule as its commit line (diff.submodule=log writes a
# summary between sections), the file's own text (a textconv driver writes a converted one);
# GIT_DIFF_OPTS (-u0 would override --unified) emptied for this command.
_DIFF_CONFIG = "-c core.quotepath=off -c diff.suppressBlankEmpty=false"
_DIFF_OPTIONS = ("--binary --no-color --no-ext-diff --no-textconv --src-prefix=a/ --dst-prefix=b/ --unified=3 "
                 "--submodule=short")


def extract(runtime: Runtime, repo_dir: str, base_commit: str = "HEAD",
            exclude_patterns: tuple[str, ...] | list[str] = (), timeout: float = 120) -> Patch:
    """The agent's change to ``repo_dir`` since ``base_commit``, noise filtered."""
    res = runtime.exec(diff_command(repo_dir, base_commit, exclude_patterns), timeout=timeout, log_name="patch-diff")
    if res.cancelled:  # torn down under it: no grade at all
        raise EvaluationError(f"taking the patch from {repo_dir} was stopped: its runtime was torn down")
    if res.timed_out:
        raise PatchUnavailable(f"git diff in {repo_dir} did not finish in {timeout:.0f} s")
    if res.exit_code != 0:
        raise PatchUnavailable(f"git diff in {repo_dir} failed (exit {res.exit_code}): {res.stderr[-500:]}")
    # Measured where it lies before it is copied out: a session can make its patch a sparse file
    # of any size (a git filter runs in the diff), which a copy would write out whole.
    size = runtime.exec(f"wc -c < {PATCH_IN_SHELL}", timeout=timeout, log_name="patch-size")
    if not size.ok or not size.stdout.strip().isdigit() or int(size.stdout) > MAX_PATCH_BYTES:
        raise PatchUnavailable(f"the agent's patch is larger than {MAX_PATCH_BYTES // 2**20} MB "
                              f"({size.stdout.strip() or size.stderr[-200:]} bytes): not graded")
    with tempfile.TemporaryDirectory(prefix="polar-patch-") as folder:
        host = Path(folder) / "agent.patch"
        runtime.download(PATCH_FILE, str(host))
        data = host.read_bytes()
    try:
        return filter_patch(data, (*NOISE, *exclude_patterns))
    except Exception as exc:  # the agent's bytes: what they break is the agent's failed grade
        raise PatchUnavailable(f"the agent's patch could not be read: {type(exc).__name__}: {exc}") from exc


def apply(runtime: Runtime, patch: Patch, repo_dir: str, timeout: float = 120) -> Applied:
    """Apply ``patch`` in ``repo_dir`` of ``runtime``; git apply, then --reject, then patch --fuzz,
    each failure undone before the next (and after the last: the tests see the tree as it was)."""
    with tempfile.TemporaryDirectory(prefix="polar-patch-") as folder:
        host = Path(folder) / "agent.patch"
        host.write_bytes(patch.data)
        runtime.upload(str(host), PATCH_FILE)
    repo = f"cd {shlex.quote(repo_dir)}"
    snap = runtime.exec(f"{repo} && {SNAPSHOT}", timeout=timeout, log_name="patch-snapshot")
    if snap.exit_code != 0:
        raise EvaluationError(f"{repo_dir} is not a git work tree here: {snap.stderr[-300:]}")
    logs = []
    for method, template in APPLY_STEPS:
        res = runtime.exec(f"{repo} && {template.format(patch=PATCH_IN_SHELL)}", timeout=timeout, log_name="patch-apply")
        logs.append(f"$ {method}: exit {res.exit_code}\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        if res.exit_code == 0:
            return Applied(True, method, "\n".join(logs))
        undo = runtime.exec(f"{repo} && {RESTORE}", timeout=timeout, log_name="patch-undo")
        if undo.exit_code != 0:
            logs.append(f"undo failed: {undo.stderr[-500:]}")
    return Applied(False, None, "\n".join(logs))
