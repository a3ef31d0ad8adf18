"""The agent's change as a patch, taken from one runtime and applied in a fresh one -- for real,
with git in the local runtime and in a podman container."""

from __future__ import annotations

import pytest

from pipeline.errors import EvaluationError
from pipeline.schemas import RuntimeSpec
from tests.conftest import TEST_IMAGE
from workers import runtimes
from workers.evaluators import patch
from workers.runtimes import RuntimeHost

BASE_REPO = (
    "git init -q repo && cd repo && git config user.email t@t && git config user.name t && "
    "printf 'def add(a, b):\\n    return a - b\\n\\n\\ndef mul(a, b):\\n    return a * b\\n' > calc.py && "
    "printf 'keep\\n' > notes.txt && git add -A && git commit -qm base"
)
AGENT_EDITS = (
    "cd repo && sed -i 's/a - b/a + b/' calc.py && printf 'new file\\n' > added.txt && "
    "printf '\\x00\\x01\\x02binary' > blob.bin && mkdir -p __pycache__ && printf 'x' > __pycache__/calc.pyc && "
    "mkdir -p build && printf 'y' > build/out.txt && printf 'scratch' > scratch.log && rm notes.txt"
)


@pytest.fixture(params=["local", "docker"])
def make(request, tmp_path):
    host = RuntimeHost(root=tmp_path / "sessions", task_id="patch")
    spec = RuntimeSpec(backend="local")
    if request.param == "docker":
        host = RuntimeHost(root=tmp_path / "sessions", docker_host=request.getfixturevalue("docker_host"),
                           task_id="patch")
        spec = RuntimeSpec(backend="docker", image=TEST_IMAGE)
    made = []

    def _make(name: str):
        rt = runtimes.create(spec, name, host)
        rt.start()
        made.append(rt)
        assert rt.exec(BASE_REPO, timeout=60).exit_code == 0
        return rt

    yield _make
    for rt in made:
        rt.stop()


def test_the_change_moves_to_a_fresh_runtime_binary_and_deletions_included_noise_left_out(make):
    agent, fresh = make("sess-agent"), make("sess-agent.eval")
    assert agent.exec(AGENT_EDITS, timeout=60).exit_code == 0
    taken = patch.extract(agent, "repo", "HEAD", ["*.log"])
    assert sorted(taken.files) == ["added.txt", "blob.bin", "calc.py", "notes.txt"]
    applied = patch.apply(fresh, taken, "repo")
    assert applied.ok and applied.method == "git apply", applied.log
    show = "cd repo && cat calc.py added.txt && od -An -tx1 blob.bin && ls"
    assert fresh.exec(show).stdout == agent.exec(show).stdout.replace("__pycache__\n", "").replace(
        "build\n", "").replace("scratch.log\n", "")


def test_no_change_is_an_empty_patch(make):
    agent = make("sess-idle")
    assert agent.exec("cd repo && mkdir -p __pycache__ && printf x > __pycache__/m.pyc").exit_code == 0
    assert patch.extract(agent, "repo").empty


def test_a_patch_for_other_code_does_not_apply_and_leaves_the_tree_clean(make):
    agent, fresh = make("sess-a"), make("sess-a.eval")
    agent.exec("cd repo && sed -i 's/a - b/a + b/' calc.py")
    taken = patch.extract(agent, "repo")
    fresh.exec("cd repo && printf 'completely different\\n' > calc.py && git commit -qam other")
    applied = patch.apply(fresh, taken, "repo")
    assert not applied.ok and "patch --fuzz" in applied.log
    assert fresh.exec("cd repo && git status --porcelain").stdout.strip() == ""


def test_fuzz_applies_what_git_apply_refuses(make):
    """The fresh copy drifted a little (an outer context line changed): git apply refuses, patch
    --fuzz ignores that line and applies."""
    agent, fresh = make("sess-f"), make("sess-f.eval")
    agent.exec("cd repo && sed -i 's/a \\* b/a * b  # times/' calc.py")
    taken = patch.extract(agent, "repo")
    fresh.exec("cd repo && sed -i '3s/^$/# moved on/' calc.py && git commit -qam drift")
    applied = patch.apply(fresh, taken, "repo")
    assert applied.ok and applied.method == "patch --fuzz", applied.log
    assert "# times" in fresh.exec("cd repo && cat calc.py").stdout


@pytest.mark.parametrize("base", ["--output=/etc/x", "HEAD; rm -rf /", ""])
def test_a_base_commit_that_is_not_a_name_is_refused(base):
    with pytest.raises(EvaluationError, match="not a commit name"):
        patch.diff_command("repo", base, [])


def test_a_failed_apply_undoes_only_itself(make):
    """Uncommitted work in the fresh tree (an eval_prepare step's) survives a patch that does not
    apply; the attempts' own leftovers (.rej, .orig, half-applied hunks) do not."""
    agent, fresh = make("sess-u"), make("sess-u.eval")
    agent.exec("cd repo && sed -i 's/a - b/a + b/' calc.py && printf 'n\\n' > new.txt")
    taken = patch.extract(agent, "repo")
    fresh.exec("cd repo && printf 'completely different\\n' > calc.py && git commit -qam other && "
               "printf 'prepared\\n' >> notes.txt && printf 'local\\n' > untracked.txt")
    applied = patch.apply(fresh, taken, "repo")
    assert not applied.ok
    status = fresh.exec("cd repo && git status --porcelain && cat notes.txt untracked.txt").stdout
    assert status == " M notes.txt\n?? untracked.txt\nkeep\nprepared\nlocal\n", status


