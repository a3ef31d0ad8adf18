"""prefix_merging on generated sessions: every trainable token is a sampled token with its
logprob, every interstitial token is masked, chains are the true conversations, and drift is
reported exactly where the training context differs from the sampled one."""

from __future__ import annotations

import itertools
import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import builders
from pipeline.builders import BuildContext
from pipeline.builders.prefix_merging import GENERATION_TAIL_MAX, _same_turn
from pipeline.schemas import CompletionRecord, Trace

IM_START, EOT, NL, SYS, USER, ASSIST, TOOL = 1, 2, 3, 4, 5, 6, 7
GEN = [IM_START, ASSIST, NL]
# POLAR_HYPOTHESIS_SCALE=10 runs ten times the examples (a deeper local run; CI keeps the default).
SCALE = max(1, int(os.environ.get("POLAR_HYPOTHESIS_SCALE", "1")))


def turn_ids(role: int, content: list[int]) -> list[int]:
    return [IM_START, role, NL, *content, EOT, NL]


class Conversation:
    """A ChatML-like conversation over integer tokens, rendered the way a chat template does."""

    _ids = itertools.count()

    def __init__(self, rng: random.Random, system: list[int] | None = None, history: list[list[int]] | None = None,
                 messages: list[dict] | None = None):
        self.rng = rng
        self.history = history if history is not None else [turn_ids(SYS, system or [100]), turn_ids(USER, self._text())]
        self.messages = messages if messages is not None else [{"role": "user", "content": str(self.history)}]
        self.cid = next(self._ids)

    def _text(self, n: int | None = None) -> list[int]:
        return [self.rng.randrange(200, 999) for _ in range(n or self.rng.randint(1, 6))]

    def prompt(self) -> list[int]:
        return [t for seg in self.history for t in seg] + GEN

    def sample(self, truncated: bool, drift: bool, seq: int, clock: float) -> CompletionRecord:
        prompt = self.prompt()
        body = self._text()
        sampled = body if truncated else body + [EOT]
        # The next prompt re-renders the turn: faithfully, or (drift) with its first token lost,
        # as a template that strips reasoning from history would.
        shown = body[1:] if drift and len(body) > 1 else body
        self.history.append([IM_START, ASSIST, NL, *shown, EOT, NL])
        self.history.append(turn_ids(TOOL, self._text()))
        messages = list(self.messages)
        answer = {"role": "assistant", "content": f"turn {seq}"}
        self.messages += [dict(answer), {"role": "tool", "content": str(self.history[-1])}]
        return CompletionRecord(
            completion_id=f"c{seq}", session_id="s", seq=seq, provider="openai_chat", started_at=clock,
            finished_at=clock, upstream_latency_ms=1.0, prompt_ids=prompt, response_ids=sampled,
            response_logprobs=[-self.rng.random() for _ in sampled], response_tokens=[str(t) for t in sampled],
            finish_reason="length" if truncated else "tool_calls",
            response_message=answer, normalized_request={"messages": messages})


