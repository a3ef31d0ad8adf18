"""The trainer-side client: submit tasks, wait for them, and consume results.

    client = RolloutClient("http://rollout:8090", redis_url="redis://...")
    task_id = client.submit(task)
    for item in client.results(group="trainer", consumer="rank0"):
        train_on(item.arrays)      # numpy arrays of each trace's ids, mask and logprobs
        # or item.result: the SessionResult (pydantic: an object per token, ~1 s per million)
        item.ack()                 # only after it is safely in the replay buffer

Delivery is at-least-once (a consumer group with acks); ``results`` drops duplicates of a
session the group has already acked (remembered in Redis, so across restarts), so a re-published
result is never trained on twice; poison entries go to a dead-letter stream (``Delivery``, the
poison check and the thread keeping held entries from claims are in ``client_delivery``).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

import httpx
import redis

from pipeline.client_delivery import Delivery, _keep_held, _poison
from pipeline.schemas import SessionResult, TaskRequest, TaskStatus
from pipeline.settings import Settings
from pipeline.stores.results_ledger import no_group
from pipeline.stores.results_stream import ResultsStream, StreamEntry

log = logging.getLogger("polar.client")
RECONNECT_FIRST_SECONDS, RECONNECT_MAX_SECONDS = 0.5, 30.0
PENDING_PAGE = 256  # unacked entries re-read per round trip at a (re)start
CLAIM_PAGE = 100  # a dead consumer's entries claimed per round trip (all of them, page after page)


class RolloutError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.body = status, body
        err = body.get("error") if isinstance(body, dict) else None
        super().__init__(f"{status}: {err.get('message') if isinstance(err, dict) else body}")


def api_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the API is away for now (restarting, unreachable, or a 5xx while its
    Redis is away) rather than refusing the request: worth polling on."""
    return isinstance(exc, httpx.TransportError) or (isinstance(exc, RolloutError) and exc.status >= 500)


