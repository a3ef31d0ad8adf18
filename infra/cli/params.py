"""Option types shared by the commands: numbers that must be finite and in range (click's
FloatRange lets NaN through: it compares false with every bound), and ids that name something."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.ParamType):
    name = "number"

    def __init__(self, minimum: float, *, open_min: bool = False) -> None:
        self.minimum, self.open_min = minimum, open_min

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        below = number <= self.minimum if self.open_min else number < self.minimum
        if not math.isfinite(number) or below:
            self.fail(f"{value!r} must be a finite number {'>' if self.open_min else '>='} {self.minimum:g}",
                      param, ctx)
        return number


SECONDS = FiniteFloat(0, open_min=True)  # a time limit
NON_NEGATIVE = FiniteFloat(0)
SAMPLES = click.IntRange(min=1)


class Identifier(click.ParamType):
    """A task or session id: not blank (an empty id would ask the API for a path it does not have,
    and its 404 would not say why)."""

    name = "id"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        text = str(value)
        if not text.strip():
            self.fail("an id cannot be empty", param, ctx)
        return text


ID = Identifier()