@st.composite
def sessions(draw):
    """Interleaved conversations: main agents, sub-agents (own system prompt), branches sampled
    from the same prompt as another conversation, compactions (a rewritten history)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    convs: list[tuple[Conversation, list[tuple[bool, bool]]]] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["main", "subagent", "branch", "compaction"]))
        if kind == "branch" and convs:
            src = convs[draw(st.integers(0, len(convs) - 1))][0]
            conv = Conversation(rng, history=[list(s) for s in src.history], messages=list(src.messages))
        elif kind == "compaction":
            conv = Conversation(rng, system=[100], history=[turn_ids(SYS, [100]), turn_ids(USER, [150, 151])])
        else:
            conv = Conversation(rng, system=[100 + len(convs)])
        turns = draw(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=5))
        convs.append((conv, [(trunc and rng.random() < 0.3, drift and rng.random() < 0.2) for trunc, drift in turns]))
    order = [i for i, (_, turns) in enumerate(convs) for _ in turns]
    rng.shuffle(order)
    cursor = [0] * len(convs)
    records, seq = [], 0
    for i in order:
        conv, turns = convs[i]
        trunc, drift = turns[cursor[i]]
        cursor[i] += 1
        records.append((conv.cid, conv.sample(trunc, drift, seq, float(seq))))
        seq += 1
    return records, len(convs)


def build(records, **config):
    return builders.create("prefix_merging", config).build(records, BuildContext("s", "t", "shell", {}))


def check_invariants(traj, records):
    by_id = {r.completion_id: r for r in records}
    seen = []
    for trace in traj.traces:
        Trace.model_validate(trace.model_dump())  # lengths and id alignment hold
        covered = [False] * len(trace.response_ids)
        for turn in trace.metadata["turns"]:
            rec = by_id[turn["completion_id"]]
            a, n = turn["response_start"], turn["response_len"]
            assert trace.response_ids[a:a + n] == rec.response_ids  # trainable = sampled
            assert [lp.logprob for lp in trace.response_logprobs[a:a + n]] == rec.response_logprobs
            assert trace.loss_mask[a:a + n] == [1.0] * n
            context = trace.prompt_ids + trace.response_ids[:a]
            assert (context == rec.prompt_ids) == turn["context_matches"]  # drift flagged exactly
            covered[a:a + n] = [True] * n
            seen.append(rec.completion_id)
        assert all(m == 0.0 for m, c in zip(trace.loss_mask, covered) if not c)  # interstitials masked
        assert all(lp.logprob == 0.0 for lp, c in zip(trace.response_logprobs, covered) if not c)
    assert sorted(seen) == sorted(by_id)  # every completion in exactly one trace


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_invariants_and_chains(session):
    tagged, conversations = session
    records = [r for _, r in tagged]
    traj = build(records, end_of_turn_token_id=EOT)
    check_invariants(traj, records)
    assert len(traj.traces) == conversations
    for trace in traj.traces:  # a chain never mixes conversations
        cids = {cid for cid, r in tagged if r.completion_id in trace.metadata["completion_ids"]}
        assert len(cids) == 1


@settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_strict_mode_never_trains_in_a_drifted_context(session):
    tagged, conversations = session
    records = [r for _, r in tagged]
    traj = build(records, end_of_turn_token_id=EOT, strict=True)
    check_invariants(traj, records)
    assert all(t["context_matches"] for tr in traj.traces for t in tr.metadata["turns"])
    stats = traj.metadata["reconstruction"]
    assert len(traj.traces) == conversations + stats["strict_splits"]


def test_end_of_turn_token_is_detected_and_truncation_closes_the_turn():
    rng = random.Random(1)
    conv = Conversation(rng)
    recs = [conv.sample(truncated=t, drift=False, seq=i, clock=float(i)) for i, t in enumerate([False, True, False])]
    traj = build(recs)  # no end_of_turn_token_id: detected from naturally ended turns
    assert traj.metadata["end_of_turn_token_id"] == EOT
    [trace] = traj.traces
    second = trace.metadata["turns"][2]
    closing = trace.response_ids[second["response_start"] - second["interstitial_len"]]
    assert closing == EOT and trace.loss_mask[second["response_start"] - second["interstitial_len"]] == 0.0
    assert traj.metadata["reconstruction"]["truncated_turns"] == 1
    assert trace.prompt_ids + trace.response_ids[:second["response_start"]] == recs[2].prompt_ids


def test_unmergeable_sessions_fall_back_to_one_trace_per_completion():
    rng = random.Random(2)
    # Every turn truncated, each a conversation of its own: no end-of-turn token can be learnt
    # from the data (none ended on it, no later prompt shows one closed).
    recs = [Conversation(rng).sample(truncated=True, drift=False, seq=i, clock=float(i)) for i in range(3)]
    traj = build(recs)
    assert traj.metadata["end_of_turn_token_id"] is None and len(traj.traces) == 3


def test_response_messages_hold_the_sampled_turns():
    rng = random.Random(3)
    conv = Conversation(rng)
    recs = [conv.sample(truncated=False, drift=False, seq=i, clock=float(i)) for i in range(3)]
    for i, r in enumerate(recs):
        r.response_message = {"role": "assistant", "content": f"sampled {i}", "reasoning_content": "why"}
        r.normalized_request = {"messages": [{"role": "user", "content": "q"}] +
                                [m for j in range(i) for m in ({"role": "assistant", "content": f"sampled {j}"},
                                                                {"role": "tool", "content": f"out{j}"})]}
    [trace] = build(recs, end_of_turn_token_id=EOT).traces
    assert [m["content"] for m in trace.response_messages] == ["sampled 0", "out0", "sampled 1", "out1", "sampled 2"]
    assert all(m.get("reasoning_content") == "why" for m in trace.response_messages if m["role"] == "assistant")


def test_bad_config_is_a_build_error():
    with pytest.raises(builders.BuildError):
        builders.create("prefix_merging", {"end_of_turn_token_id": "<|im_end|>"})
    with pytest.raises(builders.BuildError):
        builders.create("prefix_merging", {"tokenizer": "/no/such/dir"})


class NarrowConversation(Conversation):
    """Content from three ids: conversations share long runs by chance, so tips part anywhere."""

    def _text(self, n: int | None = None) -> list[int]:
        return [self.rng.randrange(200, 203) for _ in range(n or self.rng.randint(1, 6))]


ACTIONS = {"sample": 10, "main": 1, "subagent": 1, "fork": 1, "compaction": 1, "rerender": 1, "prefill": 1,
           "resample": 1}


@st.composite
def crowded_sessions(draw):
    """Many conversations in one session, every event in time order: new main agents sharing a
    system prompt, sub-agents, forks of a conversation at its current turn, compactions (same
    rewritten start), re-rendered histories (a prompt leaving its own tip midway), prefills (a
    tip extended without an end-of-turn token) and second samples from an already-sampled prompt;
    with messages, or without (a harness whose requests carry none: no message-level echo)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    kind = draw(st.sampled_from([Conversation, NarrowConversation]))
    with_messages = draw(st.booleans())
    convs: list[Conversation] = []
    last: dict[int, CompletionRecord] = {}
    records: list[CompletionRecord] = []

    def emit(record: CompletionRecord) -> None:
        if not with_messages:
            record.normalized_request = {}
        records.append(record)

    def new_record(prompt: list[int], like: CompletionRecord) -> CompletionRecord:
        n = len(records)
        return like.model_copy(update={"completion_id": f"c{n}", "seq": n, "started_at": float(n),
                                       "prompt_ids": prompt, "response_message": {"role": "assistant",
                                                                                  "content": f"turn {n}"}})

    for action in rng.choices(list(ACTIONS), weights=list(ACTIONS.values()), k=draw(st.integers(1, 120))):
        if action in ("main", "subagent") or not convs:
            system = [100 + rng.randrange(2)] * 8 if action != "subagent" else [500 + len(convs)]
            convs.append(kind(rng, system=system))
            continue
        src = convs[rng.randrange(len(convs))]
        if action == "fork":
            convs.append(kind(rng, history=[list(s) for s in src.history], messages=list(src.messages)))
        elif action == "compaction":
            convs.append(kind(rng, history=[turn_ids(SYS, [100] * 8), turn_ids(USER, [150, 151])]))
        elif action == "rerender":
            history = [list(s) for s in src.history]
            seg = history[rng.randrange(len(history))]
            del seg[rng.randrange(len(seg))]
            convs.append(kind(rng, history=history, messages=list(src.messages)))
        elif action == "prefill" and src.cid in last:
            tip = last[src.cid]
            emit(new_record(tip.prompt_ids + [rng.randrange(200, 203)], tip))
        elif action == "resample" and src.cid in last:
            emit(new_record(list(last[src.cid].prompt_ids), last[src.cid]))
        elif action == "sample":
            record = src.sample(rng.random() < 0.2, rng.random() < 0.2, len(records), float(len(records)))
            record.completion_id = f"c{len(records)}"
            last[src.cid] = record
            emit(record)
    return records


