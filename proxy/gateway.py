"""One model call, end to end: admission (session gate + pause gate, one Redis round trip) ->
engine dialect -> endpoint pool -> capture -> the caller's response -> release (one round
trip, with the record). The only module besides ``app`` that does I/O; Redis is reached
through the ``pipeline`` stores' commands."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from pipeline.settings import Settings
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from proxy import noise, upstream
from proxy.capture import build_error_record, build_record
from proxy.control import Control
from proxy.errors import ProxyError, UpstreamError
from proxy.hot_redis import HotRedis, NoScript
from proxy.inflight import InflightCalls, Lease
from proxy.providers import Parsed, Provider, ProviderScope, Turn, turn_from_chat
from proxy.providers.base import assistant_message
from proxy.sessions import SessionGate, session_for
from proxy.upstream import UpstreamTransport


@dataclass
class Call:
    lease: Lease  # the call's in-flight lease (its id, its session)
    seq: int
    policy_version: str | None
    provider: Provider
    parsed: Parsed
    original: dict[str, Any]
    started: float
    scope: ProviderScope

    @property
    def session_id(self) -> str:
        return self.lease.session_id


class Gateway:
    def __init__(self, settings: Settings, stores: Stores, transport: UpstreamTransport | None = None) -> None:
        self.settings = settings
        self.stores = stores
        self.gate = SessionGate(stores.sessions)
        self.engine = upstream.create(settings.upstream_engine)
        self.pool = upstream.UpstreamPool(settings.upstream_url, settings.upstream_timeout_seconds, transport)
        self.control = Control(stores.proxy_control, settings.policy_version)
        self.hot = HotRedis(settings.require_redis())  # the two round trips of every call
        self.inflight = InflightCalls(stores, self.hot, settings.call_lease_seconds)
        self.noise = noise.rules_from(settings.noise_rules, settings.noise_patterns)

    def redis_ok(self) -> bool:
        try:
            return bool(connect(self.settings, mode="quick").ping())
        except redis.RedisError:
            return False

    def scope(self, session_id: str, query: Any = None) -> ProviderScope:
        return ProviderScope(session_id, self.stores.responses, query if query is not None else {})

    # --- admission and release -----------------------------------------------------------------

    def admit(self, key: str | None) -> tuple[Lease, int, str | None]:
        """Admit a model call by its session key: the session must be live, and while weight sync
        pauses inference the call waits here. Returns (its lease, sequence number, policy
        version)."""
        sid = session_for(key)
        for attempt in (1, 2):
            lease, expiry = self.inflight.new(sid)
            try:
                begin, *enter = self.hot.pipeline([
                    self.gate.begin_command(sid, key or "", lease.call_id, expiry),
                    *self.stores.proxy_control.enter_commands(lease.call_id, expiry)])
                break
            except NoScript:
                # Redis restarted (or dropped its scripts) since this process loaded ours; the
                # round trip's other commands still ran, so undo them before trying again.
                self._release(lease, [], entered=True)
                self.gate.reload()
                if attempt == 2:
                    raise
            except BaseException:
                self.inflight.done(lease)
                raise
        try:
            seq = self.gate.admitted(sid, begin)
        except ProxyError:
            self._release(lease, [], entered=True)
            raise
        try:
            return lease, seq, self.control.entered(enter, lease.call_id, self.inflight.expiry,
                                                    self.settings.upstream_timeout_seconds)
        except ProxyError as err:
            self._release(lease, [], entered=False)
            raise err

    def _release(self, lease: Lease, record_commands: list[tuple[Any, ...]], entered: bool = True) -> None:
        self.inflight.done(lease)
        control = self.stores.proxy_control.exit_commands(lease.call_id) if entered else []
        self.hot.pipeline([*record_commands, *self.stores.sessions.end_call_commands(lease.session_id, lease.call_id),
                           *control])

    def fail(self, lease: Lease, provider: str, err: ProxyError, original: Any, started: float) -> None:
        """Release the call and keep the failure for diagnosis (never as a completion)."""
        sid = lease.session_id
        self._release(lease, self.stores.records.append_error_commands(sid, build_error_record(
            session_id=sid, provider=provider, status=err.status, error_type=type(err).__name__,
            message=err.message, original=original if isinstance(original, dict) else {},
            started_at=started, finished_at=time.time())))

    def abandon(self, lease: Lease) -> None:
        self._release(lease, [])

    # --- the call ------------------------------------------------------------------------------

    def complete(self, call: Call) -> tuple[Turn, dict[str, Any]]:
        """Run an admitted call and release it on every path (also when a stream's client has
        gone), so POSTRUN's in-flight wait and the pause drain are exact."""
        sid, parsed = call.session_id, call.parsed
        try:
            chat, normalizations = noise.scrub(parsed.chat, self.noise)
            chat = dict(chat)
            if self.settings.upstream_model:
                chat["model"] = self.settings.upstream_model
            t0 = time.perf_counter()
            raw, base = self.pool.post_json(
                "/v1/chat/completions",
                self.engine.prepare(chat, top_logprobs=parsed.top_logprobs),
                affinity=sid)
            latency_ms = (time.perf_counter() - t0) * 1000.0
            try:
                captured = self.engine.extract(raw)
            except upstream.CaptureError as exc:
                raise UpstreamError(str(exc)) from None
            turn = turn_from_chat(raw, parsed.model)
            response = call.provider.render(turn, parsed)
            sampled = assistant_message(turn)
            record = build_record(
                session_id=sid, seq=call.seq, provider=call.provider.name, stream=parsed.stream, model=parsed.model,
                captured=captured, original=call.original, normalized=chat, upstream=raw,
                response_message=sampled, started_at=call.started, finished_at=time.time(),
                latency_ms=latency_ms, upstream_url=base, policy_version=call.policy_version,
                normalizations=normalizations)
        except ProxyError as err:
            self.fail(call.lease, call.provider.name, err, call.original, call.started)
            raise
        except BaseException:
            self.abandon(call.lease)
            raise
        self._release(call.lease, self.stores.records.append_completion_commands(sid, record))
        call.provider.completed(parsed, response, sampled, call.scope)
        return turn, response

    def count_tokens(self, chat: dict[str, Any]) -> int:
        body = {"model": self.settings.upstream_model or chat.get("model"), "messages": chat["messages"],
                "add_generation_prompt": True}
        if chat.get("tools"):
            body["tools"] = chat["tools"]
        if chat.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = chat["chat_template_kwargs"]
        data, _ = self.pool.post_json("/tokenize", body)
        return int(data.get("count", len(data.get("tokens") or [])))
