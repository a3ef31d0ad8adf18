"""``polar bench``'s verdicts and its table, from what each benchmark printed (bench/figures.py
describes the JSON line). Pure: no processes, no I/O; ``infra/cli/bench.py`` runs the benchmarks.

A figure with a goal is ``met`` or ``missed`` (decided here from value, operator and target, not
taken from the benchmark); one without a goal is ``info``. A benchmark that could not run is one
``error`` row; one left out (not available here, or needing what this host lacks) one ``skipped``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass
from typing import Any

from rich.markup import escape
from rich.table import Table

from infra.cli.errors import BAD_OUTCOME, OK, UNUSABLE

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
SHOWN_OPS = {"<": "<", "<=": "≤", ">": ">", ">=": "≥", "==": "="}
MET, MISSED, INFO, ERROR, SKIPPED = "met", "missed", "info", "error", "skipped"


class BenchOutputError(ValueError):
    """A benchmark's JSON line is not what bench/figures.py describes."""


@dataclass
class Row:
    benchmark: str
    figure: str
    verdict: str
    value: float | int | bool | None = None
    unit: str = ""
    op: str | None = None
    target: float | int | bool | None = None
    ratio: float | None = None  # value / target, for numeric goals
    measured_on: str = ""
    note: str = ""  # why a benchmark is skipped, or its error

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(value: Any, op: str | None, target: Any) -> tuple[str, float | None]:
    """(met | missed | info, value / target when both are numbers and the target is not 0)."""
    if op is None:
        return INFO, None
    met = OPS[op](value, target)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, target))
    ratio = value / target if numeric and target else None
    return (MET if met else MISSED), ratio


def rows_from(benchmark: str, payload: Any) -> list[Row]:
    """The rows of one benchmark's JSON object; BenchOutputError when it is malformed."""
    if not isinstance(payload, dict) or not isinstance(payload.get("figures"), list) or not payload["figures"]:
        raise BenchOutputError(f"{benchmark}: expected an object with a non-empty 'figures' list")
    rows = []
    for i, fig in enumerate(payload["figures"]):
        if not isinstance(fig, dict) or not isinstance(fig.get("figure"), str):
            raise BenchOutputError(f"{benchmark}: figure {i} has no name")
        value, goal = fig.get("value"), fig.get("goal")
        if not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
            raise BenchOutputError(f"{benchmark}: {fig['figure']}: value {value!r} is not a number or boolean")
        op = target = None
        if goal is not None:
            if not isinstance(goal, dict) or goal.get("op") not in OPS or not isinstance(goal.get("target"), (int, float)):
                raise BenchOutputError(f"{benchmark}: {fig['figure']}: goal {goal!r}: expected "
                                       f"{{'op': one of {list(OPS)}, 'target': a number or boolean}}")
            op, target = goal["op"], goal["target"]
        result, ratio = verdict(value, op, target)
        rows.append(Row(benchmark, fig["figure"], result, value, str(fig.get("unit") or ""), op, target, ratio,
                        str(fig.get("input") or "")))
    return rows


def error_row(benchmark: str, message: str) -> Row:
    return Row(benchmark, "-", ERROR, note=message)


def skipped_row(benchmark: str, reason: str) -> Row:
    return Row(benchmark, "-", SKIPPED, note=reason)


def exit_code(rows: list[Row]) -> int:
    """2 when a benchmark could not run, else 1 when a goal was missed, else 0. Skipped
    benchmarks do not count: they say so in the table."""
    if any(r.verdict == ERROR for r in rows):
        return UNUSABLE
    if any(r.verdict == MISSED for r in rows):
        return BAD_OUTCOME
    return OK


def summary(rows: list[Row]) -> dict[str, int]:
    counts = {MET: 0, MISSED: 0, INFO: 0, ERROR: 0, SKIPPED: 0}
    for r in rows:
        counts[r.verdict] += 1
    return counts


def _number(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else "-" if v is None else str(v)


def _with_unit(v: Any, unit: str) -> str:
    text = _number(v)
    if not unit or isinstance(v, bool):
        return text
    return f"{text}{unit}" if unit in ("x", "%") else f"{text} {unit}"


STYLE = {MET: "green", MISSED: "bold red", ERROR: "bold red", SKIPPED: "yellow", INFO: "dim"}


def table(rows: list[Row], title: str = "polar bench") -> Table:
    out = Table(title=title)
    for col, justify in (("benchmark", "left"), ("figure", "left"), ("value", "right"), ("goal", "right"),
                         ("vs goal", "right"), ("verdict", "left"), ("measured on", "left")):
        out.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        goal = "-" if r.op is None else f"{SHOWN_OPS[r.op]} {_with_unit(r.target, r.unit)}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        value = "-" if r.verdict in (ERROR, SKIPPED) else _with_unit(r.value, r.unit)
        out.add_row(escape(r.benchmark), escape(r.figure), escape(value), escape(goal), ratio,
                    f"[{STYLE[r.verdict]}]{r.verdict}[/]", escape(r.note if r.verdict in (ERROR, SKIPPED) else r.measured_on))
    return out
