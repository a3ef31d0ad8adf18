"""Token-in calls: a chat request whose prompt is given as token ids (issue 14's spliced prompts).

The engine must sample after exactly the ids the proxy built, never after its own re-rendering
of the messages. Four paths, by engine (``TokenInPath``):

- ``chat_tokens`` (vLLM with ``infra/vllm_ext``, the reference server): ``POST
  /v1/chat/completions/tokens`` = the chat request + ``prompt_token_ids``; the engine parses tool
  calls and reasoning itself and answers a normal vLLM chat completion.
- ``completions`` (stock vLLM): ``POST /v1/completions`` with the ids as ``prompt`` and
  ``return_token_ids``; its raw text is parsed here (``assistant_text.py``: qwen3 reasoning,
  hermes tool calls) into the vLLM chat completion the chat route would have answered.
- ``sglang_generate`` (SGLang): ``POST /generate`` with ``input_ids`` and ``return_logprob``; the
  answer (``meta_info.output_token_logprobs`` tuples) becomes SGLang's chat completion.
- ``chat_input_ids`` (SGLang): its own chat route with ``input_ids`` (SGLang documents that they
  bypass the template); answered as a normal SGLang chat completion.

Every answer comes back in the shape the engine's chat route gives for ``Engine.prepare``'s
flags, so ``Engine.extract`` and ``providers.base.turn_from_chat`` read it unchanged, and carries
the prompt ids sampled after (the path's own echo is checked against the ids sent). Pure: no I/O.

    call = token_in_request(TokenInPath.COMPLETIONS, chat, ids, engine=vllm, top_logprobs=0)
    raw, base = pool.post_json(call.path, call.body)
    answer = token_in_answer(TokenInPath.COMPLETIONS, chat, ids, raw)   # a vLLM chat completion
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from proxy.upstream.assistant_text import AssistantText, parse_assistant_text
from proxy.upstream.base import CaptureError, Engine, first_choice

TOKENS_ROUTE = "/v1/chat/completions/tokens"  # = infra/vllm_ext and the reference server
TOKEN_IDS_FIELD = "prompt_token_ids"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
GENERATE_PATH = "/generate"


class TokenInPath(str, Enum):
    CHAT_TOKENS = "chat_tokens"
    COMPLETIONS = "completions"
    SGLANG_GENERATE = "sglang_generate"
    CHAT_INPUT_IDS = "chat_input_ids"


# Which engine dialect's chat shape each path answers in (and so which Engine reads it).
PATH_ENGINE = {TokenInPath.CHAT_TOKENS: "vllm", TokenInPath.COMPLETIONS: "vllm",
               TokenInPath.SGLANG_GENERATE: "sglang", TokenInPath.CHAT_INPUT_IDS: "sglang"}


class TokenInError(ValueError):
    """This request cannot be sent on this token-in path (the proxy renders it normally instead)."""


@dataclass(frozen=True)
class TokenCall:
    path: str
    body: dict[str, Any]


def check_path(path: TokenInPath | str, engine_name: str) -> TokenInPath:
    """The path, if it answers in ``engine_name``'s dialect (a settings check at startup)."""
    try:
        mode = TokenInPath(path)
    except ValueError:
        raise TokenInError(f"unknown token-in path {path!r}; expected one of "
                           f"{', '.join(p.value for p in TokenInPath)}") from None
    if PATH_ENGINE[mode] != engine_name:
        raise TokenInError(f"token-in path {mode.value!r} is for {PATH_ENGINE[mode]}, not {engine_name}")
    return mode


# --- requests ----------------------------------------------------------------------------------

# Chat fields that mean the same on vLLM's completions route (sampling only).
_VLLM_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos",
                  "include_stop_str_in_output", "presence_penalty", "frequency_penalty", "repetition_penalty",
                  "min_tokens", "logit_bias", "skip_special_tokens", "spaces_between_special_tokens")
