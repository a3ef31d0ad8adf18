"""The verifier: re-score every trainable token with the model and check the training-data
promise on real data instead of assuming it.

For each trace, the whole sequence (prompt + response) goes to the engine's prompt-logprob API,
in the engine's own dialect from the engine registry (vLLM: ``/v1/completions`` with a token-id
prompt and ``prompt_logprobs``; SGLang: ``/generate`` with ``input_ids`` and
``input_token_logprobs``; the reference server speaks both). Every trainable token's recorded logprob must equal the model's in the
trace's own context, within ``tolerance``. Turns a merged trace marks as drifted (their
training context differs from the prompt they were sampled from) are reported with their
logprob error; they are violations only with ``fail_on_drift``. Given the session's completion
records, the trainable ids are also checked against the ids each completion sampled.

A trace that fills the engine's context (a last turn cut at the length limit) cannot be scored
whole: scoring asks the engine for one more token, which both engines refuse. It is scored
without its last token, which is reported as ``unscored`` and is not a violation.

    report = Verifier("http://vllm:8000", engine="vllm").verify(result.trajectory, records)
    print(report.summary()); sys.exit(0 if report.ok else 1)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import httpx

from pipeline.errors import CaptureError, VerifyError
from pipeline.schemas import CompletionRecord, Trace, Trajectory
from proxy import upstream
from proxy.context_limits import read_refusal


@dataclass
class TurnReport:
    completion_id: str | None
    start: int
    length: int
    context_matches: bool
    max_abs_diff: float
    mismatched: int  # tokens beyond tolerance


@dataclass
class TraceReport:
    index: int
    trainable: int
    masked: int
    max_abs_diff: float  # over trainable tokens of turns whose context matches
    violations: int
    id_mismatches: int | None  # None without completion records
    drifted_turns: list[TurnReport] = field(default_factory=list)
    turns: int = 0
    error: str | None = None
    unscored: int = 0  # trainable tokens past what the engine's context let it score

    @property
    def ok(self) -> bool:
        return self.error is None and self.violations == 0 and not self.id_mismatches


@dataclass
class Report:
    traces: list[TraceReport]
    tolerance: float
    fail_on_drift: bool = False

    @property
    def ok(self) -> bool:
        drift = any(t.drifted_turns for t in self.traces) if self.fail_on_drift else False
        return all(t.ok for t in self.traces) and not drift

    def summary(self) -> str:
        lines = [f"{'trace':>5} {'turns':>5} {'trainable':>9} {'masked':>7} {'max|dlp|':>10} {'bad':>4} "
                 f"{'ids!=':>5} {'drifted':>7}  status"]
        for t in self.traces:
            drift = f"{len(t.drifted_turns)}" + (f" (max {max(d.max_abs_diff for d in t.drifted_turns):.2e})"
                                                  if t.drifted_turns else "")
            status = t.error or ("ok" if t.ok else "VIOLATION")
            if t.unscored and not t.error:
                status += f" ({t.unscored} last token unscored: the trace fills the context)"
            lines.append(f"{t.index:>5} {t.turns:>5} {t.trainable:>9} {t.masked:>7} {t.max_abs_diff:>10.2e} "
                         f"{t.violations:>4} {'-' if t.id_mismatches is None else t.id_mismatches:>5} {drift:>7}  {status}")
        lines.append(f"{len(self.traces)} traces, tolerance {self.tolerance:g}: "
                     f"{'OK' if self.ok else 'VIOLATIONS FOUND'}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "tolerance": self.tolerance, "traces": [asdict(t) for t in self.traces]}


class Verifier:
    def __init__(self, upstream_url: str, model: str | None = None, *, engine: str = "vllm",
                 tolerance: float = 1e-4, fail_on_drift: bool = False, timeout: float = 600.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = upstream_url.split(",")[0].rstrip("/")
        self.engine = upstream.create(engine)
        self._http = httpx.Client(timeout=timeout, transport=transport)
        self.model = model or self._first_model()
        self.tolerance = tolerance
        self.fail_on_drift = fail_on_drift

    def _first_model(self) -> str:
        try:
            data = self._http.get(f"{self.url}/v1/models").json()
            return data["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            raise VerifyError(f"cannot list models at {self.url}: {exc}") from exc

    def token_logprobs(self, ids: list[int]) -> list[float | None]:
        """logprob of ids[i] given ids[:i] (None for i=0), from the engine's prompt logprobs.
        When the engine refuses the sequence for length (it fills the context, and scoring asks
        for one token more), the last id is left out: the list is one shorter than ``ids``."""
        resp = self._http.post(f"{self.url}{self.engine.score_path}", json=self.engine.score_request(ids, self.model))
        if resp.status_code == 400 and len(ids) > 2 and read_refusal(resp.text) is not None:
            ids = ids[:-1]
            resp = self._http.post(f"{self.url}{self.engine.score_path}",
                                   json=self.engine.score_request(ids, self.model))
        if resp.status_code >= 400:
            raise VerifyError(f"engine refused the scoring request ({resp.status_code}): {resp.text[:300]}")
        try:
            return self.engine.scores(resp.json(), ids)
        except (CaptureError, ValueError) as exc:
            raise VerifyError(str(exc)) from None

    def verify(self, trajectory: Trajectory, records: Iterable[CompletionRecord] | None = None) -> Report:
        by_id = {r.completion_id: r for r in records} if records is not None else None
        return Report([self.verify_trace(i, t, by_id) for i, t in enumerate(trajectory.traces)],
                      self.tolerance, self.fail_on_drift)

    def verify_trace(self, index: int, trace: Trace, records: dict[str, CompletionRecord] | None = None) -> TraceReport:
        trainable = sum(1 for m in trace.loss_mask if m)
        report = TraceReport(index, trainable, len(trace.loss_mask) - trainable, 0.0, 0,
                             0 if records is not None else None)
        try:
            scores = self.token_logprobs(list(trace.prompt_ids) + list(trace.response_ids))
        except (VerifyError, httpx.HTTPError) as exc:
            report.error = f"not scored: {exc}"
            return report
        offset = len(trace.prompt_ids)
        turns = _turns(trace)
        report.turns = len(turns)
        for turn in turns:
            diffs = []
            for j in range(turn.start, turn.start + turn.length):
                if not trace.loss_mask[j]:
                    continue
                if offset + j >= len(scores):
                    report.unscored += 1
                    continue
                got = scores[offset + j]
                diffs.append(float("inf") if got is None else abs(got - trace.response_logprobs[j].logprob))
            turn.max_abs_diff = max(diffs, default=0.0)
            turn.mismatched = sum(1 for d in diffs if d > self.tolerance)
            if turn.context_matches:
                report.max_abs_diff = max(report.max_abs_diff, turn.max_abs_diff)
                report.violations += turn.mismatched
            else:
                report.drifted_turns.append(turn)
            if records is not None and turn.completion_id is not None:
                rec = records.get(turn.completion_id)
                sampled = trace.response_ids[turn.start:turn.start + turn.length]
                if rec is None or sampled != rec.response_ids:
                    report.id_mismatches = (report.id_mismatches or 0) + max(1, len(sampled))
        return report


def _turns(trace: Trace) -> list[TurnReport]:
    """The sampled spans of a trace: a merged trace lists them; otherwise the whole response."""
    meta = trace.metadata.get("turns")
    if meta:
        return [TurnReport(t.get("completion_id"), int(t["response_start"]), int(t["response_len"]),
                           bool(t.get("context_matches", True)), 0.0, 0) for t in meta]
    return [TurnReport(trace.metadata.get("completion_id"), 0, len(trace.response_ids), True, 0.0, 0)]
