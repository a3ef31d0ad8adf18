"""SGLang's dialect (0.5.x): prompt ids per choice (``return_prompt_token_ids``), sampled ids
and logprobs in ``meta_info.output_token_logprobs`` as ``[logprob, token_id, text]`` tuples
(``return_meta_info``), newer servers also ``choices[].token_ids``. Reasoning stays
``reasoning_content``; the matched stop is ``matched_stop``."""

from __future__ import annotations

from typing import Any

from proxy.upstream.base import Captured, CaptureError, first_choice, token_ids


class SGLangEngine:
    name = "sglang"
    score_path = "/generate"  # the native API: token ids in, input_token_logprobs out
    # SGLang refuses prompt + max_new_tokens >= its context length (vLLM only > it): one token
    # of the context is never an output limit's.
    context_reserve = 1
    ids_text_key: str | None = None  # its prompt ids sit in each choice: parsed
    tokenize_reads_effort = True  # /tokenize renders reasoning_effort as its chat route does

    def prepare(self, request: dict[str, Any], *, top_logprobs: int = 0) -> dict[str, Any]:
        out = dict(request)
        out.update(stream=False, logprobs=True, top_logprobs=top_logprobs,
                   return_prompt_token_ids=True, return_meta_info=True)
        msgs = out.get("messages") or []
        if any(isinstance(m, dict) and "reasoning" in m and "reasoning_content" not in m for m in msgs):
            out["messages"] = [{**{k: v for k, v in m.items() if k != "reasoning"}, "reasoning_content": m["reasoning"]}
                               if isinstance(m, dict) and "reasoning" in m else m for m in msgs]
        return out

    def extract(self, response: dict[str, Any]) -> Captured:
        choice = first_choice(response)
        sglext = response.get("sglext") or {}
        prompt_ids = choice.get("prompt_token_ids") or response.get("prompt_token_ids") or sglext.get("input_ids")
        triples = (choice.get("meta_info") or {}).get("output_token_logprobs")
        # The merged SGLang PR names it choices[].token_ids; some builds say response_token_ids.
        ids = choice.get("token_ids", choice.get("response_token_ids"))
        if ids is None and isinstance(triples, list):
            ids = [t[1] for t in triples]
        if ids is None and sglext.get("output_ids"):
            ids = sglext["output_ids"][0]
        if not isinstance(prompt_ids, list) or not isinstance(ids, list):
            raise CaptureError("upstream returned no token ids; SGLang needs return_prompt_token_ids "
                               "and return_meta_info (or sglext ids)")
        content = (choice.get("logprobs") or {}).get("content")
        if isinstance(triples, list) and len(triples) == len(ids):
            logprobs = [float(t[0]) for t in triples]
        elif isinstance(content, list) and len(content) == len(ids):
            logprobs = [float(e["logprob"]) for e in content]
        else:
            raise CaptureError(f"upstream logprobs do not align with its {len(ids)} token ids")
        tokens = [str(e.get("token", "")) for e in content] if isinstance(content, list) and len(content) == len(ids) else None
        return Captured(prompt_ids=token_ids(prompt_ids), response_ids=token_ids(ids),
                        response_logprobs=logprobs, response_tokens=tokens,
                        finish_reason=choice.get("finish_reason"), stop_reason=choice.get("matched_stop"))

    def score_request(self, ids: list[int], model: str) -> dict[str, Any]:
        return {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                "return_logprob": True, "logprob_start_len": 0}

    def scores(self, response: dict[str, Any], ids: list[int]) -> list[float | None]:
        triples = (response.get("meta_info") or {}).get("input_token_logprobs")
        if not isinstance(triples, list) or len(triples) != len(ids):
            raise CaptureError("engine returned no input_token_logprobs aligned with the prompt")
        out: list[float | None] = [None]
        for tid, triple in zip(ids[1:], triples[1:]):
            ok = isinstance(triple, list) and len(triple) >= 2 and triple[0] is not None and triple[1] == tid
            out.append(float(triple[0]) if ok else None)
        return out
