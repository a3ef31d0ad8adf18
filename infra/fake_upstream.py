"""An instant stand-in for vLLM, for proxy benchmarks and upstream-fault tests.

It answers in vLLM's dialect (``prompt_token_ids``, ``choices[].token_ids``, aligned logprobs)
without any model, so it is never the bottleneck. Behaviour is chosen by the request's
``model``:

    fake                 a short text answer ("ok")
    tools                one tool call (the first tool offered, arguments {})
    agent                a coding agent's turn as vLLM writes it: a tool call of the first tool
                         offered with JSON arguments, 48 sampled ids with their logprobs (tokens,
                         bytes), ``prompt_logprobs``/``kv_transfer_params`` nulls (benchmarks)
    reject-<status>      an error answer with that 4xx status
    fail-<status>        an error answer with that 5xx status
    slow-<ms>            the normal answer after <ms> milliseconds
    slowfail-<ms>        a 500 after <ms> milliseconds
    no-ids               an answer without token ids (a server too old for capture)
    close                the connection is closed without an answer
    abort                an answer cut by the engine (finish_reason "abort": it aborted the request)

Prompt ids grow with the request (one id per 4 bytes of messages) so large prompts cost what
they would cost to record.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterable

import orjson

RESPONSE_IDS = [101, 102, 103]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    if environ["REQUEST_METHOD"] == "GET":
        if path in ("/health", "/v1/models"):
            return _reply(start_response, 200, {"object": "list", "data": [
                {"id": "fake", "object": "model", "owned_by": "vllm", "max_model_len": 131072,
                 "root": "/srv/models/fake", "parent": None, "permission": []}]})
        return _reply(start_response, 404, {"error": {"message": "not found", "code": 404}})
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _reply(start_response, 400, {"error": {"message": "bad json", "type": "BadRequestError", "code": 400}})
    if path == "/tokenize":
        return _reply(start_response, 200, {"count": max(1, len(raw) // 4), "max_model_len": 131072})
    model = str(body.get("model") or "fake")
    kind, _, arg = model.partition("-")
    if kind in ("reject", "fail"):
        status = int(arg or (400 if kind == "reject" else 500))
        return _reply(start_response, status, {"error": {"message": f"upstream {model}", "type": "BadRequestError",
                                                         "code": status}})
    if kind in ("slow", "slowfail"):
        time.sleep(int(arg or 0) / 1000.0)
        if kind == "slowfail":
            return _reply(start_response, 500, {"error": {"message": "upstream failed late", "code": 500}})
    if kind == "close":
        raise ConnectionAbortedError("closing without an answer")
    if model == "agent":
        return _reply(start_response, 200, _agent_turn(body, raw))
    return _reply(start_response, 200, _completion(body, raw, model))


def _completion(body: dict[str, Any], raw: bytes, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "ok", "reasoning": None}
    finish = "stop"
    tools = body.get("tools") or []
    if model == "tools" and tools:
        name = tools[0].get("function", {}).get("name", "tool")
        message = {"role": "assistant", "content": None, "reasoning": None,
                   "tool_calls": [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
                                   "function": {"name": name, "arguments": "{}"}}]}
        finish = "tool_calls"
    if model == "abort":
        finish = "abort"
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "stop_reason": None}
    n_prompt = max(1, len(raw) // 4)
    out: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                           "created": int(time.time()), "model": model, "choices": [choice],
                           "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(RESPONSE_IDS),
                                     "total_tokens": n_prompt + len(RESPONSE_IDS)}}
    if model != "no-ids":
        choice["token_ids"] = RESPONSE_IDS
        choice["logprobs"] = {"content": [{"token": f"t{t}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                                          for t in RESPONSE_IDS]}
        out["prompt_token_ids"] = list(range(n_prompt))
    return out


AGENT_ARGUMENTS = '{"command": "python -m pytest tests/test_version.py -q -k prerelease", "timeout": 120}'
AGENT_IDS = list(range(151_000, 151_048))  # 48 sampled tokens: the call's markup and its arguments


def _agent_turn(body: dict[str, Any], raw: bytes) -> dict[str, Any]:
    tools = body.get("tools") or [{}]
    name = (tools[0].get("function") or {}).get("name", "bash") if isinstance(tools[0], dict) else "bash"
    n_prompt = max(1, len(raw) // 4)
    pieces = [AGENT_ARGUMENTS[i::len(AGENT_IDS)] for i in range(len(AGENT_IDS))]  # any split will do
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": "agent", "prompt_logprobs": None, "prompt_token_ids": list(range(1000, 1000 + n_prompt)),
        "kv_transfer_params": None, "service_tier": None, "system_fingerprint": None,
        "choices": [{
            "index": 0, "finish_reason": "tool_calls", "stop_reason": None, "token_ids": AGENT_IDS,
            "message": {"role": "assistant", "content": None, "refusal": None, "annotations": None, "audio": None,
                        "function_call": None, "reasoning": None, "reasoning_content": None,
                        "tool_calls": [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
                                        "function": {"name": name, "arguments": AGENT_ARGUMENTS}}]},
            "logprobs": {"content": [{"token": p, "logprob": -0.0123 * (i % 7), "bytes": list(p.encode()),
                                      "top_logprobs": []} for i, p in enumerate(pieces)]},
        }],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(AGENT_IDS),
                  "total_tokens": n_prompt + len(AGENT_IDS), "prompt_tokens_details": None},
    }


def _reply(start_response: Callable[..., Any], status: int, payload: dict[str, Any]) -> list[bytes]:
    data = orjson.dumps(payload)
    start_response(f"{status} X", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
