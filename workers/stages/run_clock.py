"""The agent's time limit in RUN, less the time its model calls waited out weight-sync pauses.

While a trainer holds the proxy paused, an agent whose call waits can do nothing; a 45 s weight
update every step would otherwise cut sessions short at random, by when the trainer synced
rather than by what the agent did. So RUN reads, with its cancel polls, how long the session's
calls have waited out pauses (``SessionStore.run_poll``, kept by the proxy) and moves the agent's
end -- and the session's ``deadline`` and ``calls_until``, which the proxy reads to admit calls --
that much later. Only time spent waiting counts (an agent running its tests through a pause is
not held up), and never more than the proxy's pause clock says inference was paused meanwhile
(``ProxyControlStore.paused_seconds``): a mark a killed proxy left cannot grow the credit.
``run_paused_seconds`` records it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

log = logging.getLogger("polar.stages")

# A credit this much above the last one written is written (the proxy's view of the deadline
# lags the run's by at most this, plus a cancel poll).
WRITE_STEP_SECONDS = 0.2


class RunClock:
    def __init__(self, limit: float, paused_seconds: Callable[[], float], parked_seconds: float,
                 write: Callable[[dict[str, Any]], None], fields: dict[str, float | None],
                 paused_base: float | None = None) -> None:
        """``limit``: seconds the agent may run; ``paused_seconds``: reads the proxy's pause
        clock; ``parked_seconds``: the session's waited time as RUN starts; ``fields``: the
        session's deadline fields (``F.DEADLINE``, ``F.CALLS_UNTIL``) as they stand, None when unset;
        ``paused_base``: the pause clock as RUN starts, when already read (else read here)."""
        self.limit = limit
        self._paused_seconds, self._write = paused_seconds, write
        self._fields = {name: value for name, value in fields.items() if value is not None}
        self._base = paused_seconds() if paused_base is None else paused_base
        self._parked_base = parked_seconds
        self._started = time.monotonic()
        self.credit = self._written = 0.0
        self.over = False

    def reached(self) -> bool:
        """The agent's limit plus the credit as last read has passed (no I/O). A call that began
        waiting out a pause since that read is not in the credit yet: read it (``observe``)
        before ending the agent (``expired``)."""
        return self.over or time.monotonic() - self._started >= self.limit + self.credit

    def expired(self) -> bool:
        """True once the agent used its limit plus the pause credit (sticky)."""
        self.over = self.reached()
        return self.over

    def observe(self, parked_seconds: float) -> None:
        """Given the session's waited time (read with the cancel poll), extend the session by
        what it grew, as far as the pause clock grew too."""
        waited = parked_seconds - self._parked_base
        if waited <= self.credit:  # (the usual case: nothing waited; the pause clock is not read)
            return
        credit = min(waited, self._paused_seconds() - self._base)
        if credit <= self.credit:  # (a Redis that lost the clock reads lower: a credit is never taken back)
            return
        self.credit = credit
        if credit - self._written >= WRITE_STEP_SECONDS:
            self._written = credit
            self._write({**{name: value + credit for name, value in self._fields.items()},
                         "run_paused_seconds": round(credit, 3)})

    def finish(self) -> None:
        """The agent ended: record the whole credit (``observe`` writes it in steps). Best effort:
        a Redis error here must not turn the agent's own result into another (RUN's end writes
        the same Redis a moment later, and says so if it cannot)."""
        if self.credit > self._written:
            try:
                self._write({"run_paused_seconds": round(self.credit, 3)})
                self._written = self.credit
            except Exception as exc:
                log.warning("could not record %.1f s of pause credit: %s", self.credit, exc)

    def calls_end(self) -> float:
        """When the proxy stops admitting the agent's calls (the earlier of the session's deadline
        fields, wall clock, as it reads them), moved by the credit; never without them."""
        return min(self._fields.values(), default=float("inf")) + self.credit

