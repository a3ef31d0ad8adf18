"""The agent's time limit in RUN, less the time inference spent paused for weight sync.

While a trainer holds the proxy paused, the agent's model calls wait and it can do nothing; a
45 s weight update every step would otherwise cut sessions short at random, by when the
trainer synced rather than by what the agent did. So RUN reads the proxy's pause clock
(``ProxyControlStore.paused_seconds``) as it polls for cancels, and every second paused while
the agent ran moves its end -- and the session's ``deadline`` and ``calls_until``, which the
proxy reads to admit calls -- that much later. ``run_paused_seconds`` records the credit.
"""

from __future__ import annotations

import time
from typing import Any, Callable

# A credit this much above the last one written is written (the proxy's view of the deadline
# lags the run's by at most this, plus a cancel poll).
WRITE_STEP_SECONDS = 0.2


class RunClock:
    def __init__(self, limit: float, paused_seconds: Callable[[], float],
                 write: Callable[[dict[str, Any]], None], fields: dict[str, float | None]) -> None:
        """``limit``: seconds the agent may run; ``fields``: the session's deadline fields
        (``F.DEADLINE``, ``F.CALLS_UNTIL``) as they stand, None when unset."""
        self.limit = limit
        self._paused_seconds, self._write = paused_seconds, write
        self._fields = {name: value for name, value in fields.items() if value is not None}
        self._base = paused_seconds()
        self._started = time.monotonic()
        self.credit = self._written = 0.0
        self.over = False

    def expired(self) -> bool:
        """True once the agent used its limit plus the pause credit (checked every poll, no I/O)."""
        self.over = self.over or time.monotonic() - self._started >= self.limit + self.credit
        return self.over

    def observe(self) -> None:
        """Read the pause clock (with the cancel poll) and extend the session by what it grew."""
        credit = self._paused_seconds() - self._base
        if credit <= self.credit:  # (a Redis that lost the clock reads lower: a credit is never taken back)
            return
        self.credit = credit
        if credit - self._written >= WRITE_STEP_SECONDS:
            self._written = credit
            self._write({**{name: value + credit for name, value in self._fields.items()},
                         "run_paused_seconds": round(credit, 3)})

    def finish(self) -> None:
        """The agent ended: record the whole credit (``observe`` writes it in steps)."""
        if self.credit > self._written:
            self._written = self.credit
            self._write({"run_paused_seconds": round(self.credit, 3)})

    def calls_end(self, nominal: float) -> float:
        """``nominal`` (when the proxy stopped admitting calls, without pauses) moved by the credit."""
        return nominal + self.credit