def reference_chains(records: list[CompletionRecord], eot: int, strict: bool) -> list[list[str]]:
    """The chain search as a plain scan over every chain so far: what the index must reproduce."""
    chains: list[list[CompletionRecord]] = []
    for c in sorted(records, key=lambda r: (r.started_at, r.seq)):
        best, best_rank = None, None
        messages = c.normalized_request.get("messages") or []
        for order, chain in enumerate(chains):
            prev = chain[-1]
            tip, tail = prev.prompt_ids, c.prompt_ids[len(prev.prompt_ids):]
            if len(tip) >= len(c.prompt_ids) or c.prompt_ids[:len(tip)] != tip:
                continue
            before = prev.normalized_request.get("messages") or []
            rank = (tail[:len(prev.response_ids)] == prev.response_ids,
                    len(messages) > len(before) and _same_turn(messages[len(before)], prev.response_message),
                    len(tip), order)
            if best_rank is None or rank > best_rank:
                best, best_rank = chain, rank
        shared = None
        if best is None:  # no tip is a prefix: the tips the prompt parts from last, a few ids before their end
            shared = max((common_prefix(chain[-1].prompt_ids, c.prompt_ids) for chain in chains), default=0)
            for order, chain in enumerate(chains):
                prev = chain[-1]
                before = prev.normalized_request.get("messages") or []
                if (common_prefix(prev.prompt_ids, c.prompt_ids) == shared
                        and len(prev.prompt_ids) - shared <= GENERATION_TAIL_MAX and eot in c.prompt_ids[shared:]
                        and eot not in prev.prompt_ids[shared:] and len(messages) > len(before)
                        and _same_turn(messages[len(before)], prev.response_message)
                        and (best is None or len(prev.prompt_ids) >= len(best[-1].prompt_ids))):
                    best = chain
        if best is not None and joins(best[-1], c, eot, strict, shared if best is not None else None):
            best.append(c)
        else:
            chains.append([c])
    return [[r.completion_id for r in chain] for chain in chains]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def joins(prev: CompletionRecord, c: CompletionRecord, eot: int, strict: bool, shared: int | None = None) -> bool:
    tail = c.prompt_ids[len(prev.prompt_ids) if shared is None else shared:]
    if eot not in tail:
        return False
    closed = bool(prev.response_ids) and prev.response_ids[-1] == eot
    shown = tail[: tail.index(eot) + (1 if closed else 0)]
    sampled = prev.response_ids if shared is None else prev.prompt_ids[shared:] + prev.response_ids
    if shown != sampled and shared is None:  # drifted: a rewritten turn (another message) starts a chain
        messages = c.normalized_request.get("messages") or []
        before = prev.normalized_request.get("messages") or []
        if len(messages) > len(before) and not _same_turn(messages[len(before)], prev.response_message):
            return False
    return not strict or shown == sampled


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded_sessions(), st.booleans())
def test_indexed_chain_search_picks_what_a_scan_of_every_chain_picks(records, strict):
    traj = build(records, end_of_turn_token_id=EOT, strict=strict)
    check_invariants(traj, records)
    assert [t.metadata["completion_ids"] for t in traj.traces] == reference_chains(records, EOT, strict)