class RolloutClient:
    def __init__(self, api_url: str, *, redis_url: str | None = None, api_token: str | None = None,
                 timeout: float = 30.0, transport: httpx.BaseTransport | None = None,
                 max_deliveries: int = 5, redis_patience: str = "patient") -> None:
        """``api_token``: the API's bearer token (POLAR_API_TOKEN); ``transport``: another way to
        reach the API (tests: ``httpx.WSGITransport(app=...)``); ``max_deliveries``: see
        ``results`` (POLAR_RESULTS_MAX_DELIVERIES); ``redis_patience``: how long one Redis
        command retries before ``results`` backs off and reconnects itself (``patient``: ~3 min,
        ``impatient``: ~8 s, ``quick``: not at all)."""
        self.max_deliveries = max_deliveries
        self.redis_patience = redis_patience
        self._results_stream: ResultsStream | None = None
        self.api_url = api_url.rstrip("/")
        self.redis_url = redis_url
        headers = {"Authorization": f"Bearer {api_token}"} if api_token else {}
        self._http = httpx.Client(timeout=timeout, transport=transport, headers=headers)

    @classmethod
    def from_settings(cls, settings: Settings, **kw: Any) -> "RolloutClient":
        kw.setdefault("max_deliveries", settings.results_max_deliveries)
        return cls(settings.api_url, redis_url=settings.redis_url, api_token=settings.secret("api_token"), **kw)

    # --- tasks -------------------------------------------------------------------------------

    def submit(self, task: TaskRequest | dict[str, Any]) -> str:
        payload = task.model_dump(mode="json") if isinstance(task, TaskRequest) else task
        return self._call("POST", "/rollout/task/submit", json=payload)["task_id"]

    def status(self, task_id: str, *, results: bool = True) -> TaskStatus:
        data = self._call("GET", f"/rollout/task/{_segment(task_id)}", params={"results": int(results)})
        return TaskStatus.model_validate(data)

    def cancel(self, task_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/rollout/task/{_segment(task_id)}")

    def session(self, session_id: str) -> SessionResult:
        """A finished session's result (from Redis, or its results file once Redis forgot it)."""
        return SessionResult.model_validate(self._call("GET", f"/rollout/session/{_segment(session_id)}"))

    def completions(self, session_id: str) -> dict[str, Any]:
        """A finished session's raw completion records: ``completions``, ``errors``, ``unreadable_records``."""
        return self._call("GET", f"/rollout/session/{_segment(session_id)}/completions")

    def pipeline_status(self) -> dict[str, Any]:
        return self._call("GET", "/rollout/status")

    def wait(self, task_id: str, *, timeout: float | None = None, poll_seconds: float = 1.0,
             results: bool = True) -> TaskStatus:
        """Poll until the task ends (or ``timeout``). An API restarting or answering 5xx while its
        Redis is away is waited out (logged), not raised: the task goes on meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last: str = "no answer yet"
        while True:
            try:
                st = self.status(task_id, results=False)
                if st.status.is_terminal():
                    return self.status(task_id, results=True) if results else st
                last = str(st.counts)
            except Exception as exc:
                if not api_outage(exc):
                    raise  # the task is unknown, the token refused: no outage to wait out
                last = f"{type(exc).__name__}: {exc}"
                log.warning("waiting for task %s: the API is unavailable (%s); polling on", task_id, last)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"task {task_id} not finished after {timeout}s ({last})")
            time.sleep(poll_seconds if deadline is None else max(0.0, min(poll_seconds, deadline - time.monotonic())))

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        resp = self._http.request(method, f"{self.api_url}{path}", **kw)
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        if resp.status_code >= 400:
            raise RolloutError(resp.status_code, body)
        return body

    # --- results -----------------------------------------------------------------------------

    def results(self, *, group: str, consumer: str, block_ms: int = 5000, count: int = 16,
                stop_after: float | None = None, claim_idle_ms: int = 300_000,
                max_deliveries: int | None = None, dedupe_seconds: float = 7 * 24 * 3600,
                dead_letters: bool = False) -> Iterator[Delivery]:
        """Yield results from the stream through a consumer group, forever or until
        ``stop_after`` seconds pass without a new result.

        - Unacked entries of this consumer are delivered first (a restart loses nothing), then,
          at start and every ``claim_idle_ms / 2``, entries idle that long in other consumers
          (they died), then new ones.
        - A session this group has acked before (``Delivery.ack``, remembered in Redis for
          ``dedupe_seconds``) or that this iterator is already holding is acked and skipped: a
          session published twice is trained on once, across restarts too.
        - ``Delivery.nack()`` hands an entry back: it is delivered again. An entry delivered
          ``max_deliveries`` times without an ack (nacked, or its consumer kept dying on it),
          undecodable, or trimmed while pending goes to the dead-letter stream instead.
        - While the iterator is open, the entries it holds -- yielded, or read ahead in a batch
          not yet handed over -- are kept from other consumers' claims (their idle time reset
          every ``claim_idle_ms / 3`` by a daemon thread): a trainer may hold deliveries through
          a step longer than ``claim_idle_ms``. A dead process stops resetting them, and they
          are claimed; a process that was only stopped (frozen) meanwhile hands over none of the
          entries claimed from it when it resumes (each is checked to be its own as it is handed).
        - A delivery is counted when the entry is handed to the trainer (``Delivery.deliveries``),
          not when it is read: entries read ahead with one the trainer keeps dying on are not
          dead-lettered with it. ``dead_letters=True``: each entry dead-lettered is also yielded,
          as a ``Delivery`` with ``dead_letter`` set (the reason; nothing to ack), so a consumer
          waiting for that session (a GRPO group) learns that it will not come.
        - When Redis goes away the iterator waits and reconnects with back-off (re-reading its
          own unacked entries first: nothing is skipped, nothing it holds is yielded again)
          instead of ending.
        - A group created by this call starts at the stream's oldest entry: entries trimmed before
          it existed never come (a warning, and ``missed_entries(group)``)."""
        if not self.redis_url:
            raise ValueError("results() needs redis_url")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"results(count={count!r}): entries per read, a whole number >= 1")
        if isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms < 1:
            # (Redis's BLOCK 0 waits for ever: stop_after and the claims would never come)
            raise ValueError(f"results(block_ms={block_ms!r}): how long one read waits, a whole number of ms >= 1")
        from pipeline.stores.connection import connect

        stream = ResultsStream(connect(self.redis_url, mode=self.redis_patience))
        limit = max_deliveries or self.max_deliveries
        holding: dict[str, str] = {}  # session -> entry yielded and neither acked nor nacked yet
        reading: dict[str, None] = {}  # entries read ahead (a batch not handed over yet): kept from claims too
        acked_here: set[str] = set()  # sessions acked since the current batch's de-duplication query
        nacked: list[str] = []

        def settle(e: StreamEntry, nack: bool) -> None:
            holding.pop(e.session_id, None)
            if nack:
                nacked.append(e.entry_id)
            else:
                stream.ack_delivered(group, e.entry_id, e.session_id, dedupe_seconds)
                acked_here.add(e.session_id)

        def deliver(batch: list[StreamEntry]) -> Iterator[Delivery]:
            reading.update(dict.fromkeys(e.entry_id for e in batch))
            try:
                done = stream.delivered(group, [e.session_id for e in batch if e.session_id])
                acked_here.clear()  # from here on, acks the query did not see
                for e in batch:
                    reading.pop(e.entry_id, None)
                    held = holding.get(e.session_id)
                    if held == e.entry_id:
                        continue  # still in the trainer's hands (re-read after a reconnect): not delivered again
                    if e.session_id and (e.session_id in done or e.session_id in acked_here or held is not None):
                        stream.ack(group, e.entry_id)  # a duplicate publication
                        continue
                    # Still this consumer's? One stalled (stopped, frozen) past its claim time
                    # comes back to a batch another consumer has claimed -- and trained on -- since.
                    owner, acked = stream.holder(group, e.entry_id, e.session_id)
                    if owner != consumer:
                        continue  # theirs now (or acked): not handed to this trainer as well
                    if acked:
                        stream.ack(group, e.entry_id)  # its session acked meanwhile, from another entry
                        continue
                    why = _poison(e)
                    if why is None:
                        # Counted when handed to the trainer, not when read: a batch read ahead
                        # (and re-read after a crash) is not "delivered" until the trainer has it.
                        e = replace(e, deliveries=stream.hand(group, e.entry_id, dedupe_seconds))
                        if e.deliveries > limit:
                            why = f"delivered {e.deliveries} times without an ack (max_deliveries={limit})"
                    if why:
                        stream.dead_letter(group, consumer, e, why)
                        if dead_letters:
                            yield Delivery(e.entry_id, e, lambda: None, dead_letter=why)
                        continue
                    holding[e.session_id] = e.entry_id
                    yield Delivery(e.entry_id, e, functools.partial(settle, e, False),
                                   functools.partial(settle, e, True), functools.partial(stream.unhand, group, e.entry_id))
            finally:
                for e in batch:
                    reading.pop(e.entry_id, None)

        alive = threading.Event()
        threading.Thread(target=_keep_held, args=(stream, group, consumer, holding, reading, alive, claim_idle_ms),
                         name=f"polar-results-{consumer}", daemon=True).start()
        try:
            yield from self._consume(stream, group, consumer, deliver, nacked, block_ms, count, stop_after, claim_idle_ms)
        finally:
            alive.set()  # the iterator is closed (or collected): its entries may be claimed
            try:
                stream.stop_beating(group, consumer)
            except redis.RedisError:  # it lapses by itself
                pass

    @staticmethod
    def _consume(stream: ResultsStream, group: str, consumer: str, deliver: Callable[..., Iterator[Delivery]],
                 nacked: list[str], block_ms: int, count: int, stop_after: float | None,
                 claim_idle_ms: int) -> Iterator[Delivery]:
        claim_every = max(claim_idle_ms / 2000, 0.05)
        idle_since = time.monotonic()
        backoff = RECONNECT_FIRST_SECONDS
        while True:
            try:
                stream.ensure_group(group)
                after = "0"  # its unacked entries, a page at a time: one reply of thousands of blobs
                while page := stream.read(group, consumer, pending=True, count=PENDING_PAGE, after=after):
                    after = page[-1].entry_id  # (Redis buffers a reply whole, its memory on top of the data's)
                    yield from deliver(page)
                last_claim = 0.0
                while True:
                    if time.monotonic() - last_claim >= claim_every:
                        last_claim = time.monotonic()
                        while claimed := stream.claim_stale(group, consumer, claim_idle_ms, CLAIM_PAGE):
                            yield from deliver(claimed)  # a full page: a dead consumer may hold more
                            if len(claimed) < CLAIM_PAGE:
                                break
                    while nacked:
                        again, nacked[:] = list(nacked), []
                        yield from deliver(stream.reclaim(group, consumer, again))
                    wait = min(block_ms, max(1, int(claim_every * 1000)))
                    if stop_after is not None:  # a long block_ms does not outlast stop_after
                        wait = min(wait, max(1, int((stop_after - (time.monotonic() - idle_since)) * 1000) + 1))
                    batch = stream.read(group, consumer, pending=False, count=count, block_ms=wait)
                    backoff = RECONNECT_FIRST_SECONDS
                    if batch:
                        idle_since = time.monotonic()
                        yield from deliver(batch)
                    elif stop_after is not None and time.monotonic() - idle_since > stop_after and not nacked:
                        return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("results stream unreachable (%s); reconnecting in %.1fs", exc, backoff)
                time.sleep(backoff)
                backoff = min(RECONNECT_MAX_SECONDS, backoff * 2)
            except redis.ResponseError as exc:
                if not no_group(exc):
                    raise
                # Redis came back without its data (no persistence, a failover to a lagging
                # replica, a flush) or the group was destroyed: made again at the stream's start,
                # as a first results() makes it; what the group acked before is still skipped
                # (``delivered``), what the stream lost is reported as missed.
                log.error("results stream: consumer group %s is gone (%s): Redis lost it (restarted without its "
                          "data? a failover?) or it was destroyed; creating it again", group, exc)

    def close_task(self, group: str, task_id: str, keep_seconds: float = 7 * 24 * 3600,
                   created_at: float | None = None) -> None:
        """Remember, in Redis, that the consumer group has taken ``task_id``'s group
        (``trainers.stream_groups``): it survives the consumer's restart. ``created_at``: the
        task's (``TaskStatus.created_at``), so that a later task reusing the id is not taken for it."""
        self._stream().close_task(group, task_id, keep_seconds, created_at)

    def lost_sessions(self, group: str, task_id: str, add: str | None = None) -> int:
        """How many of ``task_id``'s sessions the consumer group dead-lettered while their GRPO
        group was open (``trainers.stream_groups``), after noting ``add`` (a session) when given;
        kept in Redis, so a restart still closes the group without them."""
        return self._stream().lost_sessions(group, task_id, add)

    def missed_entries(self, group: str) -> int | None:
        """How many stream entries the consumer group can never read: trimmed from the stream
        (``POLAR_RESULTS_STREAM_MAXLEN``) before its first ``results()`` created it (logged as a
        warning then). 0 when none, None when the server could not tell (Redis < 7)."""
        return self._stream().missed(group)

    def gone_from_stream(self, session_ids: list[str]) -> set[str]:
        """Which of the sessions were published in entries trimmed from the stream (before a
        consumer group existed: ``missed_entries``); their results are still ``session()``'s."""
        return self._stream().gone(session_ids)

    def live_consumers(self, group: str) -> list[str]:
        """The consumers of the consumer group with an open ``results()`` iterator (their beat)."""
        return self._stream().live_consumers(group)

    def task_closed(self, group: str, task_id: str, registered_at: float | None = None) -> bool:
        """Whether the consumer group has taken ``task_id``'s group -- the group of the task a
        session ``registered_at`` then belongs to: a task id may be submitted again once its first
        task expired from the API (about a day), and that new task's sessions are not the closed
        one's late sessions."""
        closed = self._stream().task_closed(group, task_id)
        return closed is not None and same_task(closed, registered_at)

    def _stream(self) -> ResultsStream:
        if not self.redis_url:
            raise ValueError("the results stream needs redis_url")
        if self._results_stream is None:
            from pipeline.stores.connection import connect

            self._results_stream = ResultsStream(connect(self.redis_url, mode=self.redis_patience))
        return self._results_stream

    def lag(self, group: str) -> int | None:
        """Entries the consumer group has not read yet (XINFO GROUPS lag; alert on it: results
        far behind can be trimmed from the stream)."""
        return self._stream().lag(group)


