"""Per-test statuses parsed from real pytest and unittest runs (the runs happen here, so the
parser meets the output the real tools print, not a hand-written imitation)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workers.evaluators import test_output

TESTS = '''
import unittest
import pytest

def test_ok():
    assert 1 + 1 == 2

def test_bad():
    assert 1 + 1 == 3

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_error(broken):
    pass

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known bug")
def test_known_bug():
    assert False

@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n == 1

@pytest.mark.parametrize("words", ["hello world", "a - b"])
def test_spaced(words):
    assert words != "a - b"
'''

UNITTESTS = '''
import unittest

class Calc(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(1 + 1, 2)

    def test_bad(self):
        self.assertEqual(1 + 1, 3)

    def test_error(self):
        raise RuntimeError("boom")

    @unittest.skip("not today")
    def test_skipped(self):
        pass

    @unittest.expectedFailure
    def test_known_bug(self):
        self.assertEqual(1, 2)
'''


def run(tmp_path, argv):
    return subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags", [["-rA"], ["-v"], ["-rA", "-v"]])
def test_pytest_output(tmp_path, flags):
    (tmp_path / "test_calc.py").write_text(TESTS)
    out = run(tmp_path, ["-m", "pytest", "-p", "no:cacheprovider", *flags, "test_calc.py"])
    assert test_output.summarised(out.stdout, "pytest") and not test_output.summarised(out.stdout, "unittest")
    assert test_output.parse(out.stdout, "pytest") == {
        "test_calc.py::test_ok": "PASSED", "test_calc.py::test_bad": "FAILED", "test_calc.py::test_error": "ERROR",
        **({"test_calc.py::test_skipped": "SKIPPED"} if "-v" in flags else {}),  # -rA alone names no skipped id
        "test_calc.py::test_known_bug": "PASSED", "test_calc.py::test_param[1]": "PASSED",
        "test_calc.py::test_param[2]": "FAILED",
        # parametrized ids with spaces (and the summary's " - " inside one)
        "test_calc.py::test_spaced[hello world]": "PASSED", "test_calc.py::test_spaced[a - b]": "FAILED"}


def test_unittest_output(tmp_path):
    (tmp_path / "test_calc.py").write_text(UNITTESTS)
    out = run(tmp_path, ["-m", "unittest", "-v", "test_calc"])
    assert test_output.summarised(out.stderr, "unittest") and test_output.summarised(out.stderr)
    assert test_output.parse(out.stderr, "unittest") == {
        "test_ok (test_calc.Calc.test_ok)": "PASSED", "test_bad (test_calc.Calc.test_bad)": "FAILED",
        "test_error (test_calc.Calc.test_error)": "ERROR", "test_skipped (test_calc.Calc.test_skipped)": "SKIPPED",
        "test_known_bug (test_calc.Calc.test_known_bug)": "PASSED"}


def test_compare_names_each_difference():
    got = {"a": "PASSED", "b": "FAILED"}
    assert test_output.compare(got, {"a": "PASSED", "b": "PASSED", "c": "PASSED"}) == {
        "b": ("PASSED", "FAILED"), "c": ("PASSED", None)}
    assert test_output.compare(got, dict(got)) == {}


def test_an_unknown_framework_is_an_error():
    with pytest.raises(ValueError, match="unknown test framework"):
        test_output.parse("", "nose")


def test_a_test_reported_twice_keeps_its_worst_status():
    # a verbose line then the summary agree; a teardown error follows a pass; a forged PASSED
    # after the real FAILED does not win
    out = ("t.py::test_a PASSED [ 50%]\nt.py::test_b FAILED [100%]\nPASSED t.py::test_a\n"
           "ERROR t.py::test_c - teardown\nPASSED t.py::test_c\nFAILED t.py::test_b - assert\nPASSED t.py::test_b\n")
    assert test_output.parse(out, "pytest") == {"t.py::test_a": "PASSED", "t.py::test_b": "FAILED",
                                                "t.py::test_c": "ERROR"}


def test_unittests_failure_reports_count_and_a_run_cut_short_has_no_totals():
    forged = ("test_a (t.T.test_a) ... ok\nFAIL\n\n" + "=" * 70 + "\nFAIL: test_a (t.T.test_a)\n" + "-" * 70
              + "\nAssertionError\n\nRan 1 test in 0.001s\n\nFAILED (failures=1)\n")
    assert test_output.parse(forged, "unittest") == {"test_a (t.T.test_a)": "FAILED"}
    cut = "t.py::test_a PASSED [ 50%]\nt.py::test_b PASSED [100%]\n"  # what a run ended by os._exit shows
    assert not test_output.summarised(cut) and test_output.summarised(cut + "===== 2 passed in 0.01s =====\n")
    assert test_output.summarised("2 passed, 1 warning in 0.51s\n", "pytest")  # -q
