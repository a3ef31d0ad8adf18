"""Token-in calls (``agent.token_in``, issue 14): the I/O around ``splice`` for the gateway.

For a call of a token-in session: read the session's recorded turns (one Redis round trip), find
the one the call continues, render what came after it with the engine's own template and
tokenizer (its ``/tokenize`` of the whole request), splice, and sample after the spliced ids on the engine path ``POLAR_UPSTREAM_TOKEN_IN`` names
(``upstream/token_prompts.py``). Every completion of such a session is then recorded as a turn
(in the release round trip the record takes anyway), spliced or not, so the next call can
continue it. What could not be spliced is rendered as any call is, with the reason on its record
-- unless the session is ``strict``, which refuses it instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pipeline.schemas import TokenIn
from pipeline.stores.records import RecordStore
from proxy import splice
from proxy.errors import BadRequest, UpstreamError
from proxy.upstream import CaptureError, Engine, UpstreamPool
from proxy.upstream.base import tokenize_body
from proxy.upstream.token_prompts import (
    TokenCall,
    TokenInError,
    TokenInPath,
    check_path,
    token_in_answer,
    token_in_request,
)

DEFAULT_PATH = {"vllm": TokenInPath.CHAT_TOKENS, "sglang": TokenInPath.SGLANG_GENERATE}


class TokenInRefused(BadRequest):
    """``token_in: strict`` and this call continues an earlier turn it cannot be spliced onto."""


@dataclass
class Plan:
    mode: TokenIn
    entries: dict[str, splice.Entry]
    spliced: splice.Spliced | None
    reason: str | None  # why not spliced

    def describe(self, path: TokenInPath) -> dict[str, Any]:
        """The record's ``token_in``."""
        if self.spliced is None:
            return {"mode": self.mode.value, "spliced": False, "reason": self.reason}
        return {"mode": self.mode.value, "spliced": True, "source": self.spliced.source, "path": path.value,
                "spans": [list(s) for s in self.spliced.spans]}


class TokenInCalls:
    def __init__(self, engine: Engine, pool: UpstreamPool, hot: Any, records: RecordStore, path: str | None,
                 model: str | None) -> None:
        self.engine, self.pool, self.hot, self.records = engine, pool, hot, records
        self.path = check_path(path, engine.name) if path else DEFAULT_PATH[engine.name]
        self.model = model

    def plan(self, chat: dict[str, Any], sid: str, mode: TokenIn) -> Plan:
        [raw] = self.hot.pipeline([self.records.turns_command(sid)])
        entries = splice.decode_entries(_pairs(raw))
        found = splice.find(entries, chat)
        if isinstance(found, splice.NoSplice):
            return self._refuse_or_render(mode, entries, found.reason)
        messages = chat.get("messages") or []
        try:
            with_new = self._render(chat, messages, sid, generation_prompt=chat.get("add_generation_prompt", True))
        except (UpstreamError, ValueError) as exc:
            return self._refuse_or_render(mode, entries, f"the engine could not render the request: {exc}")
        out = splice.splice(entries, found, with_new, end_of_turn(entries))
        if isinstance(out, splice.NoSplice):
            return self._refuse_or_render(mode, entries, out.reason)
        return Plan(mode, entries, out, None)

    def _refuse_or_render(self, mode: TokenIn, entries: dict[str, splice.Entry], reason: str) -> Plan:
        if mode == TokenIn.STRICT and reason != splice.FIRST_CALL:
            raise TokenInRefused(f"agent.token_in is strict and this call cannot continue a recorded turn: {reason}")
        return Plan(mode, entries, None, reason)

    def _render(self, chat: dict[str, Any], messages: list[dict[str, Any]], sid: str, *,
                generation_prompt: bool) -> list[int]:
        """The engine's own rendering of ``messages`` (its template and tokenizer: ``/tokenize``)."""
        body = tokenize_body(self.engine, {**chat, "messages": messages}, self.model or chat.get("model"),
                             generation_prompt=generation_prompt)
        data, _ = self.pool.post_json("/tokenize", body, affinity=sid)
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise UpstreamError("the engine's /tokenize gave no token ids")
        return tokens

    def request(self, plan: Plan, chat: dict[str, Any], top_logprobs: int,
                context_length: int | None) -> TokenCall | None:
        """The engine call sampling ``chat`` after the spliced ids; None when this path cannot
        send such a request (``n`` > 1, guided decoding on a raw-text path): the plan then
        falls back to rendering, with the reason (or, strict, refuses)."""
        assert plan.spliced is not None
        try:
            return token_in_request(self.path, chat, plan.spliced.prompt_ids, engine=self.engine,
                                    top_logprobs=top_logprobs, context_length=context_length)
        except TokenInError as exc:
            fallback = self._refuse_or_render(plan.mode, plan.entries, f"the {self.path.value} path cannot send it: {exc}")
            plan.spliced, plan.reason = fallback.spliced, fallback.reason
            return None

    def sample(self, plan: Plan, call: TokenCall, chat: dict[str, Any], top_logprobs: int,
               sid: str) -> tuple[dict[str, Any], str]:
        """The engine's answer (in its chat shape) to ``call``."""
        assert plan.spliced is not None
        raw, base = self.pool.post_json(call.path, call.body, affinity=sid)
        try:
            return token_in_answer(self.path, chat, plan.spliced.prompt_ids, raw, top_logprobs=top_logprobs), base
        except CaptureError as exc:
            raise UpstreamError(str(exc)) from None

    def turn_commands(self, plan: Plan, sid: str, *, completion_id: str, seq: int, chat: dict[str, Any],
                      sampled: dict[str, Any], prompt_ids: list[int], response_ids: list[int],
                      finish_reason: str | None, stop_reason: Any = None) -> list[tuple[Any, ...]]:
        """This completion as a turn a later call may continue."""
        name, entry = splice.entry_for(
            completion_id=completion_id, seq=seq, request_messages=chat.get("messages") or [], chat=chat,
            sampled=sampled, prompt_ids=prompt_ids, response_ids=response_ids, finish_reason=finish_reason,
            stop_reason=stop_reason,
            parent=plan.spliced.parent if plan.spliced is not None else None, eot_hint=end_of_turn(plan.entries))
        return self.records.turn_commands(sid, name, entry.encode())


def end_of_turn(entries: dict[str, splice.Entry]) -> int | None:
    """The end-of-turn token the session's turns ended with (the most common): what closes a
    turn that was cut before it."""
    seen = Counter(e.eot for e in entries.values() if e.ended and e.eot is not None)
    return seen.most_common(1)[0][0] if seen else None


def _pairs(raw: Any) -> list[tuple[Any, Any]]:
    """HGETALL's reply, a map or (raw protocol) a flat list."""
    if isinstance(raw, dict):
        return list(raw.items())
    return list(zip(raw[::2], raw[1::2])) if isinstance(raw, list) else []