# A task id is free again only once its task expired from the API (its timeout and a day at
# least), and every session of a task is registered in its submission: a session registered this
# long after the task closed under its id belongs to a later task of the same id.
TASK_REUSE_MARGIN_SECONDS = 3600.0


def same_task(created_at: float | None, registered_at: float | None) -> bool:
    """Whether a session ``registered_at`` belongs to the task of that id ``created_at`` (either
    unknown: assumed so)."""
    return created_at is None or registered_at is None or registered_at < created_at + TASK_REUSE_MARGIN_SECONDS


def load_task_file(path: Path) -> dict[str, Any]:
    """Read a TaskRequest JSON file; relative ``src`` paths of upload actions resolve against
    the file's folder, so example tasks work from any working directory."""
    try:  # NaN and Infinity are no JSON (Python's parser takes them; nothing after it could send them)
        data = json.loads(path.read_text(), parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("the task file nests deeper than any task does") from None
    if not isinstance(data, dict):
        raise ValueError(f"a task is a JSON object, not {type(data).__name__}")
    runtime = data.get("runtime")
    runtime = runtime if isinstance(runtime, dict) else {}
    for key in ("prepare", "eval_prepare"):
        actions = runtime.get(key)
        for action in actions if isinstance(actions, list) else ():  # anything else: the API says what is wrong
            src = action.get("src") if isinstance(action, dict) else None
            if isinstance(src, str) and src and not Path(src).is_absolute():
                action["src"] = str((path.parent / src).resolve())
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (a task's numbers are finite)")


def _segment(value: str) -> str:
    """An id as one URL path segment: whatever it holds, it names that id and nothing else."""
    return quote(value, safe="")
