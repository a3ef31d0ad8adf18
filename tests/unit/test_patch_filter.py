"""The worker's own check of an agent's patch (``patch_filter``): what the runtime's ``git`` wrote
is not trusted, so noise, excluded and unsafe paths are dropped here, and so is anything that is
not a section as git writes it (``patch --fuzz`` would apply smuggled file headers)."""

from __future__ import annotations

import pytest

from workers.evaluators.patch import NOISE, exclude_list
from workers.evaluators.patch_filter import filter_patch, glob_matches

EDIT = (b"diff --git a/calc.py b/calc.py\n"
        b"index 1111111..2222222 100644\n"
        b"--- a/calc.py\n"
        b"+++ b/calc.py\n"
        b"@@ -1,2 +1,2 @@\n"
        b" def add(a, b):\n"
        b"-    return a - b\n"
        b"+    return a + b\n")


def new_file(path: str, body: str = "x", mode: str = "100644") -> bytes:
    lines = body.split("\n")
    out = (f"diff --git a/{path} b/{path}\nnew file mode {mode}\nindex 0000000..3333333\n--- /dev/null\n"
           f"+++ b/{path}\n@@ -0,0 +1{',' + str(len(lines)) if len(lines) != 1 else ''} @@\n")
    return (out + "".join(f"+{line}\n" for line in lines)).encode()


def test_a_plain_patch_is_kept_byte_for_byte():
    data = EDIT + new_file("added.txt", "new file") + b"\\ No newline at end of file\n"
    kept = filter_patch(data, NOISE)
    assert kept.data == data and kept.files == ["calc.py", "added.txt"] and kept.dropped == []


@pytest.mark.parametrize("path, exclude, reason", [
    ("pkg/__pycache__/m.cpython-311.pyc", (), "excluded by '**/__pycache__/**'"),
    ("conftest.py", ("conftest.py",), "excluded by 'conftest.py'"),
    ("tests/conftest.py", ("**/conftest.py",), "excluded by '**/conftest.py'"),
    ("tests/unit/test_a.py", ("tests",), "excluded by 'tests'"),  # a folder covers what is in it
    (".git/hooks/post-checkout", (), "a path inside .git"),
    ("sub/.GIT/config", (), "a path inside .git"),
    ("../outside.py", (), "unsafe path"),
    ("a/./b.py", (), "unsafe path"),
])
def test_a_section_the_grader_must_not_apply_is_dropped_with_its_reason(path, exclude, reason):
    kept = filter_patch(EDIT + new_file(path, "#!/bin/sh\ntouch /tmp/pwned", "100755"), (*NOISE, *exclude))
    assert kept.data == EDIT and kept.files == ["calc.py"]
    [dropped] = kept.dropped
    assert dropped["path"] == path and dropped["reason"].startswith(reason)


def test_a_header_naming_one_file_and_lines_naming_another_is_dropped():
    sneaky = (b"diff --git a/ok.py b/ok.py\nnew file mode 100644\n--- /dev/null\n+++ b/.git/hooks/pre-commit\n"
              b"@@ -0,0 +1 @@\n+evil\n")
    kept = filter_patch(EDIT + sneaky, NOISE)
    assert kept.data == EDIT and "inside .git" in kept.dropped[0]["reason"]


@pytest.mark.parametrize("smuggled", [
    # file headers after a hunk's counted lines: patch(1) would apply a second file from them
    EDIT + b"--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+cheat\n",
    # a hunk longer than its header says
    EDIT + b"+    extra\n",
    # an unknown header line
    b"diff --git a/calc.py b/calc.py\nIndex: conftest.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n",
    # two different paths, no rename
    b"diff --git a/calc.py b/conftest.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n",
])
def test_what_git_does_not_write_is_not_graded(smuggled):
    kept = filter_patch(smuggled + new_file("fine.txt"), NOISE)
    assert kept.files == ["fine.txt"] and kept.data == new_file("fine.txt")
    assert kept.dropped[0]["reason"].startswith("not a section git writes")


def test_text_before_the_first_section_is_dropped():
    kept = filter_patch(b"--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+cheat\n" + EDIT, NOISE)
    assert kept.data == EDIT and kept.dropped[0]["reason"] == "not part of a file's section"


