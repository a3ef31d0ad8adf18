"""Response shaping for the two engine dialects the reference server speaks: vLLM and SGLang.

The project talks to either engine through its own adapter, and each adapter must be tested
against the fields its engine really sends, so one generation is reported in two shapes:

- vLLM (0.10.2+; ``reasoning`` is the >= 0.16 name): ``return_token_ids`` adds a top-level
  ``prompt_token_ids`` and a per-choice ``token_ids``; ``stop_reason`` sits next to
  ``finish_reason``; ``prompt_logprobs`` and ``return_tokens_as_token_ids`` are honoured.
- SGLang (0.5.x OpenAI server): ``return_prompt_token_ids`` / ``return_token_ids`` /
  ``return_meta_info`` add per-choice ``prompt_token_ids`` / ``response_token_ids`` /
  ``meta_info``; ``matched_stop`` replaces ``stop_reason``; reasoning is ``reasoning_content``.

Only the chat route, /tokenize, /detokenize, /v1/models, error bodies and context refusals
differ (and where a chat request may carry its prompt's ids: vLLM's token-in route, SGLang's
``input_ids``); /v1/completions is vLLM-shaped in both modes. No request validation lives here beyond reading the dialect's own flags.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .engine import Generation, ModelEngine
from .params import get_bool, prompt_logprobs_k, sglang_context_check, vllm_context_check

# Per-choice field for the sampled ids under return_token_ids. Named as the project specified;
# upstream SGLang's chat route (PR sgl-project/sglang#30917) calls it "token_ids". One place to
# change if the project's SGLang adapter moves to the upstream name.
SGLANG_RESPONSE_IDS_FIELD = "response_token_ids"
# What SGLang reports when no weight update has ever named a version.
SGLANG_WEIGHT_VERSION = "default"
# Token-in chat (vLLM dialect): a route of its own, so an engine without it answers 404 instead of
# silently re-rendering the messages (stock vLLM ignores unknown body fields); prime-rl's vLLM
# server uses the same path. The body is a chat request plus the prompt's ids in this field.
TOKENS_ROUTE = "/v1/chat/completions/tokens"
TOKEN_IDS_FIELD = "prompt_token_ids"


def lp(v: float) -> float:
    """vLLM clamps -inf logprobs so the JSON stays valid."""
    return max(float(v), -9999.0)


def tok(engine: ModelEngine, tid: int, as_ids: bool) -> str:
    return f"token_id:{tid}" if as_ids else engine.token_text(tid)


def usage(prompt_len: int, completion_len: int) -> dict:
    return {"prompt_tokens": prompt_len, "completion_tokens": completion_len,
            "total_tokens": prompt_len + completion_len}


def prompt_logprobs(engine: ModelEngine, prompt_ids: list[int], k: int) -> list:
    """vLLM's prompt_logprobs: None for the first token, then {"<id>": {logprob, rank, decoded_token}}."""
    entries = engine.score_top(prompt_ids, 1, k) if len(prompt_ids) > 1 else []
    return [None] + [
        {str(t): {"logprob": lp(v), "rank": rank, "decoded_token": engine.token_text(t)}
         for t, (v, rank) in e.items()}
        for e in entries
    ]


def sorted_top(entry: dict, k: int) -> list[tuple[int, float]]:
    """The k best of an engine top-logprobs entry, best first."""
    return sorted(((t, v[0]) for t, v in entry.items()), key=lambda x: (-x[1], x[0]))[:k]


def chat_logprobs(engine: ModelEngine, gen: Generation, k: int, as_ids: bool) -> dict:
    """OpenAI chat logprobs; both engines use this shape."""
    content = []
    for i, (tid, v) in enumerate(zip(gen.token_ids, gen.logprobs)):
        top = sorted_top(gen.top_logprobs[i], k) if gen.top_logprobs else []
        text = engine.token_text(tid)
        content.append({
            "token": tok(engine, tid, as_ids), "logprob": lp(v),
            "bytes": list(text.encode("utf-8", errors="replace")),
            "top_logprobs": [{"token": tok(engine, t, as_ids), "logprob": lp(tv),
                              "bytes": list(engine.token_text(t).encode("utf-8", errors="replace"))}
                             for t, tv in top],
        })
    return {"content": content}


