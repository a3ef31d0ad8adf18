"""``polar bench``: run the benchmark suite (``bench/`` of a source checkout) and print one table
of figures against their goals.

Each benchmark runs as its own process (``python bench/x.py --json [--quick]``), so the figures
are not skewed by this one and the CLI imports nothing heavy; each prints one JSON line
(bench/figures.py), judged in ``infra/cli/bench_report.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click

from infra.cli.bench_report import Row, error_row, exit_code, rows_from, skipped_row, summary, table
from infra.cli.errors import Unusable
from infra.cli.output import console, emit_json, err_console, json_option, progress
from infra.cli.params import SECONDS

ROOT = Path(__file__).resolve().parents[2]  # a source checkout; a wheel carries no bench/
TEST_IMAGE = "localhost/polar-test:bookworm"  # what bench/runtime_bench.py runs sessions in


def _reference_model_extra() -> str | None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        return "the reference model needs torch and transformers (pip install -e '.[model]')"
    return None


def _valgrind() -> str | None:
    return None if shutil.which("valgrind") else "needs valgrind (apt-get install valgrind)"


def _podman_and_test_image() -> str | None:
    if not shutil.which("podman"):
        return "needs podman (infra/images/install_host_runtimes.sh)"
    try:
        missing = subprocess.run(["podman", "image", "exists", TEST_IMAGE], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman does not answer ({exc})"
    return f"needs the test image {TEST_IMAGE} (infra/images/build_test_image.sh)" if missing else None


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str
    what: str
    default: bool = True  # False: only with --all or --only
    requires: Callable[[], str | None] | None = None  # why it cannot run on this host, or None


BENCHMARKS = {b.name: b for b in (
    Benchmark("orchestration", "bench/orchestration_bench.py", "no-op sessions/s and CPU per session, whole stack"),
    Benchmark("celery_floor", "bench/celery_floor.py", "what Celery alone costs per session (five empty tasks)"),
    Benchmark("proxy", "bench/proxy_bench.py", "added latency, throughput vs a bare pass-through, CPU per call"),
    Benchmark("merge", "bench/merge_bench.py", "prefix_merging CPU time on 3.2 M ids; per-id cost as sessions grow"),
    Benchmark("blobs", "bench/blob_bench.py", "result blob bytes/token and decode to numpy, 1M-token trace"),
    Benchmark("record", "bench/record_bench.py", "convert + record one 32k-token completion, per provider"),
    Benchmark("updates", "bench/updates_bench.py", "trainer updates, per_request vs prefix_merging (whole stack)",
              default=False),
    Benchmark("redis_memory", "bench/redis_memory.py", "Redis memory per finished session", default=False),
    Benchmark("soak", "bench/soak.py", "memory and open fds of every process as sessions run (whole stack)",
              default=False),
    Benchmark("runtime", "bench/runtime_bench.py", "runtime start times; run slots kept busy (podman)",
              default=False, requires=_podman_and_test_image),
    Benchmark("token_in", "bench/token_in_bench.py", "what splicing a call as token ids adds (reference server)",
              default=False, requires=_reference_model_extra),
    Benchmark("proxy_instructions", "bench/proxy_instructions.py",
              "the proxy's own instructions per call (callgrind): repeatable where timings are not",
              default=False, requires=_valgrind),
)}

ONLY_HELP = "Comma-separated: " + ", ".join(BENCHMARKS) + "."
EPILOG = ("By default: " + ", ".join(n for n, b in BENCHMARKS.items() if b.default) + "; --all adds "
          + ", ".join(n for n, b in BENCHMARKS.items() if not b.default) + " (proxy_instructions needs valgrind, "
          "runtime podman and the test image).\n\nExit 0 when every goal is met, 1 when one is missed, 2 when a benchmark could not run "
          "(its error is shown). A benchmark skipped here (not available, or needing what the host lacks) "
          "is listed as skipped and does not change the exit code.")


@click.command(epilog=EPILOG)
@click.option("--quick", is_flag=True, help="Smaller inputs (about 1-2 minutes in all); each figure says its input.")
@click.option("--only", metavar="NAME,...", help=ONLY_HELP)
@click.option("--all", "run_all", is_flag=True, help="Also the slow benchmarks.")
@click.option("--timeout", type=SECONDS, default=None, help="Seconds per benchmark (default 900, 3600 without --quick).")
@json_option
def bench(quick: bool, only: str | None, run_all: bool, timeout: float | None, as_json: bool) -> None:
    """Run the benchmark suite; one table: each figure, its goal, met or missed, and its input."""
    selected = _select(only, run_all)
    if not (ROOT / "bench").is_dir():
        raise Unusable(f"{ROOT / 'bench'} not found: `polar bench` runs the benchmarks of a source checkout")
    rows: list[Row] = []
    failures: list[tuple[str, str]] = []  # (benchmark, the end of what it wrote to stderr)
    with progress(counted=False) as bars:
        for b in selected:
            line = bars.add_task(b.name, total=1, detail="starting")
            started = time.monotonic()
            got, stderr_tail = _run(b, quick, timeout or (900 if quick else 3600),
                                    lambda text, line=line: bars.update(line, detail=text))
            rows += got
            if stderr_tail:
                failures.append((b.name, stderr_tail))
            counts = summary(got)
            done = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            bars.update(line, completed=1, detail=f"{done} ({time.monotonic() - started:.0f} s)")
    code = exit_code(rows)
    if as_json:
        emit_json({"quick": quick, "rows": [r.as_dict() for r in rows], "summary": summary(rows), "exit_code": code})
    else:
        console.print(table(rows, title="polar bench" + (" --quick" if quick else "")))
        for name, tail in failures:
            err_console.print(f"[bold red]{name}[/] failed; the end of its stderr:", highlight=False)
            err_console.print(tail, markup=False, highlight=False)
        counts = summary(rows)
        console.print(", ".join(f"{n} {k}" for k, n in counts.items() if n) + f" -> exit {code}", highlight=False)
    sys.exit(code)


def _select(only: str | None, run_all: bool) -> list[Benchmark]:
    if only is None:
        return [b for b in BENCHMARKS.values() if b.default or run_all]
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise click.BadParameter(f"unknown benchmark {', '.join(unknown) or '(none given)'}; "
                                 f"expected some of {', '.join(BENCHMARKS)}", param_hint="--only")
    return [BENCHMARKS[n] for n in names]


def _run(b: Benchmark, quick: bool, timeout: float, status: Callable[[str], None]) -> tuple[list[Row], str]:
    """Run one benchmark; its rows, and the end of its stderr when it failed."""
    script = ROOT / b.script
    why_not = b.requires() if b.requires else None
    if why_not:
        return [skipped_row(b.name, why_not)], ""
    source = script.read_text() if script.exists() else ""
    if '"--json"' not in source:  # a benchmark without the machine-readable line cannot be judged
        return [skipped_row(b.name, f"not available ({b.script} has no --json yet)")], ""
    argv = [sys.executable, str(script), "--json", *(["--quick"] if quick and '"--quick"' in source else [])]
    status("running " + " ".join(argv[2:]))
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # its own group: stopped as one
    deadline = time.monotonic() + timeout
    try:
        while True:
            # Short waits: a Ctrl-C that the OS hands to another thread (the progress bar's) is
            # acted on by the main thread only once it wakes.
            try:
                out, err = proc.communicate(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() < deadline:
                    continue
                _stop(proc)
                out, err = proc.communicate()
                return [error_row(b.name, f"timed out after {timeout:.0f} s")], _tail(err)
    except BaseException:  # Ctrl-C: stop it (its stack included) before exiting
        _stop(proc)
        raise
    if proc.returncode != 0:
        last = _tail(err, 1) or "(no stderr)"
        return [error_row(b.name, f"exit {proc.returncode}: {last[:300]}")], _tail(err)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        return rows_from(b.name, json.loads(lines[-1]) if lines else None), ""
    except ValueError as exc:  # not JSON, or not the figures format
        return [error_row(b.name, f"unreadable output: {str(exc)[:300]}")], _tail(out + err)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT first, so the benchmark stops what it started (its stack); then SIGKILL."""
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