@pytest.mark.parametrize("link_first", [True, False])
def test_a_file_beneath_a_symlink_the_patch_creates_is_dropped(link_first):
    link = (b"diff --git a/site b/site\nnew file mode 120000\nindex 0000000..4444444\n--- /dev/null\n+++ b/site\n"
            b"@@ -0,0 +1 @@\n+/usr/lib/python3/dist-packages\n\\ No newline at end of file\n")
    beneath = new_file("site/sitecustomize.py", "import os")
    kept = filter_patch(link + beneath if link_first else beneath + link, NOISE)
    assert kept.files == ["site"] and "beneath the symlink 'site'" in kept.dropped[0]["reason"]


def test_a_binary_block_holds_only_what_git_writes_there():
    """patch(1) skips git's binary blocks and reads on: a plain diff hidden in one (an Index line
    and an ed-style hunk) would have created a hook."""
    head = b"diff --git a/blob.bin b/blob.bin\nnew file mode 100644\nindex 0000000..5555555\nGIT binary patch\n"
    honest = head + b"literal 9\nQcmZQzWMXDvWn^Ll00Sig0RR91\n\nliteral 0\nHcmV?d00001\n\n"
    assert filter_patch(honest, NOISE).files == ["blob.bin"]
    hidden = head + b"literal 9\nQcmZQzWMXDvWn^Ll00Sig0RR91\n\nIndex: .git/hooks/post-checkout\n0a1\n> touch x\n"
    kept = filter_patch(hidden, NOISE)
    assert kept.files == [] and "binary patch that git does not write" in kept.dropped[0]["reason"]


def test_quoted_renamed_and_binary_sections_are_read():
    quoted = (b'diff --git "a/sp ace\\303\\251.txt" "b/sp ace\\303\\251.txt"\nnew file mode 100644\n'
              b'--- /dev/null\n+++ "b/sp ace\\303\\251.txt"\n@@ -0,0 +1 @@\n+x\n')
    renamed = (b"diff --git a/old name.py b/new name.py\nsimilarity index 100%\nrename from old name.py\n"
               b"rename to new name.py\n")
    binary = (b"diff --git a/blob.bin b/blob.bin\nnew file mode 100644\nindex 0000000..5555555\n"
              b"GIT binary patch\nliteral 9\nQcmZQzWMXDvWn^Ll00Sig0RR91\n\nliteral 0\nHcmV?d00001\n\n")
    data = quoted + renamed + binary
    kept = filter_patch(data, NOISE)
    assert kept.data == data and kept.files == ["sp aceé.txt", "new name.py", "blob.bin"]
    renamed_away = renamed.replace(b"new name.py", b".git/config")
    assert "inside .git" in filter_patch(renamed_away, NOISE).dropped[0]["reason"]


@pytest.mark.parametrize("pattern, path, covered", [
    ("conftest.py", "conftest.py", True), ("conftest.py", "tests/conftest.py", False),
    ("**/conftest.py", "tests/conftest.py", True), ("**/conftest.py", "conftest.py", True),
    ("*.pyc", "m.pyc", True), ("*.pyc", "pkg/m.pyc", False), ("**/*.pyc", "pkg/sub/m.pyc", True),
    ("**/build/**", "build/out.txt", True), ("**/build/**", "rebuild/out.txt", False),
    ("tests/**", "tests/a/b.py", True), ("tests", "tests/a/b.py", True), ("tests", "tests_old/a.py", False),
    ("t?st_[a-c].py", "test_b.py", True), ("t?st_[!a-c].py", "test_b.py", False),
    ("./tests", "tests/a.py", True), (".venv", ".venv/lib/x.py", True),
])
def test_globs_follow_gits_pathspec_rules(pattern, path, covered):
    assert glob_matches(pattern, path) is covered


@pytest.mark.parametrize("name", ["conftest.py ", "conftest.py x", "conftest.py\u00a0"])
def test_a_name_patch1_would_cut_at_its_whitespace_is_read_as_patch1_reads_it(name):
    """patch(1) ends an unquoted name at its first whitespace unless a tab follows (git writes a
    tab after a name with a space): "conftest.py x" was conftest.py to patch and passed (probe)."""
    section = (f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
               "@@ -0,0 +1 @@\n+PWNED = 1\n").encode()
    kept = filter_patch(section + EDIT, (*NOISE, "conftest.py"))
    assert kept.files == ["calc.py"] and kept.data == EDIT, kept.dropped