@dataclass
class ChatResult:
    """One chat generation, parsed but not yet shaped."""
    model: str
    prompt_ids: list[int]
    gen: Generation
    reasoning: str | None
    content: str | None
    tool_calls: list[dict]  # OpenAI-shaped, as hermes.parse_tool_calls returns them
    logprobs_k: int | None  # None: logprobs not requested; else the number of alternatives
    forced_tool: bool = False  # tool_choice named a function

    @property
    def finish_reason(self) -> str:
        # As vLLM's resolve_finish_reason: a forced named function reports "stop", as OpenAI does.
        called = self.tool_calls and self.gen.finish_reason == "stop" and not self.forced_tool
        return "tool_calls" if called else self.gen.finish_reason


def _chat_envelope(result: ChatResult, choice: dict, resp_id: str, created: int) -> dict:
    return {"id": resp_id, "object": "chat.completion", "created": created, "model": result.model,
            "choices": [choice], "usage": usage(len(result.prompt_ids), len(result.gen.token_ids))}


class VLLMDialect:
    name = "vllm"
    tokens_route: str | None = TOKENS_ROUTE  # infra/vllm_ext adds it to a real vLLM server
    chat_token_field: str | None = None  # stock vLLM's chat route ignores any ids field
    tokenize_reads_effort = False  # TokenizeChatRequest has no reasoning_effort

    def check_context(self, engine: ModelEngine, prompt_len: int, requested, *, chat: bool = False) -> None:
        vllm_context_check(engine, prompt_len, requested)

    def error_body(self, message: str, status: int, kind: str) -> dict:
        return {"error": {"message": message, "type": kind, "param": None, "code": status}}

    def chat_options(self, body: dict) -> dict:
        return {"as_ids": get_bool(body, "return_tokens_as_token_ids", False),
                "return_ids": get_bool(body, "return_token_ids", False),
                "prompt_k": prompt_logprobs_k(body)}

    def chat_response(self, engine: ModelEngine, result: ChatResult, opts: dict, created: int) -> dict:
        gen, k = result.gen, result.logprobs_k
        message: dict = {"role": "assistant", "content": result.content}
        if result.tool_calls:
            message["tool_calls"] = result.tool_calls
        message["reasoning"] = result.reasoning
        choice: dict = {"index": 0, "message": message,
                        "logprobs": chat_logprobs(engine, gen, k, opts["as_ids"]) if k is not None else None,
                        "finish_reason": result.finish_reason, "stop_reason": gen.stop_reason}
        if opts["return_ids"]:
            choice["token_ids"] = gen.token_ids
        resp = _chat_envelope(result, choice, f"chatcmpl-{uuid.uuid4().hex}", created)
        pk = opts["prompt_k"]
        resp["prompt_logprobs"] = prompt_logprobs(engine, result.prompt_ids, pk) if pk is not None else None
        if opts["return_ids"]:
            resp["prompt_token_ids"] = result.prompt_ids
        return resp

    def tokenize_response(self, engine: ModelEngine, ids: list[int], body: dict) -> dict:
        out = {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids}
        if get_bool(body, "return_token_strs", False):
            out["token_strs"] = engine.token_strs(ids)
        return out

    def detokenize_response(self, engine: ModelEngine, ids: list[int], body: dict) -> dict:
        return {"prompt": engine.decode(ids, skip_special_tokens=False)}

    def model_card(self, model_id: str, engine: ModelEngine, created: int) -> dict:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "vllm",
                "root": engine.model_dir or model_id, "parent": None,
                "max_model_len": engine.max_model_len, "permission": []}


def _sglang_finish(result: ChatResult) -> tuple[dict, int | str | None]:
    """(meta_info finish_reason, choice matched_stop) the way SGLang reports them."""
    gen = result.gen
    if gen.finish_reason == "length":
        return {"type": "length", "length": len(gen.token_ids)}, None
    if result.finish_reason == "tool_calls":
        # SGLang rewrites the finish reason in place when it parses tool calls, dropping the
        # matched stop; meta_info is the same dict, so it shows the rewrite too.
        return {"type": "tool_calls", "matched": None}, None
    # vLLM leaves stop_reason empty for the tokenizer EOS; SGLang names the EOS id it matched,
    # which is the last sampled token.
    matched = gen.stop_reason if gen.stop_reason is not None else gen.token_ids[-1]
    return {"type": "stop", "matched": matched}, matched


