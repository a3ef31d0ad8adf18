"""``prefix_merging``: completions of one conversation become one trace (the paper's §3.4.2).

Completions, in time order, form chains: a completion joins a chain whose last prompt (its
*tip*) is a strict token prefix of its own prompt (``_best_chain`` ranks them); with none it
starts a new chain, so sub-agents, compaction, parallel branches and rewritten prompts become
separate chains. The tips live in a radix tree (``tip_index``), so finding them costs one pass
over the prompt however many conversations are open.

Per chain the trace is ``P1`` as prompt and ``R'1 ‖ T1 ‖ R'2 ‖ … ‖ R'k`` as response: ``R'i``
are the ids the policy *sampled* (mask 1, their logprobs), ``Ti`` the canonical interstitial
taken from the next prompt after the end-of-turn token (mask 0, a synthetic logprob). A turn cut
by ``length`` has no end-of-turn token, so its ``Ti`` starts with the one the template
inserted, closing the turn.

Context drift: the trainer scores turn k after ``P1 ‖ R'1 ‖ T1 ‖ …`` but the policy sampled it
after ``Pk``. They differ exactly when the next prompt re-renders an earlier sampled turn
differently (re-tokenisation at a boundary, reasoning stripped from history). Each turn records
whether its training context equals the prompt it was sampled from; ``strict=True`` starts a
new chain instead of merging a turn whose context would drift.

A rewritten turn is no drift: when the next request shows the sampled turn as another message
(opencode sends a call to an unknown tool back as a call to ``invalid``), the harness edited the
history and the policy went on from a turn it never sampled. Such a completion starts a new
chain (the paper's "prompt rewriting"), whatever ``strict`` says: merged, every later turn of
the chain was trained after a context it was not sampled in.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from pipeline.builders.base import BuildContext, BuildError, sampling_of
from pipeline.builders.tip_index import Node, TipIndex
from pipeline.canonical_messages import same_assistant_turn as _same_turn
from pipeline.collector import collector_paused
from pipeline.schemas import CompletionRecord, TokenLogprob, Trace, Trajectory

EOS_FINISHES = ("stop", "tool_calls")
# A prompt's generation prompt may end with ids the next prompt's rendering of that turn does not
# repeat (Qwen3 with thinking off: an empty think block): that many at most, after its last turn.
GENERATION_TAIL_MAX = 32
EOT_LOOKBACK = 8  # calls before each searched for the turn it continues, when no turn ended on its own
# A trace's logprobs validated in one pydantic-core call: ~0.8 us a token, where
# ``TokenLogprob.model_construct`` per token takes ~2 us (its field loop runs in Python).
_LOGPROBS = TypeAdapter(list[TokenLogprob])


@dataclass(eq=False)
class _Chain:
    order: int  # creation order: the last tie-break between chains
    records: list[CompletionRecord]
    response: list[int]
    mask: list[float]
    logprobs: list[float]
    tokens: list[str | None]
    turns: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    exact: bool = True  # every earlier sampled turn re-rendered to exactly its ids so far
    node: Node["_Chain"] | None = None  # where its tip is in the index

    @classmethod
    def start(cls, order: int, c: CompletionRecord) -> "_Chain":
        chain = cls(order, [c], [], [], [], [], [], [])
        chain.add_turn(c, interstitial=[], matches=True, synthetic=0.0)
        return chain

    def add_turn(self, c: CompletionRecord, interstitial: list[int], matches: bool, synthetic: float) -> None:
        self.exact = self.exact and matches
        self.response += interstitial
        self.mask += [0.0] * len(interstitial)
        self.logprobs += [synthetic] * len(interstitial)
        self.tokens += [None] * len(interstitial)
        self.turns.append({"completion_id": c.completion_id, "response_start": len(self.response),
                           "response_len": len(c.response_ids), "interstitial_len": len(interstitial),
                           "finish_reason": c.finish_reason, "context_matches": self.exact,
                           "sampling": sampling_of(c.normalized_request),
                           "proxy_policy_version": c.policy_version})  # as the proxy stamped it (None: none set)
        self.response += c.response_ids
        self.mask += [1.0] * len(c.response_ids)
        self.logprobs += c.response_logprobs
        self.tokens += c.response_tokens or [None] * len(c.response_ids)


@dataclass
class _Stats:
    completions_total: int = 0
    chains_total: int = 0
    completions_merged: int = 0
    truncated_turns: int = 0  # merged turns that were cut by max tokens
    drifted_turns: int = 0  # merged turns whose training context differs from their prompt
    strict_splits: int = 0  # chains started instead of merging a drifting turn
    rewrite_splits: int = 0  # chains started where the harness sent a sampled turn back rewritten
    no_eot_breaks: int = 0  # a matching tip whose next prompt has no end-of-turn token
    generation_tail_merges: int = 0  # turns merged past a generation prompt the next prompt drops
    extra: dict[str, Any] = field(default_factory=dict)


class PrefixMergingBuilder:
    name = "prefix_merging"

    def __init__(self, end_of_turn_token_id: int | None = None, tokenizer: str | None = None,
                 strict: bool = False, synthetic_logprob: float = 0.0) -> None:
        if end_of_turn_token_id is not None and not isinstance(end_of_turn_token_id, int):
            raise TypeError("end_of_turn_token_id must be an integer token id")
        self.eot = end_of_turn_token_id if end_of_turn_token_id is not None else _eot_from(tokenizer)
        self.strict = bool(strict)
        self.synthetic = float(synthetic_logprob)

    def build(self, completions: list[CompletionRecord], ctx: BuildContext) -> Trajectory:
        ordered = sorted(completions, key=lambda c: (c.started_at, c.seq))
        eot = self.eot if self.eot is not None else detect_eot(ordered)
        stats = _Stats(completions_total=len(ordered))
        with collector_paused():
            chains = self._chains(ordered, eot, stats)
            traces = [self._trace(i, ch, ctx) for i, ch in enumerate(chains)]
        stats.chains_total = len(chains)
        stats.completions_merged = stats.completions_total - stats.chains_total
        metadata = {"builder": self.name, "end_of_turn_token_id": eot, "strict": self.strict,
                    "reconstruction": {k: v for k, v in vars(stats).items() if k != "extra"}}
        return Trajectory.model_construct(traces=traces, metadata=metadata)  # traces aligned by construction

    def _chains(self, ordered: list[CompletionRecord], eot: int | None, stats: _Stats) -> list[_Chain]:
        if eot is None:  # nothing can be merged
            return [_Chain.start(i, c) for i, c in enumerate(ordered)]
        chains: list[_Chain] = []
        tips: TipIndex[_Chain] = TipIndex()
        for c in ordered:
            probe = tips.probe(c.prompt_ids)
            chain, shared = _best_chain(probe.items, c), None
            if chain is None and _continues(c):  # no tip is a prefix: one whose generation prompt alone differs?
                chain, shared = _tail_chain(tips, probe, c, eot)
            old_tip = chain.node if chain is not None else None
            if chain is None or not self._extend(chain, c, eot, stats, shared):
                chain, old_tip = _Chain.start(len(chains), c), None
                chains.append(chain)
            chain.node = tips.insert(probe, chain)
            if old_tip is not None:  # the chain moved on: its old tip is no prefix to offer
                tips.remove(old_tip, chain)
        return chains

    def _extend(self, chain: _Chain, c: CompletionRecord, eot: int, stats: _Stats, shared: int | None = None) -> bool:
        """``shared``: the next prompt repeats only this many of the last prompt's ids (its
        generation prompt's end differs): the turn as the next prompt shows it is then compared
        with that end and the sampled ids together -- a drift, counted as one."""
        last = chain.records[-1]
        tail = c.prompt_ids[len(last.prompt_ids) if shared is None else shared:]
        try:
            end = tail.index(eot)
        except ValueError:
            stats.no_eot_breaks += 1
            return False
        closed = bool(last.response_ids) and last.response_ids[-1] == eot
        # What the next prompt shows for the sampled turn, and what comes after it.
        rerendered = tail[: end + 1] if closed else tail[:end]
        interstitial = tail[end + 1:] if closed else tail[end:]
        sampled = last.response_ids if shared is None else last.prompt_ids[shared:] + last.response_ids
        matches = rerendered == sampled
        if not matches and shared is None and _rewritten(last, c):
            stats.rewrite_splits += 1
            return False
        if not matches and self.strict:
            stats.strict_splits += 1
            return False
        stats.generation_tail_merges += shared is not None
        chain.add_turn(c, interstitial, matches, self.synthetic)
        stats.truncated_turns += 0 if closed else 1
        stats.drifted_turns += 0 if chain.exact else 1
        chain.records.append(c)
        return True

    def _trace(self, index: int, chain: _Chain, ctx: BuildContext) -> Trace:
        first, last = chain.records[0], chain.records[-1]
        first_messages = list(first.normalized_request.get("messages") or [])
        return Trace.model_construct(  # lengths and ids are aligned by construction (tests check)
            prompt_ids=list(first.prompt_ids),
            response_ids=chain.response,
            loss_mask=chain.mask,
            response_logprobs=_LOGPROBS.validate_python([{"token_id": t, "logprob": lp, "token": s} for t, lp, s
                                                         in zip(chain.response, chain.logprobs, chain.tokens)]),
            prompt_messages=first_messages,
            response_messages=_response_messages(chain.records),
            tools=first.normalized_request.get("tools") or None,
            finish_reason=last.finish_reason,
            reward=None,
            metadata=ctx.trace_metadata(
                self.name, chain_index=index, completion_ids=[r.completion_id for r in chain.records],
                turns=chain.turns, context_exact=chain.exact,
                policy_version=ctx.policy_version(last.policy_version),
                # every merged turn's: a chain sampled across a weight swap is as stale as its oldest
                policy_versions=list(dict.fromkeys(ctx.policy_version(r.policy_version) for r in chain.records))),
        )


def _best_chain(candidates: list[_Chain], c: CompletionRecord) -> _Chain | None:
    """The chain ``c`` continues, among ``candidates`` (the chains whose tip is a strict token
    prefix of ``c``'s prompt; branches sampled from one prompt share a tip): prefer the chain
    whose last sampled turn reappears token for token in ``c``'s prompt, then the one whose last
    turn ``c``'s messages echo (the message-level key: it survives a re-rendering that drifts),
    then the longest tip, then the most recent."""
    best, best_rank = None, None
    messages = c.normalized_request.get("messages") or []
    for chain in candidates:
        prev = chain.records[-1]
        last, start = prev.response_ids, len(prev.prompt_ids)
        tokens_echoed = c.prompt_ids[start:start + len(last)] == last
        message_echoed = _same_turn(_echo(prev, messages), prev.response_message)
        rank = (tokens_echoed, message_echoed, start, chain.order)
        if best_rank is None or rank > best_rank:
            best, best_rank = chain, rank
    return best


def _continues(c: CompletionRecord) -> bool:
    """Whether ``c``'s request holds an assistant turn it may continue (a conversation's first
    call holds none: no chain is looked for past the prefix search)."""
    return any(isinstance(m, dict) and m.get("role") == "assistant" for m in c.normalized_request.get("messages") or [])


def _tail_chain(tips: TipIndex[_Chain], probe: Any, c: CompletionRecord, eot: int) -> tuple[_Chain | None, int | None]:
    """The chain ``c`` continues though its tip is no prefix of ``c``'s prompt: the prompts part
    after the tip's last closed turn, within GENERATION_TAIL_MAX ids of its end (a template
    whose generation prompt the history's rendering drops, as Qwen3's empty think block with
    thinking off), and ``c``'s messages echo the chain's last sampled turn. Without this, every
    call of such a conversation started a chain of its own, with no drift reported, and a
    trainer taking one trace a session kept one call. Returns (chain, ids shared)."""
    shared, candidates = tips.near(probe, GENERATION_TAIL_MAX)
    if eot not in c.prompt_ids[shared:]:  # the turn is not closed after where they part
        return None, None
    messages = c.normalized_request.get("messages") or []
    best = None
    for chain in candidates:
        prev = chain.records[-1]
        if eot in prev.prompt_ids[shared:] or not _same_turn(_echo(prev, messages), prev.response_message):
            continue
        if best is None or (len(prev.prompt_ids), chain.order) > (len(best.records[-1].prompt_ids), best.order):
            best = chain
    return (best, shared) if best is not None else (None, None)


def _echo(prev: CompletionRecord, messages: list[Any]) -> Any:
    """The message of a later request (``messages``) in the place of ``prev``'s sampled turn: the
    one after ``prev``'s own messages (None when there is none)."""
    at = len(prev.normalized_request.get("messages") or [])
    return messages[at] if len(messages) > at else None


