"""Token-in prompt splicing (issue 14), the pure part: which recorded turn a request continues,
and the prompt ids that continue it exactly.

A harness sends its whole history back each call; the engine re-renders it, and the rendering
need not be the ids the policy was conditioned on and sampled (tool-call arguments re-serialised,
reasoning dropped from history by the template, BPE merges across a turn boundary). A spliced
prompt instead is, for a request whose history up to its last assistant turn is a recorded turn:

    that turn's prompt ids + its sampled ids (+ the end-of-turn token, if the turn was cut
    before it) + the ids of the messages after it

where the last part comes from the policy's own template and tokenizer (the engine's
``/tokenize``, once): the request rendered with its generation prompt, cut right after the
end-of-turn token that closes that assistant turn. The cut is found by counting end-of-turn
tokens -- the recorded ids hold as many closed turns as the rendering of the same history,
whatever it renders inside them -- so templates that are not append-only (a reasoning block
dropped once a newer user turn follows, arguments re-serialised) cut in the same place; a
rendering whose shape disagrees -- or that closes more turns after the cut than it has new
messages -- is not spliced.

Turns are recorded per session as ``Entry``s (``stores/turns``-style hash: field ``key|completion``,
kept by the proxy in its release round trip): the ids a successor starts from, as a delta on the
turn they themselves were spliced from, so a conversation costs its length once, not once per
call. Messages are compared as parsed messages (``pipeline/canonical_messages.py``, shared with
the prefix-merging builder); the reasoning of an assistant turn must equal the sampled one when
the harness sends it back, and may be missing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable

import msgpack
import numpy as np

from pipeline.canonical_messages import canonical, reasoning_of


class SpliceMode(str, Enum):
    """``agent.token_in``: ``off`` (render every call), ``auto`` (splice what continues a recorded
    turn, render the rest and record why), ``strict`` (refuse a call that continues an earlier
    turn but matches none)."""

    OFF = "off"
    AUTO = "auto"
    STRICT = "strict"


# Why a call was not spliced (recorded with it).
FIRST_CALL = "no assistant turn in the history (a conversation's first call)"
ENDS_WITH_ASSISTANT = "the history ends with an assistant turn (a prefill): nothing new to render"
NO_MATCH = "no recorded turn matches the history up to its last assistant turn (edited or compacted)"
REASONING_DIFFERS = "the history's reasoning differs from every recorded turn's that matches it otherwise"
NO_END_OF_TURN = "the recorded turn was cut before its end-of-turn token and none is known"
BOUNDARY = "the template's rendering of the new messages could not be cut after the recorded turn"


# --- keys ---------------------------------------------------------------------------------------

def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     default=str).encode()).hexdigest()[:32]


def history_key(messages: list[dict[str, Any]], chat: dict[str, Any]) -> str:
    """The key of a conversation up to and including its last message: the messages compared as
    above (the last assistant turn's reasoning aside: checked apart), with what else the
    template renders -- the tools and the template's options."""
    *before, last = messages
    body = [canonical(m, with_reasoning=True) for m in before] + [canonical(last)]
    return _digest({"messages": body, "tools": chat.get("tools") or None,
                    "template": chat.get("chat_template_kwargs") or None})


def last_assistant(messages: list[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    return None


# --- the recorded turns -----------------------------------------------------------------------

@dataclass
class Entry:
    """A recorded turn a later call may continue: the ids it ends with, as ``ids`` after those of
    ``parent`` (the turn its prompt was spliced from; None: its prompt was rendered whole)."""

    completion_id: str
    seq: int
    parent: str | None
    ids: list[int]
    length: int  # of the whole: the parent's, then ``ids``
    reasoning: str  # the sampled reasoning (digest), "" when none
    ended: bool  # the sampled ids end with the end-of-turn token
    eot: int | None  # the end-of-turn token this turn ended with (None: cut before it)

    def encode(self) -> bytes:
        return msgpack.packb({"c": self.completion_id, "s": self.seq, "p": self.parent, "n": self.length,
                              "r": self.reasoning, "e": self.ended, "t": self.eot,
                              "i": np.asarray(self.ids, dtype="<u4").tobytes()}, use_bin_type=True)

    @classmethod
    def decode(cls, raw: bytes) -> "Entry":
        d = msgpack.unpackb(raw, raw=False)
        return cls(d["c"], d["s"], d["p"], np.frombuffer(d["i"], dtype="<u4").tolist(), d["n"], d["r"],
                   d["e"], d["t"])


def field_name(key: str, completion_id: str) -> str:
    return f"{key}|{completion_id}"


def entry_for(*, completion_id: str, seq: int, request_messages: list[dict[str, Any]], chat: dict[str, Any],
              sampled: dict[str, Any], prompt_ids: list[int], response_ids: list[int], finish_reason: str | None,
              parent: tuple[str, int] | None, eot_hint: int | None, stop_reason: Any = None) -> tuple[str, Entry]:
    """The field and entry to record for a completion: its request's messages plus what it
    sampled is the history a successor sends back. ``parent``: (field, length) of the turn the
    prompt was spliced from. ``eot_hint``: the end-of-turn token, when known. A turn cut by one
    of the call's stop strings (``stop_reason`` a string) did not end on the end-of-turn token:
    its last token is not taken for it (it would be every later turn's, by majority)."""
    ended = finish_reason in ("stop", "tool_calls") and bool(response_ids) and not isinstance(stop_reason, str) \
        and (eot_hint is None or response_ids[-1] == eot_hint)
    eot = response_ids[-1] if ended else eot_hint
    ids = list(response_ids)
    if parent is not None:
        parent_field, parent_length = parent
        ids = list(prompt_ids[parent_length:]) + ids
    else:
        parent_field = None
        ids = list(prompt_ids) + ids
    key = history_key([*request_messages, sampled], chat)
    entry = Entry(completion_id, seq, parent_field, ids, len(prompt_ids) + len(response_ids),
                  _digest(reasoning_of(sampled)) if reasoning_of(sampled) else "", ended, eot)
    return field_name(key, completion_id), entry


def whole_ids(entries: dict[str, Entry], name: str) -> list[int] | None:
    """The ids a turn ends with, following its parents (None: a parent has gone)."""
    parts, seen = [], set()
    current: str | None = name
    while current is not None:
        entry = entries.get(current)
        if entry is None or current in seen:
            return None
        seen.add(current)
        parts.append(entry.ids)
        current = entry.parent
    out: list[int] = []
    for part in reversed(parts):
        out += part
    return out


@dataclass
class Match:
    field: str
    entry: Entry
    index: int  # the history's last assistant turn
    after: int | None = None  # how many messages follow it (the new ones)


@dataclass
class NoSplice:
    reason: str


def find(entries: dict[str, Entry], chat: dict[str, Any]) -> Match | NoSplice:
    """The recorded turn ``chat`` continues: its history up to its last assistant turn is that
    turn's request plus what it sampled. Among several (the same answer sampled twice), the one
    whose reasoning the history repeats, else the latest."""
    messages = chat.get("messages") or []
    j = last_assistant(messages)
    if j is None:
        return NoSplice(FIRST_CALL)
    if j == len(messages) - 1:
        return NoSplice(ENDS_WITH_ASSISTANT)
    key = history_key(messages[:j + 1], chat)
    found = [(name, e) for name, e in entries.items() if name.split("|", 1)[0] == key]
    if not found:
        return NoSplice(NO_MATCH)
    echoed = reasoning_of(messages[j])
    if echoed:
        digest = _digest(echoed)
        found = [(name, e) for name, e in found if e.reasoning == digest]
        if not found:
            return NoSplice(REASONING_DIFFERS)
    name, entry = max(found, key=lambda item: item[1].seq)
    return Match(name, entry, j, len(messages) - j - 1)


# --- the new messages' ids ----------------------------------------------------------------------

def tail_after_turn(base: list[int], with_new: list[int], eot: int, new_messages: int | None = None) -> list[int] | None:
    """What the template renders after the recorded turn: ``with_new`` (the request with its
    generation prompt) from just after the end-of-turn token that closes that turn -- the n-th
    end-of-turn token, n being how many ``base`` (the turn's whole ids, closed) holds, since the
    rendering closes the same turns, whatever it renders inside them. None when the shapes
    disagree: too few end-of-turn tokens, more after the cut than the ``new_messages`` can close
    (each closes one turn at most: an extra one means the rendering holds a turn end the
    recorded ids do not -- text that spells the end-of-turn token, which the re-rendering parses
    as the token; a prefill's answer sent back as a turn of its own -- and the cut would fall
    inside the recorded turn, splicing its rest a second time), or another token after this one
    than after the conversation's first (a template's separator, e.g. ChatML's newline)."""
    closed = [i for i, t in enumerate(base) if t == eot]
    ends = [i for i, t in enumerate(with_new) if t == eot]
    if not closed or len(ends) <= len(closed):  # the new messages close at least one turn
        return None
    if new_messages is not None and len(ends) - len(closed) > new_messages:
        return None
    cut = ends[len(closed) - 1] + 1
    first_after = base[closed[0] + 1] if closed[0] + 1 < len(base) else None
    if first_after is not None and with_new[cut] != first_after:
        return None
    return with_new[cut:]


@dataclass
class Spliced:
    prompt_ids: list[int]
    source: str  # the completion it continues
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, what) of prompt_ids
    parent: tuple[str, int] | None = None  # (field, length): what this call's entry is a delta on


def splice(entries: dict[str, Entry], match: Match, with_new: list[int], eot_hint: int | None) -> Spliced | NoSplice:
    """The prompt continuing ``match``: its whole ids, the end-of-turn token if it was cut
    before it, then the engine's rendering (``with_new``) of what came after it."""
    base = whole_ids(entries, match.field)
    if base is None:
        return NoSplice(NO_MATCH)
    eot = match.entry.eot if match.entry.eot is not None else eot_hint
    if eot is None:
        return NoSplice(NO_END_OF_TURN)
    closing = [] if match.entry.ended else [eot]
    tail = tail_after_turn(base + closing, with_new, eot, match.after)
    if tail is None:
        return NoSplice(BOUNDARY)
    recorded = len(base)
    prompt = base + closing + tail
    spans = [(0, recorded, "recorded"), *([(recorded, recorded + 1, "end_of_turn")] if closing else []),
             (recorded + len(closing), len(prompt), "rendered")]
    return Spliced(prompt, match.entry.completion_id, spans, (match.field, recorded))


def decode_entries(raw: dict[Any, Any] | Iterable[tuple[Any, Any]]) -> dict[str, Entry]:
    items = raw.items() if isinstance(raw, dict) else raw
    out = {}
    for k, v in items:
        name = k.decode() if isinstance(k, bytes) else str(k)
        try:
            out[name] = Entry.decode(v)
        except Exception:  # an unreadable entry is a turn that cannot be continued, not a failure
            continue
    return out
