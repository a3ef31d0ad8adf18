"""The trainer-side client's deliveries (``RolloutClient.results``, ``pipeline/client.py``): one
stream entry as the trainer gets it (``Delivery``: ack, nack, hold; the blob decoded on first
access), which entries are poison (dead-lettered rather than delivered), and the thread that
keeps an open iterator's held entries from other consumers' claims (its beat). Kept apart from
``client`` so the consumer-group loop there is read without them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

import redis

from pipeline.blobs import ResultArrays
from pipeline.schemas import SessionResult
from pipeline.stores.results_stream import ResultsStream, StreamEntry

log = logging.getLogger("polar.client")


@dataclass
class Delivery:
    """One stream entry; the blob is decoded on first access, the way the trainer asks for it."""

    entry_id: str
    entry: StreamEntry
    _ack: Callable[[], object]
    _nack: Callable[[], object] = lambda: None
    _hold: Callable[[], object] = lambda: None
    # Why the entry went to the dead-letter stream instead (``results(dead_letters=True)``): it
    # is no result to train on, only word that its session's result will not come.
    dead_letter: str | None = None

    @property
    def result(self) -> SessionResult:
        return self.entry.result

    @property
    def arrays(self) -> ResultArrays:
        """Each trace's ids, loss mask and logprobs as numpy arrays (pipeline/blobs/arrays.py)."""
        return self.entry.arrays

    @property
    def deliveries(self) -> int:
        """How often this entry has been delivered to the group, this time included."""
        return self.entry.deliveries

    def ack(self) -> None:
        """The result is safely taken: the group will not deliver it (or a duplicate) again."""
        self._ack()

    def nack(self) -> None:
        """Hand the entry back: it is delivered again, until ``max_deliveries`` (then dead-lettered)."""
        self._nack()

    def hold(self) -> None:
        """The trainer only keeps the entry, unacked, without working on it yet (``iter_groups``
        waiting for the rest of a GRPO group): this delivery is not counted against
        ``max_deliveries``, so restarts while a group fills never dead-letter its sessions."""
        self._hold()


def _keep_held(stream: ResultsStream, group: str, consumer: str, holding: dict[str, str], reading: dict[str, None],
               closed: threading.Event, claim_idle_ms: int) -> None:
    """Every ``claim_idle_ms / 3``: beat (the consumer is alive, whatever the other consumers'
    ``claim_idle_ms``) and reset the idle time of what it holds."""
    every = max(claim_idle_ms / 3000, 0.05)
    while not closed.is_set():
        try:
            stream.beat(group, consumer, claim_idle_ms)
            stream.touch(group, consumer, [*holding.values(), *reading])
        except redis.RedisError as exc:  # the next beat tries again
            log.warning("could not keep held results from other consumers' claims: %s", exc)
        closed.wait(every)


def _poison(e: StreamEntry) -> str | None:
    """Why ``e`` must go to the dead-letter stream rather than to the trainer, whatever its
    delivery count, if it must."""
    if not e.blob:
        return "trimmed from the stream while pending: its payload is gone"
    try:
        e.arrays.read_all()  # decodes every array (cached: what the trainer reads next)
    except Exception as exc:  # noqa: BLE001 - any failure to decode makes it poison
        return f"undecodable: {type(exc).__name__}: {exc}"
    return None