def test_a_name_with_a_space_as_git_writes_it_is_kept():
    section = (b"diff --git a/my file.py b/my file.py\nnew file mode 100644\n--- /dev/null\n+++ b/my file.py\t\n"
               b"@@ -0,0 +1 @@\n+x\n")
    assert filter_patch(section, NOISE).files == ["my file.py"]


@pytest.mark.parametrize("header", [b'diff --git "a/\\19x" "b/\\19x"\n', b'diff --git "a/x\\1" "b/x\\1"\n'])
def test_a_broken_octal_escape_is_a_section_git_does_not_write_not_a_crash(header):
    kept = filter_patch(header + b"new file mode 100644\n" + EDIT, NOISE)
    assert kept.files == ["calc.py"] and "not a section git writes" in kept.dropped[0]["reason"]


@pytest.mark.parametrize("kind", ["rename", "copy"])
def test_a_rename_or_copy_header_must_name_the_paths_of_its_own_lines(kind):
    """patch(1) ignores the names on 'rename/copy from/to' lines and renames or copies to the
    header's: 'diff --git a/x.py b/conftest.py' with 'rename to y.py' was y.py here and
    conftest.py (or .git/hooks/post-checkout) to patch --fuzz (probe)."""
    honest = (f"diff --git a/x.py b/y.py\nsimilarity index 100%\n{kind} from x.py\n{kind} to y.py\n").encode()
    assert filter_patch(honest, NOISE).files == ["y.py"]
    quoted = (f'diff --git "a/caf\\303\\251.txt" b/new name.txt\nsimilarity index 100%\n'
              f'{kind} from "caf\\303\\251.txt"\n{kind} to new name.txt\n').encode()
    assert filter_patch(quoted, NOISE).files == ["new name.txt"]
    for header in (b"diff --git a/x.py b/conftest.py\n", b"diff --git a/x.py b/.git/hooks/post-checkout\n",
                   b"diff --git a/x.py\tb/conftest.py\n", b"diff --git a/x.py  b/y.py\n"):
        kept = filter_patch(header + honest.split(b"\n", 1)[1] + EDIT, (*NOISE, "conftest.py"))
        assert kept.files == ["calc.py"] and kept.data == EDIT, header
        assert kept.dropped[0]["reason"].startswith("not a section git writes"), kept.dropped



def test_a_line_is_cut_only_at_newline_as_git_and_patch_cut_it():
    """A lone CR in a changed line (an old Mac file, a '\\r' in a string, a CR CR LF ending) is
    part of that line to git and patch(1): the whole fix was dropped as a malformed hunk (probe)."""
    section = (b"diff --git a/mac.txt b/mac.txt\nindex 1111111..2222222 100644\n--- a/mac.txt\n+++ b/mac.txt\n"
               b"@@ -1,2 +1,2 @@\n-old\rmac\r\n+new\rmac\r\r\n diff --git\rx\n\\ No newline at end of file\n")
    kept = filter_patch(section + EDIT, NOISE)
    assert kept.data == section + EDIT and kept.files == ["mac.txt", "calc.py"], kept.dropped


def test_the_paths_reported_are_text_a_result_can_hold():
    """A file name that is not UTF-8 (git writes its bytes as they are with core.quotepath=off)
    was reported with lone surrogates, which the session's result cannot encode: grading crashed
    after the grade was committed, on every retry (probe). The patch's bytes stay as they were."""
    section = new_file("lat%.py").replace(b"%", b"\xe9")
    excluded = new_file("tests/%/conftest.py").replace(b"%", b"\xff")
    kept = filter_patch(section + excluded, (*NOISE, "**/conftest.py"))
    assert kept.data == section and kept.files == ["lat\\xe9.py"]
    assert kept.dropped[0]["path"] == "tests/\\xff/conftest.py"
    for text in (*kept.files, *(v for d in kept.dropped for v in d.values())):
        text.encode()


