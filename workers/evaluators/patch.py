"""The agent's change as a patch: taken from its runtime, applied in another.

``extract`` diffs the repository against the task's base commit inside the agent's runtime
(``git diff --binary``: binary-safe; untracked files included through ``git add -N``), minus
noise -- byte-code, caches, build outputs -- and the task's ``exclude_patterns``. The patch is
written to a file in the session directory and downloaded (a command's output is only a tail).
``apply`` uploads it into a (fresh) runtime and tries ``git apply``, then ``git apply --reject``,
then ``patch --fuzz``, as SWE-bench's harness does; the first that succeeds wins.

The pathspec filtering is done by git itself (``:(exclude,glob)`` pathspecs); ``split_files`` is
the I/O-free check the tests use on what came out.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import EvaluationError
from workers.runtimes import Runtime

NOISE = ("**/__pycache__/**", "**/*.pyc", "**/*.pyo", "**/*.egg-info/**", "**/.pytest_cache/**", "**/build/**",
         "**/dist/**", "**/.mypy_cache/**", "**/.ruff_cache/**", "**/node_modules/**", "**/.tox/**", "**/.venv/**")
PATCH_FILE = "/polar/session/artifacts/agent.patch"  # for upload/download: a runtime path
PATCH_IN_SHELL = '"$POLAR_SESSION_DIR/artifacts/agent.patch"'  # the same file, as a command sees it
APPLY_STEPS = (
    ("git apply", "git apply --verbose {patch}"),
    ("git apply --reject", "git apply --verbose --reject {patch}"),
    ("patch --fuzz", "patch --batch --fuzz=5 -p1 -i {patch}"),
)
_DIFF_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$", re.M)


@dataclass
class Patch:
    text: str
    files: list[str]
    host_path: Path | None = None

    @property
    def empty(self) -> bool:
        return not self.text.strip()


@dataclass
class Applied:
    ok: bool
    method: str | None
    log: str


def split_files(diff: str) -> list[str]:
    """The paths a git diff touches, in order."""
    return [m.group(2) for m in _DIFF_HEADER.finditer(diff)]


def diff_command(repo_dir: str, base_commit: str, exclude_patterns: tuple[str, ...] | list[str]) -> str:
    if not re.fullmatch(r"[\w./@^~-]{1,200}", base_commit) or base_commit.startswith("-"):
        raise EvaluationError(f"base_commit {base_commit!r} is not a commit name")
    excludes = " ".join(shlex.quote(f":(exclude,glob){p}") for p in (*NOISE, *exclude_patterns))
    repo = shlex.quote(repo_dir)
    return (f"cd {repo} && git add --all --intent-to-add . && "
            f"git -c core.quotepath=off diff --binary --no-color --no-ext-diff {shlex.quote(base_commit)} -- . "
            f"{excludes} > {PATCH_IN_SHELL}")


def extract(runtime: Runtime, repo_dir: str, base_commit: str = "HEAD",
            exclude_patterns: tuple[str, ...] | list[str] = (), timeout: float = 120) -> Patch:
    """The agent's change to ``repo_dir`` since ``base_commit``, noise filtered."""
    res = runtime.exec(diff_command(repo_dir, base_commit, exclude_patterns), timeout=timeout, log_name="patch-diff")
    if res.exit_code != 0:
        raise EvaluationError(f"git diff in {repo_dir} failed ({res.exit_code}): {res.stderr[-500:]}")
    folder = Path(tempfile.mkdtemp(prefix="polar-patch-"))
    host = folder / "agent.patch"
    runtime.download(PATCH_FILE, str(host))
    text = host.read_text(errors="surrogateescape")
    return Patch(text=text, files=split_files(text), host_path=host)


def apply(runtime: Runtime, patch: Patch, repo_dir: str, timeout: float = 120) -> Applied:
    """Apply ``patch`` in ``repo_dir`` of ``runtime``; git apply, then --reject, then patch --fuzz."""
    if patch.host_path is None:
        raise EvaluationError("the patch has no file to upload")
    runtime.upload(str(patch.host_path), PATCH_FILE)
    logs = []
    for method, template in APPLY_STEPS:
        cmd = f"cd {shlex.quote(repo_dir)} && {template.format(patch=PATCH_IN_SHELL)}"
        res = runtime.exec(cmd, timeout=timeout, log_name="patch-apply")
        logs.append(f"$ {method}: exit {res.exit_code}\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        if res.exit_code == 0:
            return Applied(True, method, "\n".join(logs))
        # A failed attempt may leave applied hunks, .rej and .orig files: back to the commit
        # before the next one (and after the last, so the tests see the untouched tree).
        runtime.exec(f"cd {shlex.quote(repo_dir)} && git checkout -- . && git clean -fdq",
                     timeout=timeout, log_name="patch-undo")
    return Applied(False, None, "\n".join(logs))
