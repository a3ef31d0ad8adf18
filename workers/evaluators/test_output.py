"""Per-test statuses from a test run's output (pure: text in, map out).

pytest: the ``-rA`` short summary (``PASSED tests/x.py::test_a``, ``FAILED ... - reason``) and
verbose lines (``tests/x.py::test_a PASSED [ 50%]``). unittest (``-v``): ``test_a
(pkg.mod.Class.test_a) ... ok`` and its ``FAIL`` / ``ERROR`` / ``skipped`` forms. Statuses are
normalised to PASSED, FAILED, ERROR, SKIPPED (xfail counts as PASSED, xpass as FAILED, as
SWE-bench counts them). A test seen twice keeps its worst status (ERROR, FAILED, SKIPPED,
PASSED in that order): honest output repeats a status (a verbose line, then the summary) or adds
a worse one (a teardown error after a pass), while a PASSED line printed by the code under test
after its test failed must not win.
"""

from __future__ import annotations

import re

STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED")
_RANK = {"PASSED": 0, "SKIPPED": 1, "FAILED": 2, "ERROR": 3}
_PYTEST_NORMAL = {"PASSED": "PASSED", "FAILED": "FAILED", "ERROR": "ERROR", "SKIPPED": "SKIPPED",
                  "XFAIL": "PASSED", "XPASS": "FAILED"}
# A node id is the file, "::" parts, and a parametrization in brackets, which may hold spaces.
_NODE = r"\S+?::[^\s\[]+(?:\[[^\]]*\])?"
_PYTEST_SUMMARY = re.compile(rf"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) ({_NODE})(?: - .*)?$")
_PYTEST_VERBOSE = re.compile(rf"^({_NODE}) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \(.*\))?(?:\s+\[\s*\d+%\])?$")
_UNITTEST = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
_UNITTEST_NORMAL = {"ok": "PASSED", "FAIL": "FAILED", "ERROR": "ERROR", "expected failure": "PASSED",
                    "unexpected success": "FAILED"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# unittest's report of a failed test, after the run: "FAIL: test_a (pkg.mod.Class.test_a)".
_UNITTEST_REPORT = re.compile(r"^(FAIL|ERROR): (\w+) \(([\w.]+)\)$")
# The runner's own last word: pytest's totals ("=== 1 failed, 2 passed in 0.03s ===", or -q's
# bare form), unittest's "Ran N tests in Xs".
_PYTEST_TOTALS = re.compile(r"^=*\s*(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)"
                            r"(?:, )?)+ in \d+(?:\.\d+)?s\b|^=*\s*no tests ran in \d")
_UNITTEST_TOTALS = re.compile(r"^Ran \d+ tests? in \d+(?:\.\d+)?s$")


def parse(output: str, framework: str = "auto") -> dict[str, str]:
    """``{test id: status}`` from pytest or unittest output (``framework``: pytest, unittest, auto)."""
    if framework not in ("auto", "pytest", "unittest"):
        raise ValueError(f"unknown test framework {framework!r}: pytest, unittest or auto")
    lines = [_ANSI.sub("", line).rstrip() for line in output.splitlines()]
    found: dict[str, str] = {}
    if framework in ("auto", "pytest"):
        for line in lines:
            m = _PYTEST_VERBOSE.match(line)
            if m:
                _note(found, m.group(1), _PYTEST_NORMAL[m.group(2)])
                continue
            m = _PYTEST_SUMMARY.match(line)
            if m:
                _note(found, m.group(2), _PYTEST_NORMAL[m.group(1)])
    if framework in ("auto", "unittest"):
        for line in lines:
            m = _UNITTEST.match(line)
            if m:
                status = m.group(3)
                _note(found, f"{m.group(1)} ({m.group(2)})",
                      "SKIPPED" if status.startswith("skipped") else _UNITTEST_NORMAL[status])
                continue
            m = _UNITTEST_REPORT.match(line)
            if m:  # the failure reports after the run: a test's verbose line can be forged, these too, but later
                _note(found, f"{m.group(2)} ({m.group(3)})", "FAILED" if m.group(1) == "FAIL" else "ERROR")
    return found


def summarised(output: str, framework: str = "auto") -> bool:
    """Whether the run printed its runner's own totals (pytest's closing line, unittest's
    "Ran N tests"): a run that the code under test ended early (``os._exit`` after printing
    passes of its own) never gets there."""
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    pytest_done = framework in ("auto", "pytest") and any(_PYTEST_TOTALS.match(line) for line in lines)
    unittest_done = framework in ("auto", "unittest") and any(_UNITTEST_TOTALS.match(line) for line in lines)
    return pytest_done or unittest_done


def _note(found: dict[str, str], test: str, status: str) -> None:
    if _RANK[status] >= _RANK.get(found.get(test, "PASSED"), 0):
        found[test] = status


def compare(parsed: dict[str, str], expected: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """The tests whose status differs: ``{test: (expected, got)}`` (None: absent)."""
    return {t: (expected.get(t), parsed.get(t)) for t in sorted(set(parsed) | set(expected))
            if expected.get(t) != parsed.get(t)}
