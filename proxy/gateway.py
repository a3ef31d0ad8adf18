"""One model call, end to end: admission (session gate + pause gate, one Redis round trip) ->
engine dialect -> endpoint pool -> capture -> the caller's response -> release (one round
trip, with the record). The only module besides ``app`` that does I/O; Redis is reached
through the ``pipeline`` stores' commands."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pipeline.settings import Settings
from pipeline.stores import Stores
from proxy import noise, upstream
from proxy.capture import build_error_record, build_record
from proxy.control import Control
from proxy.errors import ProxyError, UpstreamError
from proxy.hot_redis import HotRedis, NoScript
from proxy.providers import Parsed, Provider, ProviderScope, Turn, turn_from_chat
from proxy.providers.base import assistant_message
from proxy.sessions import SessionGate
from proxy.upstream import UpstreamTransport


@dataclass
class Call:
    session_id: str
    seq: int
    policy_version: str | None
    provider: Provider
    parsed: Parsed
    original: dict[str, Any]
    started: float
    scope: ProviderScope


class Gateway:
    def __init__(self, settings: Settings, stores: Stores, transport: UpstreamTransport | None = None) -> None:
        self.settings = settings
        self.stores = stores
        self.gate = SessionGate(stores.sessions)
        self.engine = upstream.create(settings.upstream_engine)
        self.pool = upstream.UpstreamPool(settings.upstream_url, settings.upstream_timeout_seconds, transport)
        self.control = Control(stores.proxy_control, settings.policy_version)
        self.hot = HotRedis(settings.require_redis())  # the two round trips of every call
        self.noise = noise.rules_from(settings.noise_rules, settings.noise_patterns)

    def scope(self, session_id: str, query: Any = None) -> ProviderScope:
        return ProviderScope(session_id, self.stores.responses, query if query is not None else {})

    # --- admission and release -----------------------------------------------------------------

    def admit(self, session_id: str | None) -> tuple[int, str | None]:
        """Admit a model call: the session must be live, and while weight sync pauses
        inference the call waits here. Returns (sequence number, policy version)."""
        for attempt in (1, 2):
            try:
                begin, *enter = self.hot.pipeline([*self.gate.begin_commands(session_id), *Control.ENTER])
                break
            except NoScript:
                # Redis restarted (or dropped its scripts) since this process loaded ours; the
                # round trip's INCR still ran, so undo it before trying again.
                self.control.exit()
                self.gate.reload()
                if attempt == 2:
                    raise
        try:
            seq = self.gate.admitted(session_id or "", begin)
        except ProxyError:
            self.control.exit()
            raise
        try:
            return seq, self.control.entered(enter, self.settings.upstream_timeout_seconds)
        except ProxyError as err:
            self._release(session_id or "", [], entered=False)
            raise err

    def _release(self, sid: str, record_commands: list[tuple[Any, ...]], entered: bool = True) -> None:
        self.hot.pipeline([*record_commands, *self.gate.end_commands(sid), *(Control.EXIT if entered else ())])

    def fail(self, sid: str, provider: str, err: ProxyError, original: Any, started: float) -> None:
        """Release the call and keep the failure for diagnosis (never as a completion)."""
        self._release(sid, self.stores.records.append_error_commands(sid, build_error_record(
            session_id=sid, provider=provider, status=err.status, error_type=type(err).__name__,
            message=err.message, original=original if isinstance(original, dict) else {},
            started_at=started, finished_at=time.time())))

    def abandon(self, sid: str) -> None:
        self._release(sid, [])

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
            self.fail(sid, call.provider.name, err, call.original, call.started)
            raise
        except BaseException:
            self.abandon(sid)
            raise
        self._release(sid, self.stores.records.append_completion_commands(sid, record))
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
