"""``polar bench``: the verdicts and the table from fixed benchmark output (the figures here are
inputs to the judging, not results of any benchmark), then real runs of the fast benchmarks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from infra.cli import bench_report as br
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]


def fig(name, value, goal=None, unit="ms", measured_on="a 1M-token trace"):
    return {"figure": name, "value": value, "unit": unit, "input": measured_on,
            "goal": None if goal is None else {"op": goal[0], "target": goal[1]}}


@pytest.mark.parametrize(("value", "op", "target", "verdict"), [
    (4.3, "<=", 4.5, "met"), (4.5, "<=", 4.5, "met"), (4.6, "<=", 4.5, "missed"),
    (10.0, "<", 10, "missed"), (9.99, "<", 10, "met"),
    (51.0, ">=", 50, "met"), (49.9, ">=", 50, "missed"), (50, ">", 50, "missed"),
    (True, "==", True, "met"), (False, "==", True, "missed"),
])
def test_verdict_follows_the_goal_operator(value, op, target, verdict):
    got, ratio = br.verdict(value, op, target)
    assert got == verdict
    assert ratio == (None if isinstance(value, bool) else pytest.approx(value / target))


def test_rows_judge_each_figure_and_keep_its_input():
    rows = br.rows_from("blobs", {"figures": [fig("bytes/token", 4.7, ("<=", 4.5), "B/token"),
                                              fig("numpy", 2.0, ("<", 10)), fig("encode", 300.0)]})
    assert [(r.figure, r.verdict) for r in rows] == [("bytes/token", "missed"), ("numpy", "met"), ("encode", "info")]
    assert rows[0].measured_on == "a 1M-token trace" and rows[1].ratio == pytest.approx(0.2)
    assert br.exit_code(rows) == 1
    assert br.exit_code(rows[1:]) == 0


def test_an_error_outranks_a_missed_goal_and_a_skip_counts_for_nothing():
    met = br.rows_from("merge", {"figures": [fig("cpu", 50.0, ("<", 100))]})
    missed = br.rows_from("orch", {"figures": [fig("sessions/s", 40.0, (">=", 50), "sessions/s")]})
    skipped = [br.skipped_row("proxy", "not available")]
    error = [br.error_row("runtime", "exit 1: podman system service did not start")]
    assert br.exit_code(met + skipped) == 0
    assert br.exit_code(met + missed + skipped) == 1
    assert br.exit_code(met + missed + error) == 2
    assert br.summary(met + missed + skipped + error) == {"met": 1, "missed": 1, "info": 0, "error": 1, "skipped": 1}


@pytest.mark.parametrize("payload", [
    None, [], {"figures": []}, {"figures": [{"value": 1}]}, {"figures": [fig("x", "fast")]},
    {"figures": [fig("x", float("nan"))]}, {"figures": [fig("x", 1.0, ("~", 1))]},
    {"figures": [{**fig("x", 1.0), "goal": {"op": "<", "target": "ten"}}]},
])
def test_malformed_benchmark_output_is_refused(payload):
    with pytest.raises(br.BenchOutputError):
        br.rows_from("b", payload)


def test_table_shows_value_goal_ratio_verdict_and_input():
    rows = br.rows_from("orchestration", {"figures": [
        fig("sessions per second", 40.0, (">=", 50), "sessions/s", "200 no-op sessions in 20 tasks"),
        fig("ns/id ratio", 1.05, ("<=", 1.2), "x", "[1 / 10 / 100] conversations")]})
    rows.append(br.error_row("blobs", "exit 1: MemoryError [while packing]"))
    console = Console(record=True, width=200)
    console.print(br.table(rows))
    text = console.export_text()
    line = next(ln for ln in text.splitlines() if "sessions per second" in ln)
    for cell in ("40.0 sessions/s", "≥ 50 sessions/s", "0.80x", "missed", "200 no-op sessions in 20 tasks"):
        assert cell in line, line
    assert "1.05x" in text and "≤ 1.2x" in text and "[1 / 10 / 100] conversations" in text  # not taken as markup
    assert "MemoryError [while packing]" in text and "error" in text


def polar(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_bench_quick_runs_the_blob_and_merge_benchmarks():
    out = polar("bench", "--quick", "--only", "blobs,merge", "--json")
    report = json.loads(out.stdout)  # the JSON only on stdout; progress went to stderr
    rows = report["rows"]
    assert {r["benchmark"] for r in rows} == {"blobs", "merge"}
    assert all(r["verdict"] in ("met", "missed", "info") for r in rows), rows
    judged = [r for r in rows if r["op"] is not None]
    assert {r["figure"] for r in judged} >= {"v3 bytes per token", "v3 decode to numpy, every array read",
                                             "CPU time of one build"}
    assert all(r["measured_on"] and isinstance(r["value"], (int, float)) for r in rows)
    # The exit code is the verdicts' (whatever this machine measured), and says so in the JSON.
    assert out.returncode == report["exit_code"] == (1 if any(r["verdict"] == "missed" for r in judged) else 0)


def test_ctrl_c_stops_the_running_benchmark_and_exits_130():
    proc = subprocess.Popen([sys.executable, "-m", "infra.cli.main", "bench", "--only", "merge"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        wait_for(lambda: children.read_text().split(), timeout=60)
        [bench_pid] = [int(p) for p in children.read_text().split()]
        time.sleep(1.0)  # inside the benchmark, not at its start
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not Path(f"/proc/{bench_pid}").exists() or "Z" in Path(f"/proc/{bench_pid}/stat").read_text().split()[2]