def _rewritten(prev: CompletionRecord, c: CompletionRecord) -> bool:
    """Whether ``c``'s request shows ``prev``'s sampled turn as another assistant message (a
    harness's edit). Without messages to compare (a raw token request), no: a drift, as before."""
    echoed = _echo(prev, c.normalized_request.get("messages") or [])
    sampled = prev.response_message
    if not isinstance(echoed, dict) or not isinstance(sampled, dict) or \
            echoed.get("role") != "assistant" or sampled.get("role") != "assistant":
        return False
    return not _same_turn(echoed, sampled)


def _response_messages(records: list[CompletionRecord]) -> list[dict[str, Any]]:
    """Messages after the first prompt, with each assistant turn as *sampled* (the ids hold the
    sampled turn, not the harness's echo of it)."""
    out: list[dict[str, Any]] = []
    for prev, nxt in zip(records, records[1:]):
        out.append(prev.response_message)
        before = prev.normalized_request.get("messages") or []
        after = nxt.normalized_request.get("messages") or []
        echoed = after[: len(before)] == before and len(after) > len(before)
        out += after[len(before) + 1:] if echoed else after[len(before):]
    out.append(records[-1].response_message)
    return out


def detect_eot(records: list[CompletionRecord]) -> int | None:
    """The end-of-turn id: the last sampled token of turns that ended naturally (not on a
    stop string), by majority. A session whose every turn was cut (by max_tokens) has none:
    then the token a later prompt puts right after such a turn, re-rendered as sampled, is the
    one the template closes it with (looked for among a few calls before each; without it
    nothing merged and a trainer taking one trace kept one call)."""
    ends = Counter(c.response_ids[-1] for c in records
                   if c.response_ids and c.finish_reason in EOS_FINISHES and not isinstance(c.stop_reason, str))
    if not ends:
        for i, later in enumerate(records):
            for cut in records[max(0, i - EOT_LOOKBACK):i]:
                at, n = len(cut.prompt_ids), len(cut.response_ids)
                if n and len(later.prompt_ids) > at + n and later.prompt_ids[:at] == cut.prompt_ids \
                        and later.prompt_ids[at:at + n] == cut.response_ids:
                    ends[later.prompt_ids[at + n]] += 1
    return ends.most_common(1)[0][0] if ends else None


def _eot_from(tokenizer: str | None) -> int | None:
    if tokenizer is None:
        return None
    if tokenizer.startswith(("/", ".")) and not os.path.isdir(tokenizer):
        # A path that is not there (a hub id may still be in the local cache: loaded below).
        raise BuildError(f"cannot load tokenizer {tokenizer!r}: no such directory")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    except Exception as exc:  # an unusable path is a config error of the task
        raise BuildError(f"cannot load tokenizer {tokenizer!r}: {exc}") from exc
    if tok.eos_token_id is None:
        raise BuildError(f"tokenizer {tokenizer!r} has no eos token; set end_of_turn_token_id")
    return int(tok.eos_token_id)
