"""The gateway's engine round trip with the output limit fitted into the engine's context: a
call sent once, and one the engine refuses for length counted (``/tokenize``) and sent once
more with the room its prompt leaves, or refused in the caller's format (a token-in call's
spliced ids alike, their count exact; a Responses call asking for truncation loses its oldest
messages instead); and the token counts clients ask for. The rules (reading refusals, the clamp, contexts per endpoint) are pure, in
``context_limits``; this is their I/O side, a mixin of ``gateway.Gateway`` kept apart so the
call's admission/release path and its context fitting are each read in one file."""

from __future__ import annotations

from typing import Any

from pipeline.settings import Settings
from proxy import context_limits, noise, upstream
from proxy.context_limits import ContextLengths, EngineRefusal
from proxy.errors import ContextOverflow, UpstreamRejected
from proxy.token_in import Plan, TokenInCalls
from proxy.upstream.base import tokenize_body
from proxy.upstream.token_prompts import TokenCall

CHAT_PATH = "/v1/chat/completions"


class ContextFitting:
    """``Gateway``'s sampling and counting methods; the attributes are ``Gateway``'s own."""

    settings: Settings
    engine: upstream.Engine
    pool: upstream.UpstreamPool
    contexts: ContextLengths
    context_reserve: int
    noise: list[noise.Rule]
    token_in: TokenInCalls

    def _sample(self, chat: dict[str, Any], top_logprobs: int,
                sid: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """The engine's answer, the endpoint that gave it and the request it answered. A call that
        fits is one round trip; one the engine refuses for length is counted and sent once more
        with the room its prompt leaves (or refused in the caller's format)."""
        endpoint = self.pool.order(sid)[0]
        known = self.contexts.known(endpoint, _model(chat))
        if known is not None and context_limits.no_prompt_fits(chat.get("max_tokens"), known, self.context_reserve):
            try:  # certain to be refused: count first, saving the refused round trip
                chat, _ = self._fit(chat, sid, known, None, None)
            except UpstreamRejected:
                pass  # this engine cannot count a prompt: let it refuse the call itself
        try:
            return (*self._post(chat, top_logprobs, sid), chat)
        except UpstreamRejected as rejected:
            learnt = self._learnt_context(rejected, chat, endpoint)
            if learnt is None:
                raise
            refusal, context = learnt
            fitted, prompt_tokens = self._fit(chat, sid, context, refusal, rejected)
        try:
            return (*self._post(fitted, top_logprobs, sid), fitted)
        except UpstreamRejected as rejected:
            again = context_limits.read_refusal(rejected.message)
            if again is None:
                raise
            # The engine counts this prompt longer than its /tokenize did: never loop, refuse.
            raise context_limits.overflow(max(prompt_tokens, again.prompt_tokens or 0), context,
                                          self.context_reserve, fitted.get("max_tokens")) from None

    def _sample_truncating(self, chat: dict[str, Any], top_logprobs: int,
                           sid: str) -> tuple[dict[str, Any], str, dict[str, Any], int]:
        """``_sample`` for a request that asked for truncation (Responses' "auto"): a prompt that
        leaves no room loses its oldest messages -- the fewest that make it fit, found by
        counting (``/tokenize``, a few times: a binary search over the cuts) -- and is sent so.
        Also returns how many messages were dropped."""
        try:
            return (*self._sample(chat, top_logprobs, sid), 0)
        except ContextOverflow as overflow:
            cuts = context_limits.truncation_cuts(chat.get("messages") or [])
            if overflow.prompt_fits or not cuts:
                raise
            target = context_limits.truncation_target(overflow, chat.get("max_tokens"))
            fits: tuple[dict[str, Any], int] | None = None
            low, high = 0, len(cuts) - 1
            while low <= high:
                mid = (low + high) // 2
                candidate = context_limits.cut_input(chat, cuts[mid])
                if self._counts_at_most(candidate[0], target, sid):
                    fits, high = candidate, mid - 1
                else:
                    low = mid + 1
            if fits is None:
                raise
        return (*self._sample(fits[0], top_logprobs, sid), fits[1])

    def _counts_at_most(self, chat: dict[str, Any], target: int, sid: str) -> bool:
        try:
            return self.count_tokens(chat, affinity=sid) <= target
        except UpstreamRejected as err:
            if context_limits.read_refusal(err.message) is None:
                raise
            return False  # too long for the engine to even count

    def _sample_spliced(self, plan: Plan, engine_call: TokenCall, chat: dict[str, Any], top_logprobs: int,
                        sid: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """A spliced call's answer, the endpoint that gave it and the request it answered: as
        ``_sample``, a call the engine refuses for length (its context not known yet, so not fitted
        before sending) is sent once more with the room its prompt leaves (the spliced ids: an exact
        count), or refused in the caller's format."""
        assert plan.spliced is not None
        try:
            return (*self.token_in.sample(plan, engine_call, chat, top_logprobs, sid), chat)
        except UpstreamRejected as rejected:
            learnt = self._learnt_context(rejected, chat, self.pool.order(sid)[0])
            if learnt is None:
                raise
            context = learnt[1]
            prompt_tokens, sent = len(plan.spliced.prompt_ids), chat.get("max_tokens")
            limit = context_limits.fit_output(sent, prompt_tokens, context, reserve=self.context_reserve,
                                              mode=self.settings.context_overflow)
            if limit == sent:  # it fits by the ids' count yet the engine refused it: it would again
                raise context_limits.overflow(prompt_tokens, context, self.context_reserve, sent) from None
            fitted = {**chat, "max_tokens": limit}
            again = self.token_in.request(plan, fitted, top_logprobs, context)
            if again is None:  # (the path took it a moment ago: only the output limit changed)
                raise
        try:
            return (*self.token_in.sample(plan, again, fitted, top_logprobs, sid), fitted)
        except UpstreamRejected as rejected:
            if context_limits.read_refusal(rejected.message) is None:
                raise
            raise context_limits.overflow(prompt_tokens, context, self.context_reserve, limit) from None

    def _learnt_context(self, rejected: UpstreamRejected, chat: dict[str, Any],
                        endpoint: str) -> tuple[EngineRefusal, int] | None:
        """What an engine's refusal says of its context, and the context length known from it
        (stated, or from the endpoint's model cards); None when it refused for another reason."""
        refusal = context_limits.read_refusal(rejected.message)
        if refusal is None:
            return None
        context = self.contexts.learn(rejected.upstream_url or endpoint, _model(chat), refusal.context_length)
        return (refusal, context) if context is not None else None

    def _context(self, chat: dict[str, Any], sid: str) -> int | None:
        return self.contexts.known(self.pool.order(sid)[0], _model(chat))

    def _fit_spliced(self, chat: dict[str, Any], prompt_tokens: int, sid: str) -> dict[str, Any]:
        """A spliced call's output limit fitted into the engine's context, when known (its prompt's
        length is known exactly: no count to ask for)."""
        context = self._context(chat, sid)
        if context is None:
            return chat
        limit = context_limits.fit_output(chat.get("max_tokens"), prompt_tokens, context,
                                          reserve=self.context_reserve, mode=self.settings.context_overflow)
        return {**chat, "max_tokens": limit} if limit != chat.get("max_tokens") else chat

    def _post(self, chat: dict[str, Any], top_logprobs: int, sid: str) -> tuple[dict[str, Any], str]:
        return self.pool.post_json(CHAT_PATH, self.engine.prepare(chat, top_logprobs=top_logprobs), affinity=sid,
                                   ids_text=getattr(self.engine, "ids_text_key", None))

    def _fit(self, chat: dict[str, Any], sid: str, context: int, refusal: EngineRefusal | None,
             rejected: UpstreamRejected | None) -> tuple[dict[str, Any], int]:
        """``chat`` with its output limit fitted into ``context`` tokens, and its prompt's size."""
        if refusal is not None and refusal.prompt_exact and refusal.prompt_tokens is not None:
            prompt_tokens = refusal.prompt_tokens
        else:
            prompt_tokens = self._count_prompt(chat, sid, context, refusal, rejected)
        sent = chat.get("max_tokens")
        limit = context_limits.fit_output(sent, prompt_tokens, context, reserve=self.context_reserve,
                                          mode=self.settings.context_overflow)
        if refusal is not None and limit == sent:
            # It fits by our count yet the engine refused it: sending it again would be refused again.
            raise context_limits.overflow(prompt_tokens, context, self.context_reserve, sent)
        return {**chat, "max_tokens": limit}, prompt_tokens

    def _count_prompt(self, chat: dict[str, Any], sid: str, context: int, refusal: EngineRefusal | None,
                      rejected: UpstreamRejected | None) -> int:
        try:
            return self.count_tokens(chat, affinity=sid)
        except UpstreamRejected as err:
            counted = context_limits.read_refusal(err.message)
            if counted is None:  # no /tokenize here: the engine's own refusal is the answer
                raise (rejected or err) from None
            # A prompt too long for the engine to even count: certainly one that leaves no room.
            least = max((refusal.prompt_tokens or 0) if refusal else 0, counted.prompt_tokens or 0,
                        context_limits.max_prompt_tokens(context, self.context_reserve) + 1)
            raise context_limits.overflow(least, context, self.context_reserve) from None

    def count_request_tokens(self, chat: dict[str, Any], *, affinity: str = "") -> int:
        """A client's count request (Anthropic's count_tokens, Gemini's countTokens, Responses'
        input_tokens): the prompt as its model call would sample it -- scrubbed of the same noise
        (e.g. Claude Code's billing header line), so the count matches the call's usage."""
        scrubbed, _ = noise.scrub(chat, self.noise)
        return self.count_tokens(scrubbed, affinity=affinity)

    def count_tokens(self, chat: dict[str, Any], *, affinity: str = "") -> int:
        """The engine's count of ``chat``'s prompt, rendered as its chat completion would be."""
        body = tokenize_body(self.engine, chat, self.settings.upstream_model or chat.get("model"),
                             generation_prompt=chat.get("add_generation_prompt", True))
        data, _ = self.pool.post_json("/tokenize", body, affinity=affinity)
        return int(data.get("count", len(data.get("tokens") or [])))


def _model(chat: dict[str, Any]) -> str | None:
    """The model a request names, when a string (it is passed on unchecked: any JSON)."""
    return chat["model"] if isinstance(chat.get("model"), str) else None
