"""One model call, end to end: admission (session gate + pause gate, one Redis round trip) ->
the engine request (the provider's translation, harness noise scrubbed, the served model name)
-> engine dialect -> endpoint pool (the output limit fitted into the engine's context: the
``ContextFitting`` mixin in ``context_fitting``, its rules in ``context_limits``) -> capture ->
the caller's response -> release (one round trip, with the record). With ``context_fitting``
and ``app``/``calls`` the only modules that do I/O; Redis is reached through the ``pipeline``
stores' commands. Metrics are tallied in process (``metrics``), never in Redis."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, TypeVar

import redis

from pipeline.schemas import TokenIn
from pipeline.settings import Settings
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from proxy import noise, upstream
from proxy.capture import build_error_record, build_record, new_completion_id
from proxy.client_watch import has_left, watching
from proxy.context_fitting import ContextFitting
from proxy.context_limits import ContextLengths
from proxy.control import Control
from proxy.errors import ProxyError, UpstreamError
from proxy.hot_redis import HotRedis, NoScript, Pending, RedisReplyError
from proxy.inflight import InflightCalls, Lease
from proxy.metrics import NoMetrics, ProxyMetrics
from proxy.providers import PROVIDERS, Parsed, Provider, ProviderScope, Turn, turn_from_chat
from proxy.providers.base import assistant_message
from proxy.sessions import SessionGate, session_for
from proxy.token_in import TokenInCalls
from proxy.upstream import UpstreamTransport
from proxy.upstream.base import id_list

log = logging.getLogger("polar.proxy")
T = TypeVar("T")
REDIS_AWAY = (OSError, redis.ConnectionError, redis.TimeoutError)  # refused, reset, timed out, unreachable


@dataclass(frozen=True)
class Admission:
    key: str | None
    lease: Lease
    pending: Pending | None  # the admission's round trip, sent (None: Redis was away)


class Failed(NamedTuple):
    """What a call's error record names: its provider, and the request as the client sent it."""
    provider: str
    original: Any


@dataclass
class Call:
    lease: Lease  # the call's in-flight lease (its id, its session)
    seq: int
    policy_version: str | None
    provider: Provider
    parsed: Parsed
    original: dict[str, Any]
    started: float  # wall clock, after admission (the record's started_at)
    scope: ProviderScope
    received: float  # perf_counter when the request arrived (the proxy's own time, metrics)
    token_in: TokenIn = TokenIn.OFF  # the session's agent.token_in (proxy/token_in.py)
    original_json: bytes | None = None  # ``original`` as the client sent it (stored as sent)
    client: Any = None  # the client's socket, watched while the engine samples (proxy/client_watch.py)
    key: str | None = None  # the session key it presented (checked again after a wait)

    @property
    def session_id(self) -> str:
        return self.lease.session_id


