"""GRPO groups: a task's ``num_samples`` sessions are one group. Advantages come from the
session rewards of the group -- group-normalised (GRPO) or leave-one-out -- and every trace of a
session gets its session's advantage (one session may be split into several traces: one
conversation per sub-agent or title call, one sequence per drifted turn).

``usable``: a session the trainer can learn from -- COMPLETED (or TIMEOUT, when asked), a finite
reward, at least one trainable token. ``stale``: a session sampled by a policy version more than
``max_lag`` behind the trainer's.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from pipeline.schemas import SessionResult
from pipeline.status import SessionStatus


def trainable_tokens(result: SessionResult) -> int:
    return sum(t.trainable_tokens for t in result.trajectory.traces)


def usable(result: SessionResult, include_timeouts: bool = False) -> bool:
    ok = {SessionStatus.COMPLETED, *([SessionStatus.TIMEOUT] if include_timeouts else [])}
    return (result.status in ok and result.reward is not None and math.isfinite(result.reward)
            and trainable_tokens(result) > 0)


def trace_versions(result: SessionResult, trace_index: int) -> list[Any]:
    """The policy versions that sampled a trace's tokens, as stamped (each merged turn's, in
    order, without repeats; a per-request trace's one)."""
    meta = result.trajectory.traces[trace_index].metadata
    return [v for v in (meta.get("policy_versions") or [meta.get("policy_version")]) if v is not None]


def sample_versions(result: SessionResult, trace_index: int) -> dict[str, Any]:
    """What an adapter's sample carries of who sampled it: the oldest version that sampled any of
    the session's tokens (``policy_version``), and the trace's own (``policy_versions``)."""
    return {"policy_version": policy_version(result), "policy_versions": trace_versions(result, trace_index)}


def policy_version(result: SessionResult) -> int | None:
    """The oldest policy version that sampled any of the session's tokens (a session that ran
    across a weight swap is as stale as its earliest turns): each merged turn's version
    (``policy_versions``), else each trace's, else the task's. Unknown: None."""
    found = [v for i in range(len(result.trajectory.traces)) for v in trace_versions(result, i)]
    versions = [v for v in (integer_version(raw) for raw in found) if v is not None]
    if versions:
        return min(versions)
    return integer_version(result.metadata.get("policy_version"))


def integer_version(raw: Any) -> int | None:
    """An integer version as the proxy compares them (ASCII digits only): "1_0", " 7", "٣" and
    True name no integer version here, as they name none to the resume check (lua.PROXY_PAUSE_RELEASE)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def training_reward(result: SessionResult, trace_index: int) -> float:
    """The reward a trainer is handed for one of the session's traces: the trace's own (a filter
    or a per-trace grader set it), else the session's; none, or not finite: 0.0 (such a session
    is not ``usable``, and the adapters train none of its tokens)."""
    reward = result.trajectory.traces[trace_index].reward
    reward = result.reward if reward is None else reward
    return float(reward) if reward is not None and math.isfinite(reward) else 0.0


def neutral_reward(results: list[SessionResult], include_timeouts: bool = False) -> float:
    """The reward for the rows of a group's sessions that train nothing (not ``usable``: an
    ERROR, a TIMEOUT, the CANCELLED rest of an early-stopped group, no model call) where the
    trainer computes advantages itself: the mean reward of the group's usable sessions (0.0 when
    none is). slime's, verl's and SkyRL's GRPO take the baseline over every row of a prompt's
    group, masked ones included: rows given 0.0 pulled it down, and every usable session of the
    group got an advantage its reward did not earn (an early-stopped group of three successes and
    five cancelled sessions: +1.2 each, where ``advantages`` gives 0). At the mean they leave the
    baseline the usable sessions' own (exact for a mean-only baseline, Dr. GRPO's); the spread
    GRPO divides by still counts them, at zero distance, so its advantages grow by
    sqrt((n - 1) / (usable - 1)), their signs and order exact."""
    rewards = [_row_reward(r) for r in results if usable(r, include_timeouts)]
    return sum(rewards) / len(rewards) if rewards else 0.0


def _row_reward(result: SessionResult) -> float:
    """What a usable session's row is handed: its main trace's ``training_reward`` (a filter's
    per-trace reward where one was set), the session's where it has no one sequence."""
    try:
        return training_reward(result, main_trace(result))
    except NoSingleSequence:
        return float(result.reward or 0.0)


