"""Fitting a call into the engine's context, the way the vendors' APIs treat their own limits
(pure: the one lookup that needs the network is handed in).

Agent CLIs ask for far more output than a small engine context holds (Claude Code 32000 tokens,
pi 16384), and an engine refuses prompt + max_tokens > its context with a 400. So a call's output
limit is fitted: ``clamp`` (the default) lowers it to the room the prompt leaves, ``refuse``
answers the API's own context-overflow error instead; a prompt that leaves no room at all always
gets that error, which is what makes a harness compact its history.

The cheap path: a call is sent as it is (a call that fits costs nothing extra). When the engine
refuses it for length, ``read_refusal`` reads the refusal; the prompt's size is its exact count
when the wording states one (older vLLM, SGLang, the reference server) and the engine's
``/tokenize`` of the same request otherwise (newer vLLM only reports a lower bound), and the call
is sent once more with the room left. Once a context length is known, a limit that no prompt
could fit is fitted before sending, saving the refused round trip.

The context length is the setting ``upstream_context_length`` when given, else the endpoint's
``/v1/models`` card (``max_model_len``: vLLM and SGLang both list it), asked once per endpoint,
else what the refusal stated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from proxy.errors import ContextOverflow, ProxyError

CLAMP, REFUSE = "clamp", "refuse"

# The engine's context length, in every refusal wording met so far (case-insensitive).
_CONTEXT_LENGTH = [
    re.compile(r"maximum context length (?:is|of) (\d+)", re.I),  # vLLM (all versions), SGLang, OpenAI
    re.compile(r"context length is only (\d+) tokens", re.I),  # vLLM's renderer (2026)
    re.compile(r"longer than the model's context length \((\d+) tokens\)", re.I),  # SGLang, prompt alone
    re.compile(r"longer than the maximum model length of (\d+)", re.I),  # vLLM's engine-level check
    # SGLang's chat route, before it reads the prompt, for an output limit over the whole context
    # ("max_completion_tokens is too large: 32000.This model supports at most 4096 completion
    # tokens."): the number is its context length. OpenAI's like-worded refusal ("... 16384
    # completion tokens, whereas you provided ...") names a model's output cap instead, and has a
    # space after the period: not matched.
    re.compile(r"is too large: \d+\.This model supports at most (\d+) completion tokens", re.I),
]
# vLLM's renderer when max_tokens alone exceeds the context ("max_tokens=32000 cannot be greater
# than max_model_len=max_total_tokens=4096").
_OUTPUT_OVER_CONTEXT = re.compile(r"cannot be greater than (?:\w+=)*(\d+)", re.I)
# Prompt sizes a refusal states exactly.
_EXACT_PROMPT = [
    re.compile(r"\((\d+) in the messages, \d+ in the completion\)", re.I),  # vLLM <= 0.10, OpenAI
    re.compile(r"your request has (\d+) input tokens", re.I),  # vLLM 0.11
    re.compile(r"your prompt contains (\d+) input tokens", re.I),  # vLLM 0.25 when it tokenised it all
    re.compile(r"(\d+) tokens from the input messages", re.I),  # SGLang
    re.compile(r"the input \((\d+) tokens\) is longer", re.I),  # SGLang, prompt alone
    re.compile(r"the decoder prompt \(length (\d+)\) is longer", re.I),  # vLLM's engine-level check
    re.compile(r"your messages resulted in (\d+) tokens", re.I),  # OpenAI (another gateway in front)
]
# Lower bounds: newer vLLM stops tokenising one token past what could fit.
_LEAST_PROMPT = [
    re.compile(r"at least (\d+) input tokens", re.I),
    re.compile(r"you passed (\d+) input tokens", re.I),
]


@dataclass(frozen=True)
class EngineRefusal:
    """What an engine's context-length refusal says."""

    context_length: int | None
    prompt_tokens: int | None  # exact when ``prompt_exact``, else at least this many
    prompt_exact: bool


def read_refusal(message: str) -> EngineRefusal | None:
    """The refusal in an engine's error message, or None when the error is about something else."""
    context = _first(_CONTEXT_LENGTH, message)
    if context is None and re.search(r"max_total_tokens|max_model_len", message):
        context = _first([_OUTPUT_OVER_CONTEXT], message)
    if context is None:
        return None
    exact = _first(_EXACT_PROMPT, message)
    if exact is not None:
        return EngineRefusal(context, exact, True)
    return EngineRefusal(context, _first(_LEAST_PROMPT, message), False)


def _first(patterns: list[re.Pattern[str]], text: str) -> int | None:
    for pattern in patterns:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return None