@pytest.mark.parametrize("pattern, path, covered", [
    # git's pathspec matches a pattern literally too, as a folder when it ends in "/": 'tests/'
    # kept everything under tests/ here while the runtime's git left it out (probe)
    ("tests/", "tests/conftest.py", True), ("./tests/", "tests/unit/test_a.py", True), ("tests/", "tests", True),
    ("tests/", "tests_old/a.py", False), ("**/tests/", "a/tests/x.py", True), ("t/[x].py", "t/[x].py", True),
    # git normalizes a pathspec before matching it
    ("tests//unit", "tests/unit/a.py", True), ("tests/./unit", "tests/unit/a.py", True),
    ("a/b/../b/tests", "a/b/tests/c.py", True),
    # a backslash escapes what follows it; POSIX classes in brackets
    ("data/file\\*.txt", "data/file*.txt", True), ("data/file\\*.txt", "data/fileA.txt", False),
    ("[[:alpha:]]b", "ab", True), ("[[:digit:]]b", "ab", False), ("[![:upper:]]b", "ab", True),
])
def test_globs_follow_gits_pathspec_rules_where_they_differ_from_a_regex(pattern, path, covered):
    assert glob_matches(pattern, path) is covered


@pytest.mark.parametrize("pattern", ["/conftest.py", "../secrets", "tests/../../x", "[[:nope:]]", "!conftest.py"])
def test_an_exclude_pattern_git_cannot_read_is_refused_when_the_config_is_read(pattern):
    """git fails on a pathspec outside the repository ('/conftest.py', written gitignore-style),
    so every sample's diff failed and was graded 0 as the agent's own patch error (probe)."""
    with pytest.raises(TypeError, match="exclude pattern"):
        exclude_list([pattern])


def test_a_patch_of_many_symlinks_or_a_very_deep_path_is_read_in_linear_time():
    """Each path was checked against every symlink, and each glob against every folder of a
    path: 8,000 symlinks took 97 s, one path of 8,000 folders 86 s, and a 64 MB patch could hold
    far more, holding the worker for hours (probe)."""
    import time

    links = b"".join(f"diff --git a/l{i} b/l{i}\nnew file mode 120000\n--- /dev/null\n+++ b/l{i}\n"
                     f"@@ -0,0 +1 @@\n+x\n".encode() for i in range(6000))
    deep = new_file("a/" * 2000 + "x.py")
    too_deep = new_file("a/" * 60_000 + "x.py")
    started = time.monotonic()
    kept = filter_patch(links + deep + too_deep, (*NOISE, "**/b/**/c/**"))
    assert time.monotonic() - started < 5
    assert len(kept.files) == 6001 and kept.dropped[0]["reason"].startswith("a path longer than")


@pytest.mark.parametrize("config", [
    "diff.noprefix=true", "diff.mnemonicPrefix=true", "diff.suppressBlankEmpty=true", "diff.context=0",
    "diff.submodule=log", "diff.up.textconv=tr a-z A-Z <",
])
def test_the_diff_command_writes_what_the_filter_reads_whatever_the_repository_configures(tmp_path, config):
    """A setting in the repository's (or the image's) git config changed how the patch is
    written: no a/ b/ prefixes, 'c/' and 'w/' ones, empty context lines without their space,
    'Submodule x a..b:' summaries, hunks without context, a textconv'd text: every section (or
    its neighbour) was dropped or did not apply (probe)."""
    import subprocess

    from workers.evaluators.patch import diff_command

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout

    sub, repo = tmp_path / "sub", tmp_path / "repo"
    for folder in (sub, repo):
        folder.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
        (folder / "f.py").write_text("a\n\nb\nc\nd\ne\nf\n")
        subprocess.run("git add -A && git -c user.name=t -c user.email=t@t commit -qm one && "
                       "echo g >> f.py && git -c user.name=t -c user.email=t@t commit -qam two",
                       shell=True, cwd=folder, check=True)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git("-C", "sub", "checkout", "-q", "HEAD~1")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "base")
    base = git("rev-parse", "HEAD").strip()
    git("config", *config.split("=", 1))
    (repo / ".git" / "info" / "attributes").write_text("*.py diff=up\n")
    (repo / "f.py").write_text("a\n\nB\nc\nd\ne\nf\ng\n")
    (repo / "new.py").write_text("x\n")
    git("-C", "sub", "checkout", "-q", "-")
    (tmp_path / "artifacts").mkdir()
    subprocess.run(diff_command(str(repo), base, []), shell=True, check=True,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "POLAR_SESSION_DIR": str(tmp_path),
                        "GIT_DIFF_OPTS": "-u0"})  # (an environment's setting: hunks without context)
    data = (tmp_path / "artifacts" / "agent.patch").read_bytes()
    kept = filter_patch(data, NOISE)
    assert kept.data == data and kept.files == ["f.py", "new.py", "sub"], kept.dropped
    git("checkout", "-q", base, "--", ".")
    git("rm", "-q", "--cached", "new.py")
    (repo / "new.py").unlink()
    (tmp_path / "p.diff").write_bytes(kept.data)
    git("apply", "--check", str(tmp_path / "p.diff"))


