"""The upstream-engine seam: how one inference server's dialect asks for and returns token ids.

An engine is pure: ``prepare`` adds its capture fields to a Chat Completions request, and
``extract`` pulls prompt ids, sampled ids and logprobs out of its answer, refusing answers
that lack them (a completion without ids must never become training data). ``score_request``
and ``scores`` are its prompt-logprob API, which the verifier (``proxy/verify.py``) uses to
re-score sequences. An engine may also say how many tokens of its context an output limit can
never use (``context_reserve``, default 0; see ``proxy/context_limits.py``). Adding an engine is
one module plus one line in ``upstream/__init__.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pipeline.errors import CaptureError
from proxy.upstream.ids_text import IdsText


@dataclass(frozen=True)
class Captured:
    prompt_ids: list[int] | IdsText  # IdsText: the engine's text of them, checked (``ids_text``)
    response_ids: list[int]
    response_logprobs: list[float]
    response_tokens: list[str] | None
    finish_reason: str | None
    stop_reason: Any


@runtime_checkable
class Engine(Protocol):
    name: str

    # A top-level key of the engine's answer holding the prompt's ids that the pool may leave as
    # their JSON text (``ids_text``; ``extract`` then gets an ``IdsText`` there), or None.
    ids_text_key: str | None

    def prepare(self, request: dict[str, Any], *, top_logprobs: int = 0) -> dict[str, Any]: ...

    def extract(self, response: dict[str, Any]) -> Captured: ...

    score_path: str  # where the prompt-logprob API lives

    def score_request(self, ids: list[int], model: str) -> dict[str, Any]:
        """A request scoring every token of ``ids`` given the ones before it."""

    def scores(self, response: dict[str, Any], ids: list[int]) -> list[float | None]:
        """logprob of ids[i] given ids[:i] (None for i = 0 and for ids the answer lacks)."""


def tokenize_body(engine: Engine, chat: dict[str, Any], model: str | None, *,
                  generation_prompt: bool = True) -> dict[str, Any]:
    """A ``/tokenize`` request rendering ``chat``'s messages as its chat completion would be:
    the same template inputs (tools, template kwargs, a continued final message) and the same
    reasoning effort. SGLang's ``/tokenize`` takes ``reasoning_effort`` itself
    (``tokenize_reads_effort``); vLLM's has no such field, while its chat route hands the effort
    to the template as the kwarg ``reasoning_effort`` and, unless given, ``enable_thinking``
    (effort != "none"): so it goes there. Without it, Qwen3's "none" renders no empty think block
    and a spliced prompt is not the one the chat route would sample after."""
    body: dict[str, Any] = {"model": model, "messages": engine.prepare(chat)["messages"],
                            "add_generation_prompt": generation_prompt}
    for key in ("tools", "chat_template_kwargs", "continue_final_message"):
        if chat.get(key):
            body[key] = chat[key]
    effort = chat.get("reasoning_effort")
    if isinstance(effort, str):
        if getattr(engine, "tokenize_reads_effort", False):
            body["reasoning_effort"] = effort
        else:
            kwargs = dict(body.get("chat_template_kwargs") or {})
            kwargs["reasoning_effort"] = effort
            kwargs.setdefault("enable_thinking", effort != "none")
            body["chat_template_kwargs"] = kwargs
    return body


def token_ids(values: list[Any]) -> list[int]:
    """``values`` as token ids: the engine's list itself when every item is an int (checked in C,
    32k ids in a few hundred microseconds: a sum of ints is an int, a string or null makes it
    raise, a float makes it a float), else each converted (ids written as ``1.0`` or ``"1"``)."""
    try:
        if type(sum(values)) is int:
            return values
    except TypeError:
        pass
    return [int(t) for t in values]


def id_list(ids: list[int] | IdsText) -> list[int]:
    """Captured ids as a list, whichever way they were kept."""
    return ids.ids() if isinstance(ids, IdsText) else ids


def first_choice(response: dict[str, Any]) -> dict[str, Any]:
    try:
        choice = response["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise CaptureError("upstream response has no choices") from None
    if not isinstance(choice, dict):
        raise CaptureError("upstream choice is not an object")
    return choice
