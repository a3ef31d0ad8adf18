"""OpenAI Chat Completions, both directions (pure: no I/O).

Requests are close to the engine's own dialect: normalising means validating, renaming the
``developer`` role and ``max_completion_tokens``, and dropping OpenAI-platform fields an
inference server does not know. Responses are rebuilt from the engine's answer without the
token-id fields the proxy added, in the shape the official SDK parses. Streams are
synthesised chunk by chunk, always ending with a ``finish_reason`` chunk (opencode loops
forever without one) and ``[DONE]``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.errors import BadRequest, ProxyError, UnsupportedFeature
from proxy.providers.base import (
    Parsed,
    ProviderBase,
    Route,
    Turn,
    assistant_message,
    logprob_entries,
    new_id,
    openai_error,
    root_generate,
    shared_models_route,
)
from proxy.providers.fields import opt_bool, opt_int, reasoning_effort, require_model, require_object, top_logprobs
from proxy.sse import data_event, done_event

NAME = "openai_chat"

# Sampling fields the Responses API lacks and the engines' own extras a harness may set
# deliberately (through the SDK's extra_body): forwarded as they are, from Responses calls too.
SAMPLING_EXTRAS = (
    "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias",
    "top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "ignore_eos",
    "chat_template_kwargs", "skip_special_tokens", "include_stop_str_in_output",
)
# Sampling/tooling fields forwarded upstream as they are.
_FORWARD = (
    "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "response_format", "reasoning_effort",
    *SAMPLING_EXTRAS,
    # an assistant prefill: the engine continues the last message instead of opening a new turn
    "continue_final_message", "add_generation_prompt",
)
_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}

# The engines' own extras that change what is sampled (guided decoding) or what is answered
# (token ids, prompt logprobs, the prompt echoed): none is passed on, and the answer is rebuilt
# without such fields, so asked for they are refused -- a caller would otherwise get
# unconstrained text, or no ids, without a word (null or false asks for nothing; a
# ``prompt_logprobs`` of 0 does ask).
_GUIDED = "is guided decoding, not supported here: constrain the output with response_format " \
          "(json_object or json_schema)"
_TOKEN_LEVEL = "is not supported here: the answer carries no token ids or prompt logprobs (the proxy " \
               "records every call's token ids and logprobs itself)"
_UNSERVED = {
    **dict.fromkeys(("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
                     "regex", "ebnf"), _GUIDED),
    **dict.fromkeys(("return_token_ids", "return_tokens_as_token_ids", "prompt_logprobs",
                     "return_prompt_token_ids", "return_meta_info"), _TOKEN_LEVEL),
    "echo": "is not supported here: the answer holds only the sampled turn, never the prompt",
    # vLLM's own ways to change the prompt or constrain sampling, never passed on (the engine may
    # be SGLang, which knows none of them): dropped, the policy sampled otherwise than asked.
    **dict.fromkeys(("chat_template", "documents", "add_special_tokens", "truncate_prompt_tokens"),
                    "is not supported here: the prompt is the engine's chat template's rendering of the messages "
                    "(set its switches with chat_template_kwargs)"),
    **dict.fromkeys(("allowed_token_ids", "bad_words", "logits_processors", "vllm_xargs"),
                    "is not supported here: sampling is constrained only by stop, stop_token_ids, logit_bias and "
                    "the sampling parameters"),
    # Not a sample of the policy: the trajectory would train on what beam search or a best-of-n
    # pick chose as if the model had sampled it.
    "use_beam_search": "is not supported here: a trajectory must hold what the policy sampled",
}


def normalize(body: Any) -> dict[str, Any]:
    """Validate a Chat Completions request and return the engine (non-streaming) request."""
    body = require_object(body)
    model = require_model(body, "you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    out_messages = []
    called: set[str] = set()  # the ids of the tool calls made so far
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in _ROLES:
            raise BadRequest(f"messages[{i}] must be an object with a valid 'role'", param=f"messages[{i}].role")
        _check_message(m, i, called)
        if m["role"] == "developer":
            m = {**m, "role": "system"}
        out_messages.append(m)
    if opt_int(body, "n", minimum=1) not in (1, None):  # (a bool or an object is no count: the 400 says so)
        raise BadRequest("only n=1 is supported (each sample is its own session)", param="n")
    for flag in ("stream", "continue_final_message", "add_generation_prompt"):
        opt_bool(body, flag)  # null is the default (for stream: the SDK's type and the spec allow it)
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise BadRequest("'tools' must be an array of objects", param="tools")
    for legacy in ("functions", "function_call"):  # the engines read tools only: the model would never see them
        if body.get(legacy) is not None:
            raise BadRequest(f"'{legacy}' (deprecated) is not supported here: send 'tools' and 'tool_choice'",
                             param=legacy)
    # Asked for, these change what the caller gets back: refused rather than quietly ignored.
    if body.get("web_search_options") is not None:
        raise UnsupportedFeature("web search is not supported: the engine searches nothing (give the agent a "
                                 "search tool instead)", param="web_search_options")
    refuse_unserved(body)
    modalities = body.get("modalities")
    if body.get("audio") is not None or (isinstance(modalities, list) and set(modalities) - {"text"}):
        raise UnsupportedFeature("audio output is not supported: this model answers in text",
                                 param="audio" if body.get("audio") is not None else "modalities")
    out: dict[str, Any] = {"model": model, "messages": out_messages}
    for key in _FORWARD:
        if key in body and body[key] is not None:
            out[key] = body[key]
    if isinstance(choice := out.get("tool_choice"), dict) and choice.get("type") == "allowed_tools":
        out["tools"], out["tool_choice"] = _allowed_tools(choice, out.get("tools") or [])
    if tools == []:
        # Legal for OpenAI, rejected by vLLM; so is tool_choice without tools. A choice that
        # forces a call ("required", a named function) cannot be met with none: refused as the
        # engine refuses it without `tools`, not answered in text as if never asked.
        if out.get("tool_choice") not in (None, "auto", "none"):
            raise BadRequest("When using `tool_choice`, `tools` must be set: tool_choice "
                             f"{json.dumps(out['tool_choice'])} forces a tool call, and 'tools' is empty",
                             param="tool_choice")
        out.pop("tools", None)
        out.pop("tool_choice", None)
    max_tokens = opt_int(body, "max_tokens", minimum=1)
    newer = opt_int(body, "max_completion_tokens", minimum=1)  # the newer name wins when both are given
    if newer is not None or max_tokens is not None:
        out["max_tokens"] = newer if newer is not None else max_tokens
    if opt_bool(body, "logprobs") is not True and top_logprobs(body, "top_logprobs"):
        raise BadRequest("when using `top_logprobs`, `logprobs` must be set to true", param="top_logprobs")
    reasoning_effort(body.get("reasoning_effort"), "reasoning_effort")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise BadRequest("'stream_options' must be an object", param="stream_options")
    return out


def refuse_unserved(body: dict[str, Any]) -> None:
    """The engines' extras that are neither passed on nor answered, when asked for (Chat and
    Responses calls alike: either reaches the engine as a chat request)."""
    for key, why in _UNSERVED.items():
        if (value := body.get(key)) is not None and value is not False:
            raise UnsupportedFeature(f"'{key}' {why}", param=key)
    if body.get("best_of") not in (None, 1):
        raise UnsupportedFeature("'best_of' is not supported here: a trajectory must hold what the policy sampled, "
                                 "not the best of several samples", param="best_of")


def _allowed_tools(choice: dict[str, Any], tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """OpenAI's ``allowed_tools`` choice, which the engines do not know (vLLM refuses it): the
    engine gets only the allowed tools, chosen from as ``mode`` says -- as the Responses
    translation does -- rather than the caller a 400 for a valid request."""
    spec = choice.get("allowed_tools")
    if not isinstance(spec, dict) or not isinstance(spec.get("tools"), list):
        raise BadRequest("tool_choice.allowed_tools.tools must be an array of tools",
                         param="tool_choice.allowed_tools.tools")
    mode = spec.get("mode")
    if mode not in ("auto", "required"):
        raise BadRequest("tool_choice.allowed_tools.mode must be 'auto' or 'required'",
                         param="tool_choice.allowed_tools.mode")
    names = {t["function"].get("name") for t in spec["tools"] if isinstance(t, dict) and isinstance(t.get("function"), dict)}
    kept = [t for t in tools if isinstance(t.get("function"), dict) and t["function"].get("name") in names]
    if not kept:
        raise BadRequest("tool_choice.allowed_tools.tools names none of the request's tools",
                         param="tool_choice.allowed_tools.tools")
    return kept, mode


def _check_message(m: dict[str, Any], i: int, called: set[str]) -> None:
    """What an engine would refuse or misread (a number as content, a tool result for no call).
    ``called``: the ids of the earlier assistant messages' tool calls (this one's are added)."""
    role, content = m["role"], m.get("content")
    nullable = role in ("assistant", "tool", "function")  # a call's turn; an empty tool output
    if not (isinstance(content, (str, list)) or (nullable and content is None)):
        need = "a string, an array of content parts" + (" or null" if nullable else "")
        raise BadRequest(f"messages[{i}].content must be {need}", param=f"messages[{i}].content")
    if m.get("function_call") is not None:  # the engines read tool_calls only: the model would never see it
        raise BadRequest(f"messages[{i}].function_call (deprecated) is not supported here: send the call as "
                         "tool_calls", param=f"messages[{i}].function_call")
    if role == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str):
            raise BadRequest(f"messages[{i}].tool_call_id is required for a tool message",
                             param=f"messages[{i}].tool_call_id")
        if call_id not in called:  # OpenAI's 400; the engine would render it as the output of a call never made
            raise BadRequest(f"Invalid parameter: messages with role 'tool' must be a response to a preceding "
                             f"message with 'tool_calls' (messages[{i}].tool_call_id {call_id!r} answers none).",
                             param=f"messages[{i}].tool_call_id")
    elif role == "assistant" and isinstance(calls := m.get("tool_calls"), list):
        for call in calls:  # (a loop, not a generator: this runs for every turn of a long conversation)
            if isinstance(call, dict) and isinstance(call_id := call.get("id"), str):
                called.add(call_id)


def finish_reason(turn: Turn) -> str:
    reason = turn.finish_reason
    return reason if reason in ("stop", "length", "tool_calls", "content_filter") else "stop"


def usage(turn: Turn) -> dict[str, int]:
    return {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
            "total_tokens": turn.total_tokens}


class OpenAIChat(ProviderBase):
    name = NAME

    def match(self, method: str, path: str) -> Route | None:
        if method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
            return Route("generate", NAME)
        return shared_models_route(method, path, NAME) or root_generate(method, path, NAME)

    def claims_body(self, body: Any) -> bool:
        return isinstance(body, dict) and "messages" in body

    def parse(self, body: Any, **context: Any) -> Parsed:
        chat = normalize(body)
        opts = body.get("stream_options")
        return Parsed(chat=chat, stream=bool(body.get("stream")), model=body.get("model"),
                      top_logprobs=top_logprobs(body, "top_logprobs"), extra={
            "logprobs": bool(body.get("logprobs")),
            "include_usage": isinstance(opts, dict) and bool(opts.get("include_usage")),
        })

    def render(self, turn: Turn, parsed: Parsed) -> dict[str, Any]:
        message = assistant_message(turn)
        message["refusal"] = None
        return {
            "id": turn.id, "object": "chat.completion", "created": turn.created, "model": turn.model,
            "choices": [{"index": 0, "message": message, "logprobs": _logprobs(turn, parsed),
                         "finish_reason": finish_reason(turn)}],
            "usage": usage(turn), "system_fingerprint": None,
        }

    def stream(self, parsed: Parsed) -> "ChatStream":
        return ChatStream(parsed)

    def error(self, err: ProxyError) -> dict[str, Any]:
        return openai_error(err)


def _logprobs(turn: Turn, parsed: Parsed) -> dict[str, Any] | None:
    if not parsed.extra.get("logprobs") or turn.logprobs is None:
        return None
    return {"content": logprob_entries(turn, parsed.top_logprobs), "refusal": None}


class ChatStream:
    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self._base: dict[str, Any] | None = None

    content_type = "text/event-stream"

    def _chunk(self, base: dict[str, Any], delta: dict[str, Any], finish: str | None = None,
               logprobs: Any = None) -> bytes:
        return data_event({**base, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                                "finish_reason": finish}]})

    def _head_base(self, response_id: str, created: int) -> dict[str, Any]:
        base = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                "model": self.parsed.model, "system_fingerprint": None}
        if self.parsed.extra.get("include_usage"):
            base["usage"] = None
        return base

    def head(self, turn: Turn | None = None) -> list[bytes]:
        # The engine's id once the answer is known (as the non-streamed answer has it).
        self._base = (self._head_base(turn.id, turn.created) if turn is not None and turn.id
                      else self._head_base(new_id("chatcmpl"), int(time.time())))
        return [self._chunk(self._base, {"role": "assistant"})]

    def keepalive(self) -> bytes | None:
        return b": keepalive\n\n"  # an SSE comment: every client skips it

    def body(self, response: dict[str, Any], turn: Turn) -> list[bytes]:
        out = [] if self._base is not None else self.head(turn)
        base = {**self._base, "model": response["model"]}  # type: ignore[dict-item]
        choice = response["choices"][0]
        msg = choice["message"]
        # Every sampled token's logprob goes out once: on the text's chunk, else (a turn of tool
        # calls or reasoning only) on the first chunk after the head, as vLLM streams them.
        logprobs = choice.get("logprobs")
        pending = None if msg.get("content") else logprobs
        deltas: list[dict[str, Any]] = []
        if msg.get("reasoning_content"):
            deltas.append({"reasoning_content": msg["reasoning_content"]})
        if msg.get("content"):
            deltas.append({"content": msg["content"]})
        for i, call in enumerate(msg.get("tool_calls") or []):
            fn = call["function"]
            deltas.append({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                           "function": {"name": fn["name"], "arguments": ""}}]})
            deltas.append({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
        for delta in deltas:
            mine = logprobs if "content" in delta else pending
            pending = None if mine is pending else pending
            out.append(self._chunk(base, delta, logprobs=mine))
        out.append(self._chunk(base, {}, finish=choice["finish_reason"], logprobs=pending))
        if self.parsed.extra.get("include_usage"):
            out.append(data_event({**base, "choices": [], "usage": response["usage"]}))
        out.append(done_event())
        return out

    def error(self, err: ProxyError) -> list[bytes]:
        return [data_event(OpenAIChat().error(err)), done_event()]
