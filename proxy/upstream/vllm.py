"""vLLM's dialect (>= 0.10.2): ``return_token_ids`` adds ``prompt_token_ids`` (top level) and
``choices[].token_ids``; ``logprobs`` gives ``choices[].logprobs.content[]`` aligned with them.
The reference server in ``infra/refserver`` speaks the same dialect."""

from __future__ import annotations

from typing import Any

from proxy.upstream.base import Captured, CaptureError, first_choice, token_ids
from proxy.upstream.ids_text import IdsText


class VLLMEngine:
    name = "vllm"
    score_path = "/v1/completions"
    context_reserve = 0  # prompt + max_tokens may fill the context exactly
    ids_text_key: str | None = "prompt_token_ids"  # only counted and stored by the proxy: kept as text

    def prepare(self, request: dict[str, Any], *, top_logprobs: int = 0) -> dict[str, Any]:
        out = dict(request)
        out["stream"] = False
        out["logprobs"] = True
        out["top_logprobs"] = top_logprobs
        out["return_token_ids"] = True
        # vLLM >= 0.16 reads `reasoning`; harnesses replay history as `reasoning_content`.
        msgs = out.get("messages") or []
        if any(isinstance(m, dict) and "reasoning_content" in m for m in msgs):
            out["messages"] = [_rename_reasoning(m) for m in msgs]
        return out

    def extract(self, response: dict[str, Any]) -> Captured:
        choice = first_choice(response)
        prompt_ids = response.get("prompt_token_ids")
        response_ids = choice.get("token_ids")
        if not isinstance(prompt_ids, (list, IdsText)) or not isinstance(response_ids, list):
            raise CaptureError("upstream returned no token ids; it must support vLLM's "
                               "return_token_ids (vLLM >= 0.10.2)")
        content = (choice.get("logprobs") or {}).get("content")
        if not isinstance(content, list) or len(content) != len(response_ids):
            raise CaptureError(f"upstream logprobs ({len(content) if isinstance(content, list) else 'none'}) "
                               f"do not align with its {len(response_ids)} token ids")
        return Captured(
            prompt_ids=prompt_ids if isinstance(prompt_ids, IdsText) else token_ids(prompt_ids),
            response_ids=token_ids(response_ids),
            response_logprobs=[float(e["logprob"]) for e in content],
            response_tokens=[str(e.get("token", "")) for e in content],
            finish_reason=choice.get("finish_reason"),
            stop_reason=choice.get("stop_reason"),
        )


    def score_request(self, ids: list[int], model: str) -> dict[str, Any]:
        # A token-id prompt with prompt_logprobs=0: the logprob of each prompt token as sampled.
        return {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}

    def scores(self, response: dict[str, Any], ids: list[int]) -> list[float | None]:
        choice = first_choice(response)
        entries = choice.get("prompt_logprobs") or response.get("prompt_logprobs")
        if not isinstance(entries, list) or len(entries) != len(ids):
            raise CaptureError("engine returned no prompt_logprobs aligned with the prompt")
        out: list[float | None] = [None]
        for tid, entry in zip(ids[1:], entries[1:]):
            value = (entry or {}).get(str(tid))
            out.append(None if value is None else float(value["logprob"]))
        return out


def _rename_reasoning(m: Any) -> Any:
    if not isinstance(m, dict) or "reasoning_content" not in m:
        return m
    m = dict(m)
    m.setdefault("reasoning", m.pop("reasoning_content"))
    return m