class NoSingleSequence(ValueError):
    """A session that is no one sequence for a trainer taking one per sample."""


# A session that made no model call (its runtime failed to start, its agent crashed first) still
# holds its place in a batch: one masked token after a one-token prompt, which trains nothing
# (an empty sequence is no valid row for the trainers' packing). Token 0 exists in every vocabulary.
PLACEHOLDER_TOKEN = 0


def made_no_call(result: SessionResult) -> bool:
    return not result.trajectory.traces


def sampled_nothing(result: SessionResult) -> bool:
    """No model call, or calls that sampled no token (an empty completion): no row of its own a
    trainer can take -- the adapters give it the placeholder (an empty response is no valid row:
    slime slices ``tokens[-response_length:]``, the whole sequence for a length of 0)."""
    return not any(t.response_ids for t in result.trajectory.traces)


class RolloutLogprobError(ValueError):
    """A trainable token without a finite behaviour logprob: training on it would be wrong."""


def row_logprobs(result: SessionResult, trace_index: int, mask: list[int]) -> list[float]:
    """A row's behaviour logprobs under the row's ``mask``: a token it trains on must have a
    finite one (else ``RolloutLogprobError``); a masked token's non-finite one is 0.0, as the
    builders give the tokens between turns -- a NaN there is no 0 under the mask (NaN * 0 is
    NaN: the trainers' importance ratios and KL over the packed batch would be NaN)."""
    logprobs = [lp.logprob for lp in result.trajectory.traces[trace_index].response_logprobs]
    bad = [j for j, (m, lp) in enumerate(zip(mask, logprobs)) if m and not math.isfinite(lp)]
    if bad:
        raise RolloutLogprobError(f"{result.session_id} trace {trace_index}: trainable tokens {bad[:5]} have no logprob")
    return [lp if math.isfinite(lp) else 0.0 for lp in logprobs]


def main_trace(result: SessionResult) -> int:
    """The index of the session's one sequence, for trainers that take one per sample (verl's
    agent loop, SkyRL, slime's groups): its only trace, or, where prefix merging kept a harness's
    side conversations apart (opencode's title call, a sub-agent), the trace with the most sampled
    tokens (the latest of equals). A per-request trajectory of several calls has no such one, and
    a session that made no model call has none at all: both raise ``NoSingleSequence``."""
    traces = result.trajectory.traces
    if not traces:
        raise NoSingleSequence(f"session {result.session_id} ({result.status.value}) made no model call: "
                               "it has no tokens to train on")
    if len(traces) > 1 and result.trajectory.metadata.get("builder") == "per_request":
        raise NoSingleSequence(f"session {result.session_id} is {len(traces)} per-request traces: a trainer taking "
                               "one sequence per sample needs the builder prefix_merging (or SkyRL's step-wise mode)")
    return max(range(len(traces)), key=lambda i: (traces[i].trainable_tokens, bool(traces[i].response_ids), i))


def fit_lengths(row: dict[str, Any], prompt_length: int | None, response_length: int | None,
                prompt: str, response: tuple[str, ...]) -> tuple[bool, bool]:
    """Cut a row to a trainer's lengths, in place, as the frameworks' own agent loops cut theirs:
    the response keys (ids, mask, logprobs) to their first ``response_length`` tokens; a prompt
    over ``prompt_length`` to its last tokens, and the row then trains nothing (its mask zeroed):
    a cut prompt is a context the policy never saw. Returns (response cut, prompt overlong); the
    caller sets the reward of an overlong row as it does for an unusable one."""
    cut = response_length is not None and len(row[response[0]]) > response_length
    if cut:
        for key in response:
            row[key] = row[key][:response_length]
    overlong = prompt_length is not None and len(row[prompt]) > prompt_length
    if overlong:
        row[prompt] = row[prompt][-prompt_length:] if prompt_length else []
        row[response[1]] = [0] * len(row[response[1]])
    return cut, overlong


