"""``per_request``: every captured completion becomes one trace, exactly as sampled.

Lossless for each call, but a long agent session becomes many short samples (the paper's
1,185 trainer updates); ``prefix_merging`` is the dense alternative.
"""

from __future__ import annotations

from pipeline.builders.base import BuildContext, sampling_of
from pipeline.schemas import CompletionRecord, TokenLogprob, Trace, Trajectory


class PerRequestBuilder:
    name = "per_request"

    def __init__(self, **config: object) -> None:
        if config:
            raise TypeError(f"per_request takes no config, got {sorted(config)}")

    def build(self, completions: list[CompletionRecord], ctx: BuildContext) -> Trajectory:
        ordered = sorted(completions, key=lambda c: (c.started_at, c.seq))
        traces = [self._trace(c, ctx) for c in ordered]
        return Trajectory(traces=traces, metadata={"builder": self.name, "completions": len(ordered)})

    def _trace(self, c: CompletionRecord, ctx: BuildContext) -> Trace:
        tokens: list[str | None] = list(c.response_tokens) if c.response_tokens else [None] * len(c.response_ids)
        req = c.normalized_request
        return Trace(
            prompt_ids=list(c.prompt_ids),
            response_ids=list(c.response_ids),
            loss_mask=[1.0] * len(c.response_ids),
            response_logprobs=[
                TokenLogprob(token_id=t, logprob=lp, token=s)
                for t, lp, s in zip(c.response_ids, c.response_logprobs, tokens)
            ],
            prompt_messages=list(req.get("messages") or []),
            response_messages=[c.response_message] if c.response_message else [],
            tools=req.get("tools") or None,
            finish_reason=c.finish_reason,
            metadata=ctx.trace_metadata(
                self.name, completion_id=c.completion_id, provider=c.provider,
                policy_version=ctx.policy_version(c.policy_version), proxy_policy_version=c.policy_version,
                sampling=sampling_of(req),
            ),
        )
