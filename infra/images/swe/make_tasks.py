"""Derive what the SWE-style fixture tasks' authored files imply, and check it is up to date.

The folder next to this file is a task repo in the layout swebench 5 reads
(``swebench.task.repo``: ``sweb.yaml``, ``tasks/<instance_id>/...``). Per task, a person writes
``repo/`` (the project at its buggy base), ``gold.patch``, ``test.patch``, ``tests.json``,
``problem_statement.md`` and the metadata in ``task.yaml``; this script derives the rest, so that
nothing can drift apart by hand:

- ``base_commit`` / ``environment_setup_commit``: ``repo/`` committed with a fixed author, date
  and message, which makes the hash reproducible -- the image build commits the same way and
  refuses an image whose hash differs;
- ``image``: swebench's own image naming (``ImageSpec.name``) under a local namespace;
- ``eval.sh``: the script swebench's harness runs, in the shape SWE-bench's own eval scripts have
  (conda env activated, test files reset to the base commit, the test patch applied, the test
  command between the start/end markers its log parsers look for, test files reset again);
- ``Dockerfile``: the instance image, FROM the registry-free test image;
- ``tests/fixtures/swe_instances/instances.jsonl``: the instances as dataset rows (what
  ``swebench.task.repo.load_task_repo`` reads, with FAIL_TO_PASS / PASS_TO_PASS as JSON strings,
  the way the published datasets store them).

    python infra/images/swe/make_tasks.py           # write what is derived
    python infra/images/swe/make_tasks.py --check   # exit 1, naming the files, when any is stale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
INSTANCES = ROOT / "tests" / "fixtures" / "swe_instances" / "instances.jsonl"
NAMESPACE = "localhost/polar-swe"  # local images: a runtime never pulls, and nothing here is on a registry
BASE_IMAGE = "localhost/polar-test:bookworm"
PYTEST = "pytest==8.3.5"
HEREDOC = "POLAR_TEST_PATCH_EOF"
COMMIT_ENV = {  # a fixed author and date make the base commit's hash the same on every machine
    "GIT_AUTHOR_NAME": "polar fixtures", "GIT_AUTHOR_EMAIL": "fixtures@polar.invalid",
    "GIT_AUTHOR_DATE": "2024-05-01T12:00:00+00:00", "GIT_COMMITTER_NAME": "polar fixtures",
    "GIT_COMMITTER_EMAIL": "fixtures@polar.invalid", "GIT_COMMITTER_DATE": "2024-05-01T12:00:00+00:00",
}
# The dataset's column order (SWEbenchInstance), then the columns swebench 5 added.
COLUMNS = ("repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
           "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
           "image", "eval_script", "log_parser", "eval_type")

# SWE-bench's eval scripts `source /opt/miniconda3/bin/activate` and `conda activate testbed`;
# these images have no conda. The shim's `conda activate <env>` puts that environment's bin/
# first on PATH, and testbed's bin/ holds the system python, which has pytest.
CONDA_SHIM = """\
# conda stand-in: these images have no conda (infra/images/README.md)
conda() {
  case "${1:-}" in
    activate)
      _polar_env="${2:-base}"
      _polar_prefix=/opt/miniconda3
      [ "$_polar_env" = base ] || _polar_prefix="/opt/miniconda3/envs/$_polar_env"
      if [ ! -d "$_polar_prefix" ]; then echo "conda (shim): no environment $_polar_env" >&2; return 1; fi
      export CONDA_DEFAULT_ENV="$_polar_env" CONDA_PREFIX="$_polar_prefix" PATH="$_polar_prefix/bin:$PATH" ;;
    deactivate) unset CONDA_DEFAULT_ENV CONDA_PREFIX ;;
    *) echo "conda (shim): only activate and deactivate exist here" >&2; return 1 ;;
  esac
}
"""


def commit_message(meta: dict) -> str:
    return f"{meta['repo'].split('/')[-1]} {meta['version']}"


def base_commit(repo: Path, message: str) -> str:
    """The hash ``repo/`` gets when committed the way the image build commits it."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work)
        # No user or system git config (hooks, templates, signing): only what the image has.
        env = {**os.environ, **COMMIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
        for argv in (["git", "init", "-q"], ["git", "add", "-A"],
                     ["git", "-c", "commit.gpgsign=false", "commit", "-q", "-m", message]):
            subprocess.run(argv, cwd=work, env=env, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True, capture_output=True,
                              text=True).stdout.strip()


def test_files(test_patch: str) -> tuple[list[str], list[str]]:
    """The files a test patch touches: (already in the repository, created by it)."""
    from unidiff import PatchSet  # a swebench dependency

    existing, created = [], []
    for f in PatchSet(test_patch):
        (created if f.is_added_file else existing).append(f.path)
    return existing, created


def eval_script(meta: dict, test_patch: str) -> str:
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    existing, created = test_files(test_patch)
    base = meta["base_commit"]
    reset = ([f"git checkout {base} {' '.join(existing)}"] if existing else []) + (
        [f"rm -f {' '.join(created)}"] if created else [])
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail",
        "source /opt/miniconda3/bin/activate", "conda activate testbed",
        "cd /testbed", "git config --global --add safe.directory /testbed",
        "git status", "git show --stat", f"git -c core.fileMode=false diff {base}",
        *reset,
        f"git apply --verbose - <<'{HEREDOC}'", test_patch.rstrip("\n"), HEREDOC,
        f": '{START_TEST_OUTPUT}'",
        f"pytest --no-header -rA --tb=no -p no:cacheprovider {' '.join(existing + created)}",
        f": '{END_TEST_OUTPUT}'",
        *reset,
    ]) + "\n"