class Gateway(ContextFitting):
    def __init__(self, settings: Settings, stores: Stores, transport: UpstreamTransport | None = None) -> None:
        self.settings = settings
        self.stores = stores
        self.gate = SessionGate(stores.sessions)
        self.engine = upstream.create(settings.upstream_engine)
        self.pool = upstream.UpstreamPool(settings.upstream_url, settings.upstream_timeout_seconds, transport,
                                          settings.proxy_engine_wait_seconds)
        self.control = Control(stores.proxy_control, settings.policy_version)
        self.hot = HotRedis(settings.require_redis())  # the two round trips of every call
        self.inflight = InflightCalls(stores, self.hot, settings.call_lease_seconds)
        self.noise = noise.rules_from(settings.noise_rules, settings.noise_patterns)
        self.contexts = ContextLengths(settings.upstream_context_length, self._model_cards)
        self.context_reserve = int(getattr(self.engine, "context_reserve", 0))
        self.metrics: ProxyMetrics | NoMetrics = (ProxyMetrics(self.inflight.count, self.control.status)
                                                  if settings.proxy_metrics else NoMetrics())
        self.token_in = TokenInCalls(self.engine, self.pool, self.hot, stores.records, settings.upstream_token_in,
                                     settings.upstream_model)

    def _model_cards(self, endpoint: str) -> list[dict[str, Any]]:
        data = self.pool.get_json("/v1/models", endpoint=endpoint).get("data")
        return data if isinstance(data, list) else []

    def redis_ok(self) -> bool:
        try:
            return bool(connect(self.settings, mode="quick").ping())
        except redis.RedisError:
            return False

    def scope(self, session_id: str, query: Any = None) -> ProviderScope:
        return ProviderScope(session_id, self.stores.responses, query if query is not None else {})

    # --- admission and release -----------------------------------------------------------------

    def admit(self, key: str | None) -> tuple[Lease, int, str | None, TokenIn]:
        """Admit a model call by its session key: the session must be live, and while weight sync
        pauses inference the call waits here. Returns (its lease, sequence number, policy
        version, the session's token-in mode)."""
        return self.admitted(self.begin_admit(key))

    def begin_admit(self, key: str | None) -> "Admission":
        """Send a call's admission; ``admitted`` reads its verdict. The caller may parse the
        request in between (never acting on it: a refused call is answered as refused), and must
        end with ``admitted`` or ``cancel_admit``."""
        sid = session_for(key)
        lease, expiry = self.inflight.new(sid)
        try:
            return Admission(key, lease, self.hot.send(self._admit_commands(sid, key, lease.call_id, expiry)))
        except REDIS_AWAY:
            return Admission(key, lease, None)  # ``admitted`` waits for Redis and sends it again
        except BaseException:
            self.inflight.done(lease)
            raise

    def _admit_commands(self, sid: str, key: str | None, call_id: str, expiry: float) -> list[tuple[Any, ...]]:
        return [self.gate.begin_command(sid, key or "", call_id, expiry),
                *self.stores.proxy_control.enter_commands(call_id, expiry)]

    def admitted(self, admission: "Admission", retried: bool = False, waiting: bool = False,
                 park: bool = False, failed: "Failed | None" = None) -> tuple[Lease, int, str | None, TokenIn]:
        """The admission's verdict: (lease, sequence number, policy version, token-in mode). While
        weight sync pauses inference the call waits here -- or, with ``park``, the version is
        ``control.PARKED`` and the call waits in ``unpark`` (a stream kept alive meanwhile). A call
        numbered and then refused by its wait (the pause outlasted it, its session ended) leaves
        an error record when ``failed`` says for which provider and request: every number has one
        (POSTRUN counts a number without a record as a call the service lost)."""
        lease, sid = admission.lease, admission.lease.session_id
        try:
            if admission.pending is None:
                raise ConnectionError("Redis could not be reached when the call arrived")
            begin, *enter = admission.pending.replies()
        except REDIS_AWAY as away:
            self.inflight.done(lease)
            if waiting:
                raise
            return self._admit_when_back(admission.key, away, park, failed)
        except NoScript:
            # Redis restarted (or dropped its scripts) since this process loaded ours; the
            # round trip's other commands still ran, so undo them before trying again.
            self._release(lease, [], entered=True)
            self.gate.reload()
            if retried:
                raise
            return self.admitted(self.begin_admit(admission.key), retried=True, park=park, failed=failed)
        except BaseException:
            self.inflight.done(lease)
            raise
        try:
            seq, token_in = self.gate.admitted(sid, begin)
        except ProxyError:
            self._release(lease, [], entered=True)
            raise
        try:
            return lease, seq, self.control.entered(enter, lease.call_id, self.inflight.expiry,
                                                    self.settings.upstream_timeout_seconds,
                                                    still_wanted=lambda: self.check_key(admission.key),
                                                    park=park, parked=lambda on: self._parked(sid, on)), token_in
        except ProxyError as err:
            if failed is None:
                self._release(lease, [], entered=False)
            else:
                self.fail(lease, seq, failed.provider, err, failed.original, time.time(), entered=False)
            raise err

    def _admit_when_back(self, key: str | None, away: Exception, park: bool = False,
                         failed: "Failed | None" = None) -> tuple[Lease, int, str | None, TokenIn]:
        """Admit a call that found Redis away, once it is back: nothing was sampled yet, so the
        call waits rather than fail with a 503 that an SDK's few quick retries would not outlast.
        (An admission whose reply was lost may have been counted: its in-flight entry lapses
        with its lease, as a killed proxy's does.)"""
        return self._when_redis_back(lambda: self.admitted(self.begin_admit(key), waiting=True, park=park,
                                                           failed=failed), away)

    def unpark(self, call: Call) -> None:
        """Wait out the pause a parked call found (``admitted(park=True)``), then stamp the
        version it samples under; a call that cannot go on (the pause outlasted its wait, its
        session ended) leaves its error record, as one that waited at admission does; one whose
        client left is recorded as ``ClientGone``, as when it leaves while the engine samples
        (POSTRUN counts it in ``calls_aborted``, not as a call the service lost)."""
        try:
            call.policy_version = self.control.wait_out(call.lease.call_id, *self._wait_terms(call))
        except ProxyError as err:  # (ClientGone: kept as the engine-call watch keeps it, an aborted call)
            self.fail(call.lease, call.seq, call.provider.name, err, call.original, call.started, entered=False)
            raise
        except BaseException:
            self.abandon(call.lease)
            raise

    def _wait_terms(self, call: Call) -> tuple[Any, ...]:
        """How a call waits out a pause: (its lease, the longest wait, still_wanted, gone, parked)."""
        return (self.inflight.expiry, self.settings.upstream_timeout_seconds, lambda: self.check_key(call.key),
                lambda: has_left(call.client), lambda on: self._parked(call.lease.session_id, on))

    def _out_while_paused(self, call: Call) -> None:
        """Between a call's waits for an engine that cannot be reached (restarting, perhaps for the
        very weight sync that paused inference): nothing is sampled yet, so the call leaves the
        pause's drain rather than hold it up, and samples under the version the resume sets.
        (Reading the flag rides out a Redis restart, as the call's admission did.)"""
        if self.control.paused():
            call.policy_version = self.control.step_out(call.lease.call_id, *self._wait_terms(call))

    def _parked(self, sid: str, on: bool | None) -> None:
        """Mark the session held up by a pause (or no longer): best effort -- a mark that cannot be
        written costs the agent that time, and RUN never credits more than the pause lasted."""
        try:
            self.stores.sessions.park(sid, on)
        except (OSError, redis.RedisError) as exc:
            log.warning("session %s: could not mark a call %s a weight-sync pause: %s", sid,
                        "waiting out" if on is not False else "done waiting out", exc)

    def _release_when_back(self, lease: Lease, record_commands: list[tuple[Any, ...]], away: Exception) -> None:
        """A sampled turn whose record could not be written (Redis away): written once Redis is
        back, else the call fails (503) as before. The first send may have been applied with only
        its reply lost, so the appends go again only where the very record is not in the list
        already (the other commands are idempotent)."""
        commands = self._release_commands(lease, [_append_once(c) for c in record_commands])
        self._when_redis_back(lambda: self.hot.send(commands).replies(), away)

    def _when_redis_back(self, attempt: Callable[[], T], away: Exception) -> T:
        """``attempt()`` again, with back-off, until it reaches Redis or ``proxy_redis_wait_seconds``
        pass (then the last error)."""
        deadline = time.monotonic() + self.settings.proxy_redis_wait_seconds
        pause = 0.1
        while time.monotonic() + pause <= deadline:
            time.sleep(pause)  # (a greenlet's sleep under gevent)
            pause = min(2 * pause, 2.0)
            try:
                return attempt()
            except REDIS_AWAY as exc:
                away = exc
        raise away

    def check_key(self, key: str | None) -> str:
        """The session of a live key, checked before a call's large body is read; waits for a
        Redis that is away, as an admission does."""
        try:
            return self.gate.check(key)
        except REDIS_AWAY as away:
            return self._when_redis_back(lambda: self.gate.check(key), away)

    def cancel_admit(self, admission: "Admission") -> None:
        """An admission sent but given up before its verdict (the request's handler was killed):
        undo it when Redis answers, else its lease lapses on its own."""
        if admission.pending is None:
            self.inflight.done(admission.lease)
            return
        try:
            admission.pending.replies()
            self._release(admission.lease, [], entered=True)
        except Exception:  # noqa: BLE001 - best effort; the leases expire
            admission.pending.discard()
            self.inflight.done(admission.lease)

    def _release(self, lease: Lease, record_commands: list[tuple[Any, ...]], entered: bool = True) -> None:
        self._send_release(lease, record_commands, entered).replies()

    def _send_release(self, lease: Lease, record_commands: list[tuple[Any, ...]], entered: bool = True) -> Pending:
        self.inflight.done(lease)
        return self.hot.send(self._release_commands(lease, record_commands, entered))

    def _release_commands(self, lease: Lease, record_commands: list[tuple[Any, ...]],
                          entered: bool = True) -> list[tuple[Any, ...]]:
        """The record (if any), the call out of the session's in-flight set and, once it entered,
        out of the proxy's."""
        control = self.stores.proxy_control.exit_commands(lease.call_id) if entered else []
        return [*record_commands, *self.stores.sessions.end_call_commands(lease.session_id, lease.call_id), *control]

    def fail(self, lease: Lease, seq: int, provider: str, err: ProxyError, original: Any, started: float,
             entered: bool = True) -> None:
        """Release the call and keep the failure for diagnosis (never as a completion), its message
        as the caller's API worded it: what the agent was told and logged (Claude Code's "prompt is
        too long: ...", Gemini's "The input token count ..."), which the result's
        ``last_proxy_error`` and the viewer show beside the agent's own output."""
        sid = lease.session_id
        self._release(lease, self.stores.records.append_error_commands(sid, build_error_record(
            session_id=sid, seq=seq, provider=provider, status=err.status, error_type=type(err).__name__,
            message=str(PROVIDERS[provider].error(err)["error"]["message"]), original=original if isinstance(original, dict) else {},
            started_at=started, finished_at=time.time())), entered=entered)
        self.metrics.written("error")

    def abandon(self, lease: Lease) -> None:
        self._release(lease, [])

    # --- the call ------------------------------------------------------------------------------

    def complete(self, call: Call, encode: Callable[[Turn, dict[str, Any]], T]) -> tuple[Turn, dict[str, Any], T]:
        """Run an admitted call and release it on every path (also when a stream's client has
        gone), so POSTRUN's in-flight wait and the pause drain are exact. The answer is rendered
        and ``encode``d (the caller's bytes) before the record is written: a turn the caller
        cannot be given is kept as an error, never as a completion (an SDK retries the 5xx and
        would have sampled -- and recorded -- the turn again). It leaves only once recorded."""
        sid, parsed = call.session_id, call.parsed
        try:
            # An engine that cannot be reached is waited for; a pause taken meanwhile is waited out.
            with upstream.between_engine_waits(lambda: self._out_while_paused(call)):
                chat, normalizations = self._engine_request(parsed)
                requested_max_tokens = chat.get("max_tokens")
                # Token-in sessions: the prompt of a call that continues a recorded turn is spliced
                # from that turn's ids (proxy/token_in.py) and sampled as ids.
                plan = self.token_in.plan(chat, sid, call.token_in) if call.token_in != TokenIn.OFF else None
                engine_call = None
                if plan is not None and plan.spliced is not None:
                    chat = self._fit_spliced(chat, len(plan.spliced.prompt_ids), sid)
                    engine_call = self.token_in.request(plan, chat, parsed.top_logprobs, self._context(chat, sid))
                t0 = time.perf_counter()
                with watching(call.client):  # a client that leaves aborts the engine call (ClientGone)
                    if plan is not None and engine_call is not None:
                        raw, base, chat = self._sample_spliced(plan, engine_call, chat, parsed.top_logprobs, sid)
                    elif parsed.truncate_input:
                        raw, base, chat, dropped = self._sample_truncating(chat, parsed.top_logprobs, sid)
                        if dropped:
                            normalizations = [*normalizations, f"truncation:auto dropped the {dropped} oldest messages"]
                    else:
                        raw, base, chat = self._sample(chat, parsed.top_logprobs, sid)
            latency_ms = (time.perf_counter() - t0) * 1000.0
            try:
                captured = self.engine.extract(raw)
            except upstream.CaptureError as exc:
                raise UpstreamError(str(exc)) from None
            turn = turn_from_chat(raw, parsed.model)
            if turn.finish_reason == "abort":  # vLLM's: the engine gave up mid-answer (shutdown, an error)
                raise UpstreamError("the inference server aborted the request before its answer was complete "
                                    "(finish_reason 'abort')")
            sampled = assistant_message(turn)
            completion_id = new_completion_id()
            record = build_record(
                session_id=sid, seq=call.seq, provider=call.provider.name, stream=parsed.stream, model=parsed.model,
                captured=captured, original=call.original, normalized=chat, upstream=raw,
                response_message=sampled, started_at=call.started, finished_at=time.time(),
                latency_ms=latency_ms, upstream_url=base, policy_version=call.policy_version,
                normalizations=normalizations, requested_max_tokens=requested_max_tokens,
                completion_id=completion_id, token_in=plan.describe(self.token_in.path) if plan else None,
                original_json=call.original_json)
            commands = self.stores.records.append_completion_commands(sid, record)
            if plan is not None:
                commands += self.token_in.turn_commands(
                    plan, sid, completion_id=completion_id, seq=call.seq, chat=chat, sampled=sampled,
                    prompt_ids=id_list(captured.prompt_ids), response_ids=captured.response_ids,
                    finish_reason=captured.finish_reason, stop_reason=captured.stop_reason)
            response = call.provider.render(turn, parsed)
            encoded = encode(turn, response)
        except ProxyError as err:
            self.fail(call.lease, call.seq, call.provider.name, err, call.original, call.started)
            raise
        except (OSError, redis.RedisError, RedisReplyError):
            self.abandon(call.lease)  # Redis failed: the caller's 503; its lease lapses if this release cannot go out
            raise
        except Exception as exc:  # a bug: kept as an error record; the caller answers it as a 502 and logs it
            self.fail(call.lease, call.seq, call.provider.name,
                      UpstreamError(f"internal proxy error: {type(exc).__name__}"), call.original, call.started)
            raise
        except BaseException:
            self.abandon(call.lease)
            raise
        try:
            self._send_release(call.lease, commands).replies()
        except REDIS_AWAY as away:  # the turn is sampled: wait for Redis to keep it; nothing unrecorded is answered
            self._release_when_back(call.lease, commands, away)
        self.metrics.written("completion")
        self.metrics.recorded(call.provider.name, len(captured.prompt_ids), len(captured.response_ids),
                              latency_ms / 1000.0, time.perf_counter() - call.received - latency_ms / 1000.0)
        call.provider.completed(parsed, response, sampled, call.scope)
        return turn, response, encoded

    def _engine_request(self, parsed: Parsed) -> tuple[dict[str, Any], list[str]]:
        """The Chat Completions request the engine is sent (before its dialect's capture fields),
        and the noise rules that changed it. A new dict: the parsed request stays as translated."""
        chat, normalizations = noise.scrub(parsed.chat, self.noise)
        chat = dict(chat)
        if self.settings.upstream_model:
            chat["model"] = self.settings.upstream_model
        return chat, normalizations


_APPEND_ONCE = "if not redis.call('LPOS', KEYS[1], ARGV[1]) then redis.call('RPUSH', KEYS[1], ARGV[1]) end return 1"


def _append_once(command: tuple[Any, ...]) -> tuple[Any, ...]:
    """An RPUSH of one record as a push unless that very record is there (EVAL, not a cached
    script: a Redis that restarted has none)."""
    if command[0] != "RPUSH" or len(command) != 3:
        return command
    return ("EVAL", _APPEND_ONCE, 1, command[1], command[2])