# Chat field -> SGLang sampling_params name.
_SGLANG_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                    "stop": "stop", "stop_token_ids": "stop_token_ids", "ignore_eos": "ignore_eos",
                    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                    "repetition_penalty": "repetition_penalty", "min_tokens": "min_new_tokens",
                    "skip_special_tokens": "skip_special_tokens", "seed": "sampling_seed",
                    "include_stop_str_in_output": "no_stop_trim", "logit_bias": "logit_bias"}


def _ids(prompt_ids: Any) -> list[int]:
    if (not isinstance(prompt_ids, list) or not prompt_ids
            or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in prompt_ids)):
        raise TokenInError("a token-in prompt must be a non-empty list of token ids")
    return list(prompt_ids)


def _max_tokens(chat: dict[str, Any]) -> int | None:
    value = chat.get("max_completion_tokens")
    return chat.get("max_tokens") if value is None else value


def _check_text_path(chat: dict[str, Any]) -> None:
    """What the chat route does beyond template + parsing, which a raw-text path cannot repeat."""
    if (chat.get("n") or 1) != 1:
        raise TokenInError("a token-in call samples one choice (n = 1)")
    choice = chat.get("tool_choice")
    if choice == "required" or isinstance(choice, dict):
        raise TokenInError("tool_choice 'required' or a named function is guided decoding on the chat route")
    fmt = chat.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise TokenInError("response_format other than text is guided decoding on the chat route")


def parses_tools(chat: dict[str, Any]) -> bool:
    """Whether the chat route would parse tool calls: tools given and tool_choice not "none"."""
    return bool(chat.get("tools")) and chat.get("tool_choice") != "none"


def token_in_request(path: TokenInPath | str, chat: dict[str, Any], prompt_ids: list[int], *, engine: Engine,
                     top_logprobs: int = 0, context_length: int | None = None) -> TokenCall:
    """The engine call sampling ``chat`` after ``prompt_ids``. ``context_length`` (the engine's,
    when known) sets SGLang's output limit for a request without one."""
    mode, ids = TokenInPath(path), _ids(prompt_ids)
    if mode is TokenInPath.CHAT_TOKENS:
        return TokenCall(TOKENS_ROUTE, {**engine.prepare(chat, top_logprobs=top_logprobs), TOKEN_IDS_FIELD: ids})
    if mode is TokenInPath.CHAT_INPUT_IDS:
        return TokenCall(CHAT_PATH, {**engine.prepare(chat, top_logprobs=top_logprobs), "input_ids": ids})
    _check_text_path(chat)
    if mode is TokenInPath.COMPLETIONS:
        return TokenCall(COMPLETIONS_PATH, completions_request(chat, ids, top_logprobs=top_logprobs))
    return TokenCall(GENERATE_PATH, generate_request(chat, ids, top_logprobs=top_logprobs,
                                                     context_length=context_length))


def completions_request(chat: dict[str, Any], prompt_ids: list[int], *, top_logprobs: int = 0) -> dict[str, Any]:
    """vLLM ``/v1/completions``: the ids as the prompt, the chat request's sampling fields."""
    body: dict[str, Any] = {"model": chat.get("model"), "prompt": _ids(prompt_ids),
                            # null, not absent: absent is 16 here, while chat's default is the room left
                            "max_tokens": _max_tokens(chat),
                            "logprobs": int(top_logprobs), "return_token_ids": True, "stream": False}
    body.update({k: chat[k] for k in _VLLM_SAMPLING if chat.get(k) is not None})
    return body