def stale(result: SessionResult, current_version: int, max_lag: int) -> bool:
    """Sampled by a policy more than ``max_lag`` versions behind ``current_version`` (unknown: stale)."""
    version = policy_version(result)
    return version is None or current_version - version > max_lag


@dataclass
class Group:
    task_id: str
    results: list[SessionResult]
    expected: int  # the task's num_samples
    stats: dict[str, float] = field(default_factory=dict)
    # Set by ``stream_groups.iter_groups``: acks the group's stream entries now (idempotent).
    on_ack: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        rewards = [float(r.reward) for r in self.usable() if r.reward is not None]
        self.stats = {
            "sessions": len(self.results), "usable": len(rewards),
            "reward_mean": sum(rewards) / len(rewards) if rewards else float("nan"),
            "reward_std": _std(rewards) if rewards else float("nan"),
            "trainable_tokens": sum(trainable_tokens(r) for r in self.results),
            **{f"status_{k.lower()}": v for k, v in Counter(r.status.value for r in self.results).items()},
        }

    def ack(self) -> None:
        """The group is taken (``iter_groups``): not delivered again, also if the loop breaks
        right after. Without it, a group is acked when the loop asks for the next one."""
        if self.on_ack is not None:
            self.on_ack()

    def usable(self, include_timeouts: bool = False) -> list[SessionResult]:
        return [r for r in self.results if usable(r, include_timeouts)]

    @property
    def complete(self) -> bool:
        return len(self.results) >= self.expected


def _std(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def advantages(group: Group, method: Literal["grpo", "loo"] = "grpo", eps: float = 1e-6,
               include_timeouts: bool = False) -> dict[tuple[str, int], float]:
    """``{(session_id, trace_index): advantage}`` over the group's usable sessions.

    grpo: (r - mean) / (std + eps). loo (leave-one-out): r - mean of the others' rewards. The
    group's statistics are the sessions' rewards; a trace whose own reward differs (e.g. zeroed by
    ``filters.zero_unparsed``) is scored with its own reward against them. A group with one
    usable session, or all rewards equal, teaches nothing: every advantage is exactly 0 (equal
    rewards, not a float-noise std of them). In a group of equal rewards, such a trace gets its
    distance to the group's reward (both methods): GRPO's std is 0 there, and dividing by ``eps``
    alone made a zeroed trace of a group all rewarded 1.0 an advantage of -1,000,000.
    """
    if method not in ("grpo", "loo"):
        raise ValueError(f"unknown advantage method {method!r}: grpo or loo")
    sessions = group.usable(include_timeouts)
    rewards = [float(r.reward or 0.0) for r in sessions]  # usable: never None
    n = len(rewards)
    total = sum(rewards)
    mean, std = (total / n, _std(rewards)) if n else (0.0, 0.0)
    equal = len(set(rewards)) == 1
    out: dict[tuple[str, int], float] = {}
    for s, own in zip(sessions, rewards):
        for i in range(len(s.trajectory.traces)):
            r = training_reward(s, i)
            if n < 2 or (equal and r == own):
                out[(s.session_id, i)] = 0.0
            elif equal:  # a trace's own reward against a group with no spread to scale it by
                out[(s.session_id, i)] = r - own
            elif method == "grpo":
                out[(s.session_id, i)] = (r - mean) / (std + eps)
            else:
                out[(s.session_id, i)] = r - (total - own) / (n - 1)
    return out
