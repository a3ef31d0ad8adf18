"""What a benchmark's ``--json`` prints: ONE JSON object on the last line of stdout, read by
``polar bench`` (infra/cli/bench.py), which runs every benchmark as its own process.

    {"benchmark": "merge",
     "figures": [{"figure": "3.2 M prompt ids, one build", "value": 50.5, "unit": "CPU ms",
                  "goal": {"op": "<", "target": 100}, "input": "1 conversation x 100 completions, ..."}],
     "details": {...}}

``goal`` is null for a figure reported without a goal. ``op`` is one of ``< <= > >= ==``;
``polar bench`` decides met / missed itself from value, op and target. ``input`` names what the
figure was measured on (sizes, turns, tokens), in one short phrase. ``details`` is anything else
the benchmark measured, for whoever reads the JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

OPS = ("<", "<=", ">", ">=", "==")


def figure(name: str, value: float | int | bool, unit: str, measured_on: str,
           goal: tuple[str, float | int | bool] | None = None) -> dict[str, Any]:
    if goal is not None and goal[0] not in OPS:
        raise ValueError(f"goal operator {goal[0]!r}: expected one of {OPS}")
    return {"figure": name, "value": value, "unit": unit, "input": measured_on,
            "goal": None if goal is None else {"op": goal[0], "target": goal[1]}}


def emit(benchmark: str, figures: list[dict[str, Any]], **details: Any) -> None:
    """The one JSON line; everything a benchmark printed before it is for humans."""
    sys.stdout.flush()
    print(json.dumps({"benchmark": benchmark, "figures": figures, "details": details}, default=str), flush=True)