def generate_request(chat: dict[str, Any], prompt_ids: list[int], *, top_logprobs: int = 0,
                     context_length: int | None = None) -> dict[str, Any]:
    """SGLang ``/generate``: ``input_ids``, sampling_params in SGLang's names, logprob tuples with
    their token text."""
    ids = _ids(prompt_ids)
    limit = _max_tokens(chat)
    if limit is None and context_length is not None:
        # SGLang's chat default: the room left (it keeps one token of the context back).
        limit = max(int(context_length) - len(ids) - 1, 0)
    params: dict[str, Any] = {"max_new_tokens": limit}  # null: the scheduler fills the room left
    params.update({name: chat[k] for k, name in _SGLANG_SAMPLING.items() if chat.get(k) is not None})
    body: dict[str, Any] = {"input_ids": ids, "sampling_params": params, "return_logprob": True,
                            "return_text_in_logprobs": True, "stream": False}
    if top_logprobs:
        body["top_logprobs_num"] = int(top_logprobs)
    return body


# --- answers -----------------------------------------------------------------------------------

def token_in_answer(path: TokenInPath | str, chat: dict[str, Any], prompt_ids: list[int],
                    answer: dict[str, Any], *, top_logprobs: int = 0) -> dict[str, Any]:
    """The engine's answer as its chat route's completion, checked to have sampled after
    ``prompt_ids``; ``top_logprobs`` as given to ``token_in_request``."""
    mode, ids = TokenInPath(path), _ids(prompt_ids)
    if mode is TokenInPath.COMPLETIONS:
        return chat_from_completion(chat, ids, answer, top_logprobs=top_logprobs)
    if mode is TokenInPath.SGLANG_GENERATE:
        return chat_from_generate(chat, ids, answer, top_logprobs=top_logprobs)
    echo = answer.get(TOKEN_IDS_FIELD) if mode is TokenInPath.CHAT_TOKENS else \
        first_choice(answer).get("prompt_token_ids")
    _check_echo(echo, ids, required=True)
    return answer


def _check_echo(echo: Any, ids: list[int], *, required: bool) -> None:
    if echo is None and not required:
        return
    if not isinstance(echo, list):
        raise CaptureError("the engine did not echo the prompt ids of a token-in call")
    if [int(t) for t in echo] != ids:
        raise CaptureError("the engine sampled after other prompt ids than the token-in call sent "
                           f"({len(echo)} ids, {len(ids)} sent)")


def _entry(token: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {"token": token, "logprob": float(logprob), "bytes": list(token.encode("utf-8", errors="replace")),
            "top_logprobs": [{"token": t, "logprob": float(v), "bytes": list(t.encode("utf-8", errors="replace"))}
                             for t, v in top]}


def _usage(prompt_len: int, completion_len: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_len, "completion_tokens": completion_len,
            "total_tokens": prompt_len + completion_len}


def chat_from_completion(chat: dict[str, Any], prompt_ids: list[int], answer: dict[str, Any], *,
                         top_logprobs: int = 0) -> dict[str, Any]:
    """A vLLM ``/v1/completions`` answer to a token-id prompt -> vLLM's chat completion."""
    choice = first_choice(answer)
    text, ids = choice.get("text"), choice.get("token_ids")
    if not isinstance(text, str) or not isinstance(ids, list):
        raise CaptureError("the completions answer has no text or token_ids; the token-in path needs "
                           "return_token_ids (vLLM >= 0.10.2)")
    _check_echo(choice.get("prompt_token_ids"), prompt_ids, required=False)
    lps = choice.get("logprobs") or {}
    tokens, values, tops = lps.get("tokens"), lps.get("token_logprobs"), lps.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) or not len(tokens) == len(ids) == len(values):
        raise CaptureError(f"the completions logprobs do not align with its {len(ids)} token ids")
    content = []
    for i, (token, value) in enumerate(zip(tokens, values)):
        alternatives = (tops[i] if isinstance(tops, list) and i < len(tops) else None) or {}
        # The completions entry holds the sampled token and the k best; chat lists the k best, best first.
        best = sorted(alternatives.items(), key=lambda kv: -kv[1])[:top_logprobs]
        content.append(_entry(str(token), value, best))
    parsed = parse_assistant_text(text, parse_tools=parses_tools(chat))
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in parsed.tool_calls]
    message["reasoning"] = parsed.reasoning
    out_choice = {"index": 0, "message": message, "logprobs": {"content": content},
                  "finish_reason": _finish(parsed, choice.get("finish_reason")),
                  "stop_reason": choice.get("stop_reason"), "token_ids": [int(t) for t in ids]}
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(answer.get("created") or time.time()), "model": answer.get("model", chat.get("model")),
            "choices": [out_choice], "usage": _usage(len(prompt_ids), len(ids)),
            "prompt_logprobs": choice.get("prompt_logprobs"), "prompt_token_ids": list(prompt_ids)}