def dockerfile(meta: dict) -> str:
    shim = " \\\n".join(f"    {_sh_quote(line)}" for line in CONDA_SHIM.splitlines())
    env = " ".join(f'{k}="{v}"' for k, v in COMMIT_ENV.items())
    return f"""\
# {meta['instance_id']}: {meta['repo']} at its base commit in /testbed, laid out like a SWE-bench
# instance image. Generated by infra/images/swe/make_tasks.py; built by infra/images/build_swe_images.sh.
FROM {BASE_IMAGE}
# The same steps in every task's file up to COPY, so podman builds them once and shares the layers.
RUN mkdir -p /opt/miniconda3/bin /opt/miniconda3/etc/profile.d /opt/miniconda3/envs/testbed/bin \\
 && printf '%s\\n' \\
{shim} \\
    > /opt/miniconda3/bin/activate \\
 && ln -s ../../bin/activate /opt/miniconda3/etc/profile.d/conda.sh \\
 && ln -s /usr/bin/python3 /opt/miniconda3/envs/testbed/bin/python
ARG PIP_INDEX_URL=
RUN if [ -z "${{PIP_INDEX_URL:-}}" ]; then unset PIP_INDEX_URL; fi \\
 && if [ -f /run/polar-host-ca.crt ]; then export PIP_CERT=/run/polar-host-ca.crt; fi \\
 && pip install --quiet --root-user-action=ignore --break-system-packages --no-cache-dir {PYTEST}
COPY repo/ /testbed/
RUN cd /testbed && git init -q && git add -A \\
 && {env} git -c commit.gpgsign=false commit -q -m "{commit_message(meta)}" \\
 && test "$(git rev-parse HEAD)" = {meta['base_commit']}
WORKDIR /testbed
"""


def _sh_quote(line: str) -> str:
    if "'" in line:
        raise ValueError(f"the shim must not contain single quotes: {line!r}")
    return f"'{line}'"


def image_name(instance_id: str) -> str:
    from swebench.image_builder.image_spec import ImageSpec

    return ImageSpec(instance_id=instance_id, dockerfile="-", namespace=NAMESPACE).name


def derive(task_dir: Path) -> dict[Path, str]:
    """Every derived file of one task: path -> wanted text."""
    from swebench.task.repo import TASK_FILE, dump_yaml, load_yaml

    meta = load_yaml(task_dir / TASK_FILE)
    commit = base_commit(task_dir / "repo", commit_message(meta))
    meta.update(base_commit=commit, environment_setup_commit=commit, image=image_name(task_dir.name))
    return {task_dir / TASK_FILE: dump_yaml(meta),
            task_dir / "eval.sh": eval_script(meta, (task_dir / "test.patch").read_text()),
            task_dir / "Dockerfile": dockerfile(meta),
            task_dir / ".dockerignore": "**/__pycache__\n**/.pytest_cache\n"}


def instance_rows(repo: Path) -> list[dict]:
    """The task repo's instances as dataset rows (test lists as JSON strings, like the datasets)."""
    from swebench.task.publish import INTERNAL_KEYS
    from swebench.task.repo import load_task_repo

    rows = []
    for task in load_task_repo(repo):
        row = {k: v for k, v in task.items() if k not in INTERNAL_KEYS}
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            row[key] = json.dumps(row[key])
        rows.append({**{c: row[c] for c in COLUMNS}, **{k: v for k, v in row.items() if k not in COLUMNS}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    from swebench.task.repo import task_dirs

    wanted: dict[Path, str] = {}
    for task_dir in task_dirs(HERE):
        wanted.update(derive(task_dir))
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if not args.check:
        for path in stale:
            path.write_text(wanted[path])
    rows = "".join(json.dumps(r) + "\n" for r in instance_rows(HERE))
    if not INSTANCES.exists() or INSTANCES.read_text() != rows:
        stale.append(INSTANCES)
        if not args.check:
            INSTANCES.parent.mkdir(parents=True, exist_ok=True)
            INSTANCES.write_text(rows)
    for p in stale:
        print(f"{'stale' if args.check else 'wrote'} {p.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