class SGLangDialect:
    name = "sglang"
    tokens_route: str | None = None
    # SGLang's own chat request takes pre-tokenised ids, bypassing the template (messages still
    # drive stop tokens and tool parsing).
    chat_token_field: str | None = "input_ids"
    tokenize_reads_effort = True  # its /tokenize renders messages exactly as its chat route

    def check_context(self, engine: ModelEngine, prompt_len: int, requested, *, chat: bool = False) -> None:
        sglang_context_check(engine, prompt_len, requested, chat=chat)

    def error_body(self, message: str, status: int, kind: str) -> dict:
        # SGLang's ErrorResponse sits at the top level (vLLM wraps it in "error").
        return {"object": "error", "message": message, "type": kind, "param": None, "code": status}

    def chat_options(self, body: dict) -> dict:
        # return_tokens_as_token_ids, prompt_logprobs and the other vLLM extras are unknown to
        # SGLang's request model, which ignores unknown fields; so do we.
        return {"prompt_ids": get_bool(body, "return_prompt_token_ids", False),
                "token_ids": get_bool(body, "return_token_ids", False),
                "meta": get_bool(body, "return_meta_info", False)}

    def chat_response(self, engine: ModelEngine, result: ChatResult, opts: dict, created: int) -> dict:
        gen, k = result.gen, result.logprobs_k
        calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "index": i, "type": "function",
                  "function": c["function"]} for i, c in enumerate(result.tool_calls)]
        message = {"role": "assistant", "content": result.content,
                   "reasoning_content": result.reasoning or None, "tool_calls": calls or None}
        finish_info, matched = _sglang_finish(result)
        resp_id = f"chatcmpl-{uuid.uuid4().hex}"
        choice: dict = {"index": 0, "message": message,
                        "logprobs": chat_logprobs(engine, gen, k, False) if k is not None else None,
                        "finish_reason": result.finish_reason, "matched_stop": matched}
        if opts["prompt_ids"] or opts["token_ids"]:
            choice["prompt_token_ids"] = result.prompt_ids
        if opts["token_ids"]:
            choice[SGLANG_RESPONSE_IDS_FIELD] = gen.token_ids
        if opts["meta"]:
            choice["meta_info"] = {
                "id": resp_id, "finish_reason": finish_info,
                "prompt_tokens": len(result.prompt_ids), "completion_tokens": len(gen.token_ids),
                "cached_tokens": 0,  # no prefix cache here
                # SGLang's chat route asks for token text in logprobs (return_text_in_logprobs), so the
                # third element is the decoded token, not null as on its native /generate route.
                "output_token_logprobs": [[float(v), t, engine.token_text(t)]
                                          for t, v in zip(gen.token_ids, gen.logprobs)],
                "weight_version": SGLANG_WEIGHT_VERSION,
            }
        resp = _chat_envelope(result, choice, resp_id, created)
        resp["metadata"] = {"weight_version": SGLANG_WEIGHT_VERSION}
        return resp

    def tokenize_response(self, engine: ModelEngine, ids: list[int], body: dict) -> dict:
        return {"tokens": ids, "count": len(ids), "max_model_len": engine.max_model_len}

    def detokenize_response(self, engine: ModelEngine, ids: list[int], body: dict) -> dict:
        # SGLang's DetokenizeRequest defaults skip_special_tokens to true (vLLM keeps them).
        return {"text": engine.decode(ids, skip_special_tokens=get_bool(body, "skip_special_tokens", True))}

    def model_card(self, model_id: str, engine: ModelEngine, created: int) -> dict:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "sglang",
                "root": engine.model_dir or model_id, "parent": None, "max_model_len": engine.max_model_len}


DIALECTS = {"vllm": VLLMDialect(), "sglang": SGLangDialect()}


def get_dialect(name: str):
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; expected one of {', '.join(DIALECTS)}") from None