def test_a_generation_prompt_the_next_prompt_does_not_repeat_still_merges_as_drift():
    """Qwen3 with thinking off: every prompt ends with an empty think block after the assistant
    header, which the next prompt's rendering of that turn leaves out, so no prompt was a prefix
    of the next. Each call started a chain of its own with no drift reported, and a trainer
    taking one trace a session kept one call of five. Now they merge, each turn after the first
    flagged (its context is not the one it was sampled after); strict still splits them."""
    THINK, END_THINK = 8, 9
    empty_think = [THINK, NL, NL, END_THINK, NL, NL]
    history = [*turn_ids(SYS, [100]), *turn_ids(USER, [200, 201])]
    messages: list[dict] = [{"role": "user", "content": "go"}]
    records = []
    for seq in range(1, 6):
        prompt = history + GEN + empty_think
        body = [300 + seq, 400 + seq]
        answer = {"role": "assistant", "content": f"step {seq}"}
        records.append(CompletionRecord(
            completion_id=f"c{seq}", session_id="s", seq=seq, provider="openai_chat", started_at=float(seq),
            finished_at=float(seq), upstream_latency_ms=1.0, prompt_ids=prompt, response_ids=body + [EOT],
            response_logprobs=[-0.5] * 3, response_tokens=None, finish_reason="stop", response_message=answer,
            normalized_request={"messages": list(messages)}))
        history = history + [IM_START, ASSIST, NL, *body, EOT, NL] + turn_ids(TOOL, [500 + seq])
        messages += [answer, {"role": "tool", "content": f"out {seq}"}]
    ctx = BuildContext(session_id="s", task_id="t")
    trajectory = builders.create("prefix_merging").build(records, ctx)
    [trace] = trajectory.traces
    stats = trajectory.metadata["reconstruction"]
    assert stats["chains_total"] == 1 and stats["generation_tail_merges"] == 4 and stats["drifted_turns"] == 4
    sampled = [t for r in records for t in r.response_ids]
    assert [t for t, m in zip(trace.response_ids, trace.loss_mask) if m == 1.0] == sampled  # every sampled id, once
    assert [turn["context_matches"] for turn in trace.metadata["turns"]] == [True, False, False, False, False]
    strict = builders.create("prefix_merging", {"strict": True}).build(records, ctx)
    assert len(strict.traces) == 5 and strict.metadata["reconstruction"]["strict_splits"] == 4