def _finish(parsed: AssistantText, engine_finish: Any) -> str:
    # As vLLM's chat route: tool calls turn a normal stop into "tool_calls"; a length cut stays.
    finish = str(engine_finish or "stop")
    return "tool_calls" if parsed.tool_calls and finish == "stop" else finish


def chat_from_generate(chat: dict[str, Any], prompt_ids: list[int], answer: dict[str, Any], *,
                       top_logprobs: int = 0) -> dict[str, Any]:
    """An SGLang ``/generate`` answer -> SGLang's chat completion (``return_prompt_token_ids`` and
    ``return_meta_info`` fields, as ``SGLangEngine.prepare`` asks for them)."""
    meta = answer.get("meta_info")
    text = answer.get("text")
    triples = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(text, str) or not isinstance(triples, list):
        raise CaptureError("the /generate answer has no text or meta_info.output_token_logprobs; "
                           "the token-in path needs return_logprob")
    triples = [list(t) + [None] * (3 - len(t)) if isinstance(t, list) and len(t) >= 2 else t for t in triples]
    ids = answer.get("output_ids")
    if not isinstance(ids, list):
        ids = [t[1] for t in triples if isinstance(t, list)]
    if len(triples) != len(ids) or any(not isinstance(t, list) or t[1] != i for t, i in zip(triples, ids)):
        raise CaptureError(f"the /generate logprobs do not align with its {len(ids)} token ids")
    tops = meta.get("output_top_logprobs") or []
    content = []
    for i, (value, _, token) in enumerate(triples):
        best = [(str(t[2] or ""), t[0]) for t in (tops[i] if i < len(tops) and tops[i] else [])][:top_logprobs]
        content.append(_entry(str(token or ""), value, best))
    parsed = parse_assistant_text(text, parse_tools=parses_tools(chat))
    finish_info = meta.get("finish_reason") or {"type": "stop", "matched": None}
    kind = str(finish_info.get("type") or "stop")
    calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "index": i, "type": "function",
              "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(parsed.tool_calls)]
    finish = _finish(parsed, kind)
    if finish == "tool_calls":
        # SGLang's chat route rewrites the finish reason in place, dropping the matched stop.
        finish_info, matched = {"type": "tool_calls", "matched": None}, None
    else:
        matched = finish_info.get("matched") if kind == "stop" else None
    weight_version = meta.get("weight_version", "default")
    resp_id = f"chatcmpl-{uuid.uuid4().hex}"
    out_choice = {
        "index": 0,
        "message": {"role": "assistant", "content": parsed.content, "reasoning_content": parsed.reasoning or None,
                    "tool_calls": calls or None},
        "logprobs": {"content": content}, "finish_reason": finish, "matched_stop": matched,
        "prompt_token_ids": list(prompt_ids),
        "meta_info": {"id": resp_id, "finish_reason": finish_info, "prompt_tokens": len(prompt_ids),
                      "completion_tokens": len(ids), "cached_tokens": meta.get("cached_tokens", 0),
                      "output_token_logprobs": [[float(v), int(t), tok] for v, t, tok in triples],
                      "weight_version": weight_version},
    }
    return {"id": resp_id, "object": "chat.completion", "created": int(time.time()), "model": chat.get("model"),
            "choices": [out_choice], "usage": _usage(len(prompt_ids), len(ids)),
            "metadata": {"weight_version": weight_version}}