@pytest.mark.parametrize("mode_line", [b"index 0000000..4444444 120000\n", b"new file mode 120000 x\n"])
def test_a_symlink_made_by_any_mode_git_or_patch1_reads_counts_as_one(mode_line):
    """patch(1) takes a file's mode from its index line too, and git apply reads an octal number
    up to a space: 'index 0000000..4444444 120000' made a symlink with patch --fuzz that the
    filter did not count, so a file beneath it was kept (probe)."""
    link = (b"diff --git a/site b/site\n" + mode_line + b"--- /dev/null\n+++ b/site\n"
            b"@@ -0,0 +1 @@\n+/usr/lib/python3/dist-packages\n\\ No newline at end of file\n")
    kept = filter_patch(new_file("site/sitecustomize.py", "import os") + link, NOISE)
    assert kept.files == ["site"] and "beneath the symlink 'site'" in kept.dropped[0]["reason"]
    # A mode git never writes (git apply reads '0120000' as a symlink too) drops the link itself.
    odd = filter_patch(new_file("site/sitecustomize.py", "import os") + link.replace(mode_line, b"new file mode 0120000\n"),
                       NOISE)
    assert odd.files == ["site/sitecustomize.py"] and "a file mode git does not write" in odd.dropped[0]["reason"]


@pytest.mark.parametrize("name", ["tests data/x.py", "dir/ leading.py"])
def test_a_name_with_a_space_as_git_writes_it_is_not_cut_at_the_space(name):
    """git writes a tab after a name with a space on its ---/+++ lines, and patch(1) reads the
    whole name up to it: 'tests data/x.py' was dropped as excluded by 'tests', 'dir/ leading.py'
    as the unsafe 'dir/' (probe). Without the tab the cut name is still checked."""
    section = (f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\t\n"
               "@@ -0,0 +1 @@\n+x\n").encode()
    assert filter_patch(section, (*NOISE, "tests")).files == [name]
    untabbed = filter_patch(section.replace(b"\t\n", b"\n"), (*NOISE, "tests"))
    assert untabbed.files == [] and untabbed.dropped[0]["path"] == name


def test_a_file_mode_git_never_writes_drops_its_section():
    """patch(1) chmods a file to whatever mode line it reads: 100777 made it world-writable."""
    odd = new_file("run.sh", "echo hi", mode="100777")
    kept = filter_patch(EDIT + odd + new_file("tool.sh", "echo ok", mode="100755"), ())
    assert kept.files == ["calc.py", "tool.sh"]
    assert [d["reason"] for d in kept.dropped] == ["not a section git writes: a file mode git does not write (100777)"]


def test_a_hunk_header_with_absurd_counts_drops_its_section_not_the_whole_patch():
    huge = EDIT.replace(b"@@ -1,2 +1,2 @@", b"@@ -1," + b"9" * 5000 + b" +1,2 @@").replace(b"calc.py", b"other.py")
    kept = filter_patch(huge + EDIT, ())
    assert kept.files == ["calc.py"] and len(kept.dropped) == 1 and "other.py" in kept.dropped[0]["path"]


@pytest.mark.parametrize("mode_line", [b"index 0000000..4444444\t120000\n", b"index 0000000..4444444 \t 120000\n",
                                       b"new file mode \t120000\n", b"new file mode \x0b120000\n",
                                       b"new mode  120000\n"])
def test_a_symlink_whose_mode_follows_other_whitespace_counts_as_one(mode_line):
    """patch(1) skips any whitespace before a mode (a tab, a vertical tab, several), on an index
    line too: 'index 0000000..4444444<TAB>120000' made a symlink the filter did not count, git
    apply and --reject failed on the file beneath it, and patch --fuzz wrote that file through
    the link -- into an excluded folder (probe)."""
    link = (b"diff --git a/lnk b/lnk\n" + mode_line + b"--- /dev/null\n+++ b/lnk\n"
            b"@@ -0,0 +1 @@\n+tests\n\\ No newline at end of file\n")
    kept = filter_patch(link + new_file("lnk/conftest.py", "import os"), (*NOISE, "tests"))
    assert "lnk/conftest.py" not in kept.files, kept