def max_prompt_tokens(context_length: int, reserve: int = 0) -> int:
    """The longest prompt that still leaves room for one output token."""
    return context_length - reserve - 1


def no_prompt_fits(max_tokens: int | None, context_length: int, reserve: int = 0) -> bool:
    """Whether an output limit overflows the context whatever the prompt (every prompt has a token)."""
    return max_tokens is not None and max_tokens > context_length - reserve - 1


def overflow(prompt_tokens: int, context_length: int, reserve: int = 0,
             output_tokens: int | None = None) -> ContextOverflow:
    """The overflow error: about the prompt alone when it leaves no room, else about prompt + output."""
    longest = max_prompt_tokens(context_length, reserve)
    return ContextOverflow(prompt_tokens=prompt_tokens, context_length=context_length, max_prompt_tokens=longest,
                           output_tokens=None if prompt_tokens > longest else output_tokens)


def fit_output(requested: int | None, prompt_tokens: int, context_length: int, *, reserve: int = 0,
               mode: str = CLAMP) -> int:
    """The output limit to send with a prompt of ``prompt_tokens``: ``requested`` when it fits, the
    room left when it does not (``clamp``) or when none was asked for. Raises ``ContextOverflow``
    when the prompt leaves no room, or (``refuse``) when the requested output does not fit.
    ``reserve``: context tokens the engine never gives to output (``Engine.context_reserve``)."""
    room = context_length - reserve - prompt_tokens
    if room < 1:
        raise overflow(prompt_tokens, context_length, reserve)
    if requested is None:
        return room
    if requested <= room:
        return requested
    if mode == REFUSE:
        raise overflow(prompt_tokens, context_length, reserve, requested)
    return room


def truncation_cuts(messages: list[Any]) -> list[int]:
    """Where Responses' ``truncation: "auto"`` may cut an input that overflows, fewest dropped
    first: before a user or assistant message after the first message that is not the system
    prompt (kept), so a tool result is never kept without its call; the last message is always
    kept (OpenAI: "dropping items from the beginning of the conversation")."""
    return [i for i in range(_first_not_system(messages) + 1, len(messages))
            if isinstance(messages[i], dict) and messages[i].get("role") in ("user", "assistant")]


def cut_input(chat: dict[str, Any], cut: int) -> tuple[dict[str, Any], int]:
    """``chat`` without its messages from the first non-system one up to ``cut``; and how many
    were dropped."""
    messages = chat["messages"]
    first = _first_not_system(messages)
    return {**chat, "messages": messages[:first] + messages[cut:]}, cut - first


def _first_not_system(messages: list[Any]) -> int:
    """The index of the first message after the system prompt (truncation keeps what is before)."""
    return next((i for i, m in enumerate(messages) if not (isinstance(m, dict) and m.get("role") == "system")),
                len(messages))


def truncation_target(overflow: ContextOverflow, max_tokens: int | None) -> int:
    """The longest prompt a truncated input may render to: room left for the requested output,
    or for half the context when more (or nothing) was asked for."""
    half = overflow.context_length // 2
    return overflow.max_prompt_tokens - min(max_tokens or half, half)


class ContextLengths:
    """The engine's context length per (endpoint, served model): the configured value when set,
    else learnt from the endpoint's model cards (``cards(endpoint)``, asked at most once per
    endpoint, and only after a refusal), else what a refusal stated."""

    def __init__(self, configured: int | None, cards: Callable[[str], list[dict[str, Any]]]) -> None:
        self.configured = configured
        self._cards = cards
        self._learnt: dict[tuple[str, str | None], int] = {}
        self._asked: set[str] = set()

    def known(self, endpoint: str, model: str | None) -> int | None:
        """What is known without asking anyone."""
        return self.configured or self._learnt.get((endpoint, model))

    def learn(self, endpoint: str, model: str | None, stated: int | None) -> int | None:
        if self.configured:
            return self.configured
        key = (endpoint, model)
        if key not in self._learnt and endpoint not in self._asked:
            self._asked.add(endpoint)  # an engine without cards is not asked again
            try:
                cards = self._cards(endpoint)
            except ProxyError:
                cards = []
            lengths = {str(c.get("id")): c["max_model_len"] for c in cards
                       if isinstance(c, dict) and isinstance(c.get("max_model_len"), int) and c["max_model_len"] > 0}
            for name, length in lengths.items():
                self._learnt[(endpoint, name)] = length
            if key not in self._learnt and len(set(lengths.values())) == 1:
                self._learnt[key] = next(iter(lengths.values()))  # one engine behind several names
        if key not in self._learnt and stated:
            self._learnt[key] = stated
        return self._learnt.get(key)