def test_the_end_of_turn_token_is_found_from_the_prompts_when_every_turn_was_cut():
    """Every call cut by max_tokens: no turn ended on the end-of-turn token, so none was known
    and nothing merged (a trainer taking one trace a session kept one call of five). The token
    a later prompt puts right after a cut turn, re-rendered as sampled, is the one."""
    history = [*turn_ids(SYS, [100]), *turn_ids(USER, [200, 201])]
    records = []
    for seq in range(1, 6):
        body = [300 + seq, 400 + seq, 500 + seq]
        records.append(CompletionRecord(
            completion_id=f"c{seq}", session_id="s", seq=seq, provider="openai_chat", started_at=float(seq),
            finished_at=float(seq), upstream_latency_ms=1.0, prompt_ids=history + GEN, response_ids=body,
            response_logprobs=[-0.5] * 3, response_tokens=None, finish_reason="length",
            response_message={"role": "assistant", "content": f"cut {seq}"}, normalized_request={"messages": []}))
        history = history + [IM_START, ASSIST, NL, *body, EOT, NL] + turn_ids(TOOL, [600 + seq])
    trajectory = builders.create("prefix_merging").build(records, BuildContext(session_id="s", task_id="t"))
    assert trajectory.metadata["end_of_turn_token_id"] == EOT
    [trace] = trajectory.traces
    assert [t for t, m in zip(trace.response_ids, trace.loss_mask) if m == 1.0] == [t for r in records for t in r.response_ids]
    assert trajectory.metadata["reconstruction"]["truncated_turns"] == 4


def test_traces_say_how_each_call_was_sampled():
    """Gemini CLI sends top_p 0.95 and top_k 64 on every call; the engine's logprobs are the
    model's own, not those of that truncated distribution, and nothing in a trace said so: each
    call's sampling settings are now in its trace (per_request) or its turn (prefix_merging)."""
    rng = random.Random(4)
    conv = Conversation(rng)
    recs = [conv.sample(truncated=False, drift=False, seq=i, clock=float(i)) for i in range(2)]
    recs[0].normalized_request = {**recs[0].normalized_request, "temperature": 1.0, "top_p": 0.95, "top_k": 64,
                                  "max_tokens": 512, "seed": None}
    per_request = builders.create("per_request").build(recs, BuildContext(session_id="s", task_id="t"))
    assert per_request.traces[0].metadata["sampling"] == {"temperature": 1.0, "top_p": 0.95, "top_k": 64}
    assert per_request.traces[1].metadata["sampling"] == {}  # the engine's defaults
    [trace] = build(recs, end_of_turn_token_id=EOT).traces
    assert [t["sampling"] for t in trace.metadata["turns"]] == [{"temperature": 1.0, "top_p": 0.95, "top_k": 64}, {}]


def test_each_merged_turn_names_the_policy_version_that_sampled_it():
    """A conversation sampled across a weight swap: the trace lists both versions, and each turn
    says which is its own (a trainer correcting per token needs the turn's, not the trace's)."""
    conv = Conversation(random.Random(7), system=[100])
    first, second = conv.sample(False, False, 0, 0.0), conv.sample(False, False, 1, 1.0)
    first.policy_version, second.policy_version = "3", "4"
    [trace] = build([first, second]).traces
    assert trace.metadata["policy_versions"] == ["3", "4"] and trace.metadata["policy_version"] == "4"
    assert [t["proxy_policy_version"] for t in trace.metadata["turns"]] == ["3", "4"]


def test_a_tasks_own_policy_version_outranks_a_stamp_left_by_an_earlier_run():
    """The proxy's version outlives the run that set it: a run that names its version on its
    tasks (slime's rollout) and never resumes with one was stamped with the old run's, and a
    staleness filter dropped every session (probe). The task's word wins; the stamps stay."""
    conv = Conversation(random.Random(7), system=[100])
    first, second = conv.sample(False, False, 0, 0.0), conv.sample(False, False, 1, 1.0)
    first.policy_version = second.policy_version = "2"
    ctx = BuildContext("s", "t", "shell", {"policy_version": "40"})
    [trace] = builders.create("prefix_merging", {}).build([first, second], ctx).traces
    assert trace.metadata["policy_version"] == "40" and trace.metadata["policy_versions"] == ["40"]
    assert [t["proxy_policy_version"] for t in trace.metadata["turns"]] == ["2", "2"]
    [one, _] = builders.create("per_request", {}).build([first, second], ctx).traces
    assert one.metadata["policy_version"] == "40" and one.metadata["proxy_policy_version"] == "2"


