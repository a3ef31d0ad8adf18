"""The viewer's view model of a session (pure: text lookups come in as an object).

Per trace: every response token in order as columns (``ids``, ``text``, ``trainable``,
``logprob``: the behaviour logprob of trainable tokens, null for masked ones), and segments that
cover the response exactly -- sampled turns (``prefix_merging``'s ``metadata.turns``; one turn
for traces without them) with their drift flag and tool-call names, the interstitials between
them (template and tool-result tokens the policy did not sample), anything else as ``other``.
Tool-call spans are the tokens of each ``<tool_call>…</tool_call>`` block (the hermes markup
vLLM-style engines emit) in a turn whose tokens have text. The timeline is the session's stage
stamps as bars and its model calls (and failed calls) as marks, in seconds from registration.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from pipeline.schemas import CompletionRecord, SessionTiming, Trace, Trajectory, UpstreamErrorRecord

TOOL_CALL_MARKUP = (("<tool_call>", "</tool_call>"),)

# (bar, start stamp, end stamp): the stage pipeline's phases as SessionTiming records them.
STAGE_BARS = (
    ("QUEUE", "registered_at", "init_started_at"),
    ("INIT", "init_started_at", "ready_at"),
    ("READY", "ready_at", "run_started_at"),
    ("RUN", "run_started_at", "run_ended_at"),
    ("POSTRUN", "postrun_started_at", "postrun_ended_at"),
    ("EVAL_RUNTIME", "eval_runtime_started_at", "eval_runtime_ready_at"),
    ("EVALUATE", "evaluate_started_at", "evaluate_ended_at"),
)


class TokenText(Protocol):
    def span(self, ids: list[int], model: str | None) -> str | None: ...

    def pieces(self, ids: list[int], model: str | None) -> dict[int, str]: ...


def session_view(*, head: dict[str, Any], timing: SessionTiming, trajectory: Trajectory | None,
                 completions: list[CompletionRecord], errors: list[UpstreamErrorRecord],
                 text: TokenText | None) -> dict[str, Any]:
    records = {c.completion_id: c for c in completions}
    model = next((c.upstream_model for c in completions if c.upstream_model), None)
    traces = [trace_view(i, t, records, text, model) for i, t in enumerate(trajectory.traces)] if trajectory else []
    where: dict[str, tuple[int, int]] = {cid: (t["index"], seg["turn"]) for t in traces for seg in t["segments"]
             if seg["kind"] == "turn" and (cid := seg.get("completion_id"))}
    meta = trajectory.metadata if trajectory else {}
    return {**head, "builder": meta.get("builder"), "reconstruction": meta.get("reconstruction"),
            "trajectory_status": trajectory.status.value if trajectory else None, "traces": traces,
            "timeline": timeline(timing, completions, errors, where)}


def trace_view(index: int, trace: Trace, records: dict[str, CompletionRecord], text: TokenText | None,
               model: str | None) -> dict[str, Any]:
    n = len(trace.response_ids)
    ids = list(trace.response_ids)
    trainable = [bool(m) for m in trace.loss_mask]
    logprob = [lp.logprob if t else None for lp, t in zip(trace.response_logprobs, trainable)]
    pieces: list[str | None] = [lp.token for lp in trace.response_logprobs]
    segments = _segments(trace, n, records)
    missing = [ids[i] for s in segments if s["kind"] != "interstitial"
               for i in range(s["start"], s["start"] + s["len"]) if pieces[i] is None]
    if missing and text is not None:
        found = text.pieces(missing, model)
        pieces = [p if p is not None else found.get(tid) for p, tid in zip(pieces, ids)]
    spans: list[dict[str, Any]] = []
    for seg in segments:
        lo, hi = seg["start"], seg["start"] + seg["len"]
        if seg["kind"] == "interstitial" and any(p is None for p in pieces[lo:hi]) and text is not None:
            seg["text"] = text.span(ids[lo:hi], model)
        if seg["kind"] == "turn":
            spans += [{"kind": "tool_call", "turn": seg["turn"], "start": a, "end": b}
                      for a, b in tool_call_spans(pieces[lo:hi], lo)]
    prompt_text = text.span(list(trace.prompt_ids), model) if text is not None else None
    turns = [s for s in segments if s["kind"] == "turn"]
    # Whether every token can be shown as text: its own, or its interstitial's decoded span.
    shown = all(s.get("text") is not None or None not in pieces[s["start"]:s["start"] + s["len"]]
                for s in segments)
    return {
        "index": index, "reward": trace.reward, "finish_reason": trace.finish_reason,
        "prompt": {"len": len(trace.prompt_ids), "text": prompt_text},
        "response_len": n, "text_complete": shown,
        "trainable_count": sum(trainable), "masked_count": n - sum(trainable),
        "context_exact": trace.metadata.get("context_exact"),
        "drifted_turns": [s["turn"] for s in turns if s["drifted"]],
        "completion_ids": [s["completion_id"] for s in turns if s.get("completion_id")],
        "tokens": {"ids": ids, "text": pieces, "trainable": trainable, "logprob": logprob},
        "segments": segments, "spans": spans,
    }


def _segments(trace: Trace, n: int, records: dict[str, CompletionRecord]) -> list[dict[str, Any]]:
    """Turns and interstitials covering [0, n) in order, from the builder's turn metadata when
    it is consistent, else the whole response as one turn."""
    turns = _turns(trace.metadata.get("turns"), n) or [{
        "response_start": 0, "response_len": n, "interstitial_len": 0, "context_matches": True,
        "completion_id": trace.metadata.get("completion_id"), "finish_reason": trace.finish_reason}]
    out: list[dict[str, Any]] = []
    pos = 0
    for k, t in enumerate(turns):
        start, length, inter = t["response_start"], t["response_len"], t["interstitial_len"]
        if start - inter > pos:
            out.append({"kind": "other", "start": pos, "len": start - inter - pos})
        if inter:
            out.append({"kind": "interstitial", "start": start - inter, "len": inter, "after_turn": k - 1})
        cid = t.get("completion_id") if isinstance(t.get("completion_id"), str) else None
        out.append({"kind": "turn", "turn": k, "start": start, "len": length, "completion_id": cid,
                    "finish_reason": t.get("finish_reason"), "drifted": t.get("context_matches") is False,
                    "tool_calls": _tool_names(records.get(cid)) if cid else []})
        pos = start + length
    if pos < n:
        out.append({"kind": "other", "start": pos, "len": n - pos})
    return out


def _turns(raw: Any, n: int) -> list[dict[str, Any]] | None:
    if not isinstance(raw, list) or not raw:
        return None
    pos = 0
    for t in raw:
        if not isinstance(t, dict):
            return None
        start, length, inter = (_count(t.get(k)) for k in ("response_start", "response_len", "interstitial_len"))
        if start is None or length is None or inter is None or start - inter < pos or start + length > n:
            return None
        pos = start + length
    return raw


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _tool_names(record: CompletionRecord | None) -> list[str]:
    """The names of the tools a sampled turn called (OpenAI's nested or the flat call shape)."""
    calls = (record.response_message.get("tool_calls") if record else None) or []
    names = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        fn = call.get("function")
        name = fn.get("name") if isinstance(fn, dict) else call.get("name")
        names.append(str(name) if name is not None else "?")
    return names


def tool_call_spans(pieces: list[str | None], offset: int = 0) -> list[tuple[int, int]]:
    """Token ranges [start, end) of each tool-call block, by the text of the tokens."""
    if not pieces or any(p is None for p in pieces):
        return []
    text = "".join(p for p in pieces if p is not None)
    ends, pos = [], 0
    for p in pieces:
        pos += len(p or "")
        ends.append(pos)  # ends[i]: where token i's text ends
    out = []
    for opening, closing in TOOL_CALL_MARKUP:
        at = text.find(opening)
        while at >= 0:
            close = text.find(closing, at + len(opening))
            stop = len(text) if close < 0 else close + len(closing)
            first = next(i for i, e in enumerate(ends) if e > at)
            last = next((i for i, e in enumerate(ends) if e >= stop), len(pieces) - 1)
            out.append((offset + first, offset + last + 1))
            at = text.find(opening, stop)
    return sorted(out)


def timeline(timing: SessionTiming, completions: list[CompletionRecord], errors: list[UpstreamErrorRecord],
             where: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Stage bars from the stamps (CALLBACK: from the last stage's end to finished_at) and one
    mark per model call and failed call, in seconds from registration."""
    stamps = {k: v for k, v in timing.model_dump().items() if isinstance(v, float)}
    points = list(stamps.values()) + [c.started_at for c in completions] + [e.started_at for e in errors]
    if not points:
        return {"t0": None, "end": 0.0, "stages": [], "calls": [], "errors": []}
    t0 = stamps.get("registered_at", min(points))

    def rel(t: float) -> float:
        return round(t - t0, 4)

    stages: list[dict[str, Any]] = [{"stage": name, "start": rel(stamps[a]), "end": rel(stamps[b])}
                                    for name, a, b in STAGE_BARS if a in stamps and b in stamps]
    callback_from = stamps.get("evaluate_ended_at") or stamps.get("postrun_ended_at")
    if callback_from is not None and "finished_at" in stamps:
        stages.append({"stage": "CALLBACK", "start": rel(callback_from), "end": rel(stamps["finished_at"])})
    calls = [_call(c, rel, where.get(c.completion_id))
             for c in sorted(completions, key=lambda c: (c.started_at, c.seq))]
    failed: list[dict[str, Any]] = [
        {"start": rel(e.started_at), "end": rel(e.finished_at), "status_code": e.status_code,
         "error_type": e.error_type, "message": e.message[:300], "provider": e.provider} for e in errors]
    ends: list[float] = [s["end"] for s in stages] + [c["end"] for c in calls] + [e["end"] for e in failed]
    return {"t0": t0, "end": max(ends, default=0.0), "stages": stages, "calls": calls, "errors": failed}


def _call(c: CompletionRecord, rel: Callable[[float], float], at: tuple[int, int] | None) -> dict[str, Any]:
    trace, turn = at if at is not None else (None, None)
    return {"completion_id": c.completion_id, "start": rel(c.started_at), "end": rel(c.finished_at),
            "latency_ms": c.upstream_latency_ms, "provider": c.provider, "stream": c.stream, "model": c.model,
            "prompt_tokens": len(c.prompt_ids), "response_tokens": len(c.response_ids),
            "finish_reason": c.finish_reason, "trace": trace, "turn": turn}