def test_a_patch_already_applied_is_refused_not_reversed(make):
    agent, fresh = make("sess-r"), make("sess-r.eval")
    agent.exec("cd repo && sed -i 's/a - b/a + b/' calc.py")
    taken = patch.extract(agent, "repo")
    fresh.exec("cd repo && sed -i 's/a - b/a + b/' calc.py && git commit -qam 'already fixed'")
    applied = patch.apply(fresh, taken, "repo")
    assert not applied.ok  # patch without --forward would "apply" it by reversing the fix
    assert "a + b" in fresh.exec("cd repo && cat calc.py").stdout


def test_a_patch_made_huge_by_a_git_filter_is_refused_before_it_is_copied_out(make):
    """The diff runs the repository's own git filters: one that makes the patch file an 80 MB
    sparse file (4 KB on its disk) would have the worker copy it out dense and read it whole
    (a probe grew the evaluate worker to 2 GB with a 1 GB one)."""
    agent = make("sess-huge")
    trick = ("cd repo && git config filter.big.clean "
             "'truncate -s 80M \"$POLAR_SESSION_DIR/artifacts/agent.patch\"; cat' && "
             "echo '*.py filter=big' > .gitattributes && sed -i 's/a - b/a + b/' calc.py")
    assert agent.exec(trick, timeout=60).exit_code == 0
    with pytest.raises(EvaluationError, match="larger than 64 MB"):
        patch.extract(agent, "repo")


SMUGGLED = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    "@@ -0,0 +1 @@\n+import sys\n"
    "diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n--- /dev/null\n"
    "+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch hooked\n"
)


def test_the_agents_own_git_cannot_add_what_the_grader_excludes(make):
    """The probe's attack: the agent puts a ``git`` of its own first on PATH, which adds an
    excluded conftest.py and a .git hook to every ``git diff --binary`` (git apply refuses the
    hook, ``patch --fuzz`` writes it, and the eval's next checkout runs it). The worker reads the
    patch itself: both are dropped, with the reasons, and the fresh copy never sees them."""
    agent, fresh = make("sess-w"), make("sess-w.eval")
    agent.write("/polar/session/smuggled", SMUGGLED.encode())
    agent.write("/polar/session/bin/git", b'#!/bin/sh\nreal=$(command -v -p git)\n'
                b'case " $* " in *" diff "*"--binary"*) "$real" "$@"; rc=$?; cat "$POLAR_SESSION_DIR/smuggled"; '
                b'exit $rc;; esac\nexec "$real" "$@"\n')
    assert agent.exec('chmod +x "$POLAR_SESSION_DIR/bin/git"').exit_code == 0
    agent.exec("cd repo && sed -i 's/a - b/a + b/' calc.py")
    if hasattr(agent, "env"):  # local: the agent's folder first on its PATH
        agent.env["PATH"] = agent.exec('echo "$POLAR_SESSION_DIR/bin:$PATH"').stdout.strip()
    else:  # a container: root there, it writes where PATH looks first
        assert agent.exec('cp "$POLAR_SESSION_DIR/bin/git" /usr/local/bin/git').exit_code == 0
    diff = agent.exec("cd repo && git diff --binary HEAD").stdout
    assert "conftest.py" in diff and ".git/hooks" in diff  # the wrapper is what runs
    taken = patch.extract(agent, "repo", "HEAD", ["conftest.py"])
    assert taken.files == ["calc.py"]
    assert [(d["path"], d["reason"].split(" ")[0]) for d in taken.dropped] == [
        ("conftest.py", "excluded"), (".git/hooks/post-checkout", "a")]
    applied = patch.apply(fresh, taken, "repo")
    assert applied.ok and applied.method == "git apply"
    listing = fresh.exec("cd repo && ls -a . .git/hooks && git checkout -q HEAD -- notes.txt && ls").stdout
    assert "conftest.py" not in listing and "post-checkout\n" not in listing and "hooked" not in listing


@pytest.mark.parametrize("sabotage, error", [
    ("rm -rf .git", "not a git repository"),
    ("git config core.fsmonitor 'sleep 1000; true'", "did not finish"),  # git hangs in the agent's hook
])
def test_an_agent_that_breaks_its_own_git_gets_a_failed_grade_not_an_error(make, sabotage, error):
    """What the agent does to its runtime cannot turn its grade into an ERROR a trainer skips."""
    import time

    from pipeline.schemas import Trajectory
    from workers.evaluators import grading
    from workers.evaluators.base import EvalContext

    agent, fresh = make("sess-g"), make("sess-g.eval")
    assert agent.exec(f"cd repo && sed -i 's/a - b/a + b/' calc.py && {sabotage}").exit_code == 0
    ctx = EvalContext(spec=None, outcome=None, trajectory=Trajectory(), runtime=fresh,  # type: ignore[arg-type]
                      agent_runtime=agent, deadline=time.time() + 60)
    verdict = grading.patched_runtime(ctx, "repo", "HEAD", [], {}, step_seconds=3)
    assert verdict is not None and verdict.outcome_reward == 0.0
    assert error in verdict.metadata["patch_error"]