def _tool_turn(name: str, arguments: str) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def _three_calls(echo_of_first: dict) -> list[CompletionRecord]:
    """Three calls of one conversation; the second and third show the first turn as the harness
    sent it back (``echo_of_first``), rendered with other ids than the sampled ones."""
    base = [*turn_ids(SYS, [100]), *turn_ids(USER, [200, 201])]
    sampled_call = _tool_turn("frobnicate", '{"path":"a.txt"}')
    p1 = base + GEN
    r1 = [300, 301, 302, EOT]
    shown1 = [IM_START, ASSIST, NL, 310, 311, EOT, NL]  # the echo, rendered: not the sampled ids
    p2 = base + shown1 + turn_ids(TOOL, [400]) + GEN
    r2 = [320, 321, EOT]
    p3 = p2 + [320, 321, EOT, NL] + turn_ids(TOOL, [401]) + GEN
    second = {"role": "assistant", "content": "reading a.txt"}
    messages1 = [{"role": "user", "content": "go"}]
    messages2 = messages1 + [echo_of_first, {"role": "tool", "tool_call_id": "call_1", "content": "out"}]
    messages3 = messages2 + [second, {"role": "user", "content": "more"}]
    rows = [(p1, r1, sampled_call, messages1), (p2, r2, second, messages2), (p3, [330, EOT], {"role": "assistant",
                                                                                              "content": "done"}, messages3)]
    return [CompletionRecord(
        completion_id=f"c{i}", session_id="s", seq=i, provider="openai_chat", started_at=float(i), finished_at=float(i),
        upstream_latency_ms=1.0, prompt_ids=p, response_ids=r, response_logprobs=[-0.5] * len(r), response_tokens=None,
        finish_reason="stop", response_message=m, normalized_request={"messages": msgs})
        for i, (p, r, m, msgs) in enumerate(rows)]


def test_a_turn_the_harness_sent_back_rewritten_starts_a_new_chain_instead_of_drifting():
    """opencode answers a call to an unknown tool by sending it back as a call to ``invalid``
    (arguments: the tool and the error). The next prompt's tip is still a token prefix, so the
    call merged as a drift, and so did every later turn: their context held the sampled call
    where the policy had seen the rewritten one (6 of 8 turns drifted, with token-in on or off).
    A rewritten turn is a rewritten prompt: the completion starts a chain, and both are exact."""
    rewritten = _tool_turn("invalid", json.dumps({"tool": "frobnicate", "error": "Model tried to call unavailable tool"}))
    records = _three_calls(rewritten)
    for strict in (False, True):
        traj = build(records, end_of_turn_token_id=EOT, strict=strict)
        check_invariants(traj, records)
        stats = traj.metadata["reconstruction"]
        assert [t.metadata["completion_ids"] for t in traj.traces] == [["c0"], ["c1", "c2"]], strict
        assert stats["rewrite_splits"] == 1 and stats["drifted_turns"] == 0 and stats["strict_splits"] == 0
        assert all(t.metadata["context_exact"] for t in traj.traces)


def test_a_turn_sent_back_as_sampled_but_rendered_otherwise_still_merges_as_drift():
    """The same turn re-serialised (arguments spaced, an integral float as an integer, text parts
    for a string, another call id): the harness sent back what was sampled and the template
    rendered it with other ids -- a drift, merged and flagged; strict splits it."""
    echo = _tool_turn("frobnicate", '{"path": "a.txt"}')
    echo["tool_calls"][0]["id"] = "toolu_other"
    echo["content"] = [{"type": "text", "text": ""}]
    records = _three_calls(echo)
    traj = build(records, end_of_turn_token_id=EOT)
    check_invariants(traj, records)
    stats = traj.metadata["reconstruction"]
    assert [t.metadata["completion_ids"] for t in traj.traces] == [["c0", "c1", "c2"]]
    assert stats["rewrite_splits"] == 0 and stats["drifted_turns"] == 2
    strict = build(records, end_of_turn_token_id=EOT, strict=True)
    assert len(strict.traces) == 2 and strict.metadata["reconstruction"]["strict_splits"] == 1


def test_without_messages_a_drifted_turn_merges_as_before():
    """A request that carries no messages (raw ids) gives nothing to compare: a drift, merged."""
    records = _three_calls(_tool_turn("invalid", "{}"))
    for r in records:
        r.normalized_request = {}
    traj = build(records, end_of_turn_token_id=EOT)
    assert len(traj.traces) == 1 and traj.metadata["reconstruction"]["drifted_turns"] == 2
