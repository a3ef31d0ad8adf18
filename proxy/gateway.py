"""One model call, end to end: admission (session gate + pause gate, one Redis round trip) ->
engine dialect -> endpoint pool -> capture -> the caller's response -> release (one round
trip, with the record). The only module besides ``app`` that does I/O."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from pipeline import keys
from pipeline.settings import Settings
from proxy import noise, upstream
from proxy.capture import build_error_record, build_record
from proxy.control import Control
from proxy.errors import BadRequest, ProxyError, UpstreamError
from proxy.hot_redis import HotRedis, NoScript
from proxy.providers import Parsed, Provider, Turn, turn_from_chat
from proxy.providers.base import assistant_message
from proxy.providers.openai_responses import stored_conversation
from proxy.response_store import ResponseStore
from proxy.sessions import SessionGate


@dataclass
class Call:
    session_id: str
    seq: int
    policy_version: str | None
    provider: Provider
    parsed: Parsed
    original: dict[str, Any]
    started: float


class Gateway:
    def __init__(self, settings: Settings, r: redis.Redis) -> None:
        self.settings = settings
        self._r = r
        self.gate = SessionGate(r, settings.result_ttl_seconds)
        self.engine = upstream.create(settings.upstream_engine)
        self.pool = upstream.UpstreamPool(settings.upstream_url, settings.upstream_timeout_seconds)
        self.control = Control(r, settings.policy_version)
        self.responses = ResponseStore(r, settings.result_ttl_seconds)
        self.hot = HotRedis(settings.require_redis())  # the two round trips of every call
        self.noise = noise.rules_from(settings.noise_rules, settings.noise_patterns)

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
            self._release(session_id or "", None, None, entered=False)
            raise err

    def _release(self, sid: str, key: str | None, record: bytes | None, entered: bool = True) -> None:
        self.hot.pipeline([*self.gate.end_commands(sid, key, record), *(Control.EXIT if entered else ())])

    def fail(self, sid: str, provider: str, err: ProxyError, original: Any, started: float) -> None:
        """Release the call and keep the failure for diagnosis (never as a completion)."""
        self._release(sid, keys.session_errors(sid), build_error_record(
            session_id=sid, provider=provider, status=err.status, error_type=type(err).__name__,
            message=err.message, original=original if isinstance(original, dict) else {},
            started_at=started, finished_at=time.time()))

    def abandon(self, sid: str) -> None:
        self._release(sid, None, None)

    # --- the call ------------------------------------------------------------------------------

    def history(self, session_id: str, body: Any) -> list[dict[str, Any]] | None:
        """The stored conversation a Responses request continues (``previous_response_id``)."""
        prev = body.get("previous_response_id") if isinstance(body, dict) else None
        if prev is None:
            return None
        stored = self.responses.load(session_id, str(prev))
        if stored is None:
            err = BadRequest(f"Previous response with id '{prev}' not found.", param="previous_response_id")
            err.code = "previous_response_not_found"
            raise err
        return stored["conversation"]

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
                self.engine.prepare(chat, top_logprobs=int(parsed.extra.get("top_logprobs", 0))),
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
                session_id=sid, seq=call.seq, provider=call.provider.name, stream=parsed.stream,
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
        self._release(sid, keys.session_completions(sid), record)
        if call.provider.name == "openai_responses" and parsed.extra.get("store"):
            self.responses.save(sid, response, stored_conversation(parsed, sampled))
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
