"""OpenAI Responses, both directions (pure: no I/O).

Input items (messages incl. ``developer``, ``function_call``/``function_call_output``,
``custom_tool_call``, ``reasoning`` with our own ``encrypted_content``) become chat messages;
``instructions`` becomes the system message (not carried over by ``previous_response_id``,
whose stored history the app passes in). Flat function tools, ``namespace`` tools (flattened,
the namespace restored on output) and ``custom`` tools (one string argument) are translated;
hosted tools (web search, ...) cannot run on a local engine and are dropped; MCP tools (the
agent's own, through a server the vendor calls) are refused: tools and ``tool_choice`` in
``openai_responses_tools``, input items in ``openai_responses_items``, the event stream in
``openai_responses_stream``. ``truncation: "auto"``: an input over the engine's context loses its
oldest messages until it fits, as OpenAI drops "items from the beginning of the conversation"
(``Parsed.truncate_input``; the record holds the request as sent, and says how many went); with
"disabled" (the default) it is the context error a harness compacts on.
"""

from __future__ import annotations

import time
from typing import Any

from proxy.errors import BadRequest, ContextOverflow, NotFound, ProxyError, UnsupportedFeature
from proxy.providers import openai_responses_items as stored_items
from proxy.providers.base import (
    Parsed,
    ProviderBase,
    ProviderScope,
    Route,
    Turn,
    logprob_entries,
    new_id,
    openai_error,
    root_generate,
)
from proxy.providers.fields import (
    opt_bool,
    opt_int,
    opt_number,
    reasoning_effort,
    require_model,
    require_object,
    top_logprobs,
)
from proxy.providers.openai_chat import SAMPLING_EXTRAS, refuse_unserved
from proxy.providers.openai_responses_items import encrypt_reasoning, to_messages
from proxy.providers.openai_responses_stream import ResponsesStream
from proxy.providers.openai_responses_tools import _tool_choice, _tools

NAME = "openai_responses"
_PATHS = ("/v1/responses", "/responses")
_COUNT_PATHS = tuple(p + "/input_tokens" for p in _PATHS)
_STORED_ROUTES = {("GET", ""): "stored", ("DELETE", ""): "delete_stored", ("GET", "input_items"): "input_items",
                  ("POST", "cancel"): "cancel_stored"}
_LOGPROBS = "message.output_text.logprobs"  # the include that asks for them
# What ``include`` may ask for (the SDK's ResponseIncludable). The hosted tools' and input
# images' ones have nothing to add here; any other value is OpenAI's 400, not ignored: a
# misspelt logprobs include ("message.output_text.logprob") answered without logprobs, unsaid.
_INCLUDABLE = (_LOGPROBS, "reasoning.encrypted_content", "file_search_call.results", "web_search_call.results",
               "web_search_call.action.sources", "message.input_image.image_url",
               "computer_call_output.output.image_url", "code_interpreter_call.outputs")
_INPUT_OVERFLOW = "Your input exceeds the context window of this model. Please adjust your input and try again."


def to_chat(body: Any, history: list[dict[str, Any]] | None = None, *, counting: bool = False,
            referenced: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``counting``: for ``/responses/input_tokens``, where the model is optional and
    ``previous_response_id`` alone is a valid input; ``referenced``: the stored items the
    input's ``item_reference`` items name."""
    body = require_object(body)
    # Asked for, these change what the caller gets back: refused rather than quietly ignored.
    if body.get("background"):
        raise UnsupportedFeature("background responses are not supported: each call is answered as it runs",
                                 param="background")
    if body.get("conversation") is not None:
        raise UnsupportedFeature("conversation objects are not supported: chain calls with previous_response_id",
                                 param="conversation")
    if body.get("max_tool_calls") is not None:
        raise UnsupportedFeature("max_tool_calls is not supported: the engine samples the calls the model makes "
                                 "(parallel_tool_calls: false limits a turn to one)", param="max_tool_calls")
    if body.get("prompt") is not None:
        raise UnsupportedFeature("stored prompt templates are not supported: send instructions and input",
                                 param="prompt")
    model = (require_model(body, "Missing required parameter: 'model'.")
             if not counting or body.get("model") is not None else None)
    _check_types(body)
    raw = stored_items.resolve(body.get("input"), referenced or {})
    if isinstance(raw, str):
        own: list[Any] = [{"type": "message", "role": "user", "content": raw}]
    elif isinstance(raw, list) and raw:
        own = raw
    elif counting and raw in (None, []) and history:
        own = []
    else:
        raise BadRequest("'input' must be a string or a non-empty array of items", param="input")
    instructions = body.get("instructions")
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    messages += history or []
    start = len(messages)
    messages += to_messages(own)
    _outputs_answer_calls(messages)
    chat: dict[str, Any] = {"model": model, "messages": messages}
    if (max_output := opt_int(body, "max_output_tokens", minimum=1)) is not None:
        chat["max_tokens"] = max_output
    for key in ("temperature", "top_p"):
        if opt_number(body, key) is not None:
            chat[key] = body[key]
    # The engines' sampling extras (top_k, seed, stop, ... through extra_body) as a Chat call
    # passes them on; they were dropped, and the policy sampled otherwise than asked, unsaid.
    # The extras nothing answers here (token ids, guided decoding) are refused as from Chat.
    refuse_unserved(body)
    chat.update({key: body[key] for key in SAMPLING_EXTRAS if body.get(key) is not None})
    if not isinstance(chat.get("chat_template_kwargs", {}), dict):  # (merged with the effort's below)
        raise BadRequest("'chat_template_kwargs' must be an object", param="chat_template_kwargs")
    tools, namespaces, customs = _tools(body.get("tools"))
    if tools:
        choice = _tool_choice(body.get("tool_choice"), {t["function"]["name"] for t in tools})
        allowed = choice.pop("allowed", None)
        chat["tools"] = tools if allowed is None else [t for t in tools if t["function"]["name"] in allowed]
        chat.update(choice)
        if not chat["tools"]:
            raise BadRequest("tool_choice.tools names none of the request's tools", param="tool_choice.tools")
        if body.get("parallel_tool_calls") is False:
            chat["parallel_tool_calls"] = False
    elif body.get("tool_choice") is not None and not body.get("tools"):  # (hosted tools only: theirs to choose)
        # A named tool among none is the client's 400, as OpenAI answers it; so is "required"
        # with no tool at all (the forced call would otherwise be answered in text).
        if _tool_choice(body["tool_choice"], set()).get("tool_choice") == "required":
            raise BadRequest("Tool choice 'required' must be specified with 'tools' parameter.", param="tool_choice")
    reasoning = body.get("reasoning") or {}
    if reasoning.get("effort"):
        chat["reasoning_effort"] = reasoning["effort"]
        # (the caller's own template switches, when given, win over the effort's)
        chat["chat_template_kwargs"] = {"enable_thinking": reasoning["effort"] != "none",
                                        **chat.get("chat_template_kwargs", {})}
    fmt = _text_format(body)
    if fmt["type"] == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    elif fmt["type"] == "json_object":
        chat["response_format"] = {"type": "json_object"}
    include = body.get("include")
    if include is None:
        include = []
    elif not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise BadRequest("'include' must be an array of strings", param="include")
    for value in include:
        if value not in _INCLUDABLE:
            raise BadRequest(f"Invalid value: {value!r}. Supported values are: {', '.join(map(repr, _INCLUDABLE))}.",
                             param="include")
    return chat, {
        "namespaces": namespaces, "customs": sorted(customs), "own_messages_from": start,
        "instructions": instructions if isinstance(instructions, str) else None,
        "store": body.get("store", True) is not False,
        "encrypt_reasoning": "reasoning.encrypted_content" in include,
        "logprobs": _LOGPROBS in include,
        "previous_response_id": body.get("previous_response_id"),
        "text_format": fmt,
        "input": own,  # listed by input_items once stored (ids given then, when it is)
    }


def _text_format(body: dict[str, Any]) -> dict[str, Any]:
    """``text.format``: text (the default), json_object or json_schema."""
    text = body.get("text")
    if text is None:
        return {"type": "text"}
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None and isinstance(text, dict):
        return {"type": "text"}
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise BadRequest("text.format.type must be text, json_object or json_schema", param="text.format")
    if fmt["type"] == "json_schema":  # as OpenAI answers: a schema without its name or body is the client's 400
        if not isinstance(fmt.get("name"), str) or not fmt["name"]:
            raise BadRequest("Missing required parameter: 'text.format.name'.", param="text.format.name")
        if not isinstance(fmt.get("schema"), dict):
            raise BadRequest("Missing required parameter: 'text.format.schema'.", param="text.format.schema")
    return fmt


def _check_types(body: dict[str, Any]) -> None:
    """Fields whose wrong type would otherwise be read as a default (``store: "no"`` as true)."""
    for key in ("store", "parallel_tool_calls"):
        opt_bool(body, key)
    for key in ("metadata", "reasoning"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise BadRequest(f"'{key}' must be an object", param=key)
    reasoning_effort((body.get("reasoning") or {}).get("effort"), "reasoning.effort")
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        raise BadRequest("'instructions' must be a string", param="instructions")  # not dropped unread
    if body.get("truncation") not in (None, "auto", "disabled"):
        raise BadRequest("'truncation' must be 'auto' or 'disabled'", param="truncation")


def output_items(turn: Turn, parsed: Parsed) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.reasoning:
        item = {"type": "reasoning", "id": new_id("rs"), "summary": [],
                "content": [{"type": "reasoning_text", "text": turn.reasoning}], "status": "completed"}
        if parsed.extra.get("encrypt_reasoning"):
            item["encrypted_content"] = encrypt_reasoning(turn.reasoning)
        items.append(item)
    if turn.content or not (turn.tool_calls or turn.reasoning):
        items.append({"type": "message", "id": new_id("msg"), "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": turn.content or "", "annotations": [],
                                   "logprobs": logprob_entries(turn, parsed.top_logprobs)
                                   if parsed.extra.get("logprobs") else []}]})
    for c in turn.tool_calls:
        if c.name in parsed.extra.get("customs", ()):
            item = {"type": "custom_tool_call", "id": new_id("ctc"), "call_id": c.id, "name": c.name,
                    "input": str(c.arguments_object().get("input", "")), "status": "completed"}
        else:
            item = {"type": "function_call", "id": new_id("fc"), "call_id": c.id, "name": c.name,
                    "arguments": c.arguments, "status": "completed"}
        if c.name in parsed.extra.get("namespaces", {}):
            item["namespace"] = parsed.extra["namespaces"][c.name]
        items.append(item)
    return items


def usage(turn: Turn) -> dict[str, Any]:
    return {"input_tokens": turn.prompt_tokens, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": turn.completion_tokens, "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
            "total_tokens": turn.total_tokens}


class OpenAIResponses(ProviderBase):
    name = NAME
    stateful = True  # previous_response_id: the session's stored responses

    def match(self, method: str, path: str) -> Route | None:
        if method == "POST" and path in _PATHS:
            return Route("generate", NAME)
        if method == "POST" and path in _COUNT_PATHS:
            return Route("count_tokens", NAME)
        for prefix in _PATHS:
            response_id, _, sub = path[len(prefix) + 1:].partition("/")
            if not path.startswith(prefix + "/") or not response_id or "/" in sub:
                continue
            kind = _STORED_ROUTES.get((method, sub))
            if kind:
                return Route(kind, NAME, item_id=response_id)
        return root_generate(method, path, NAME)

    def claims_body(self, body: Any) -> bool:
        return isinstance(body, dict) and "input" in body

    def claims_path(self, path: str) -> bool:
        return path.startswith(tuple(p + "/" for p in _PATHS))

    def context(self, body: Any, scope: ProviderScope) -> dict[str, Any]:
        """The stored conversation a request continues (``previous_response_id``)."""
        if not isinstance(body, dict):
            return {}
        context: dict[str, Any] = {}
        ids = stored_items.references(body.get("input"))
        if ids:  # a stored item replayed by its id
            context["referenced"] = scope.responses.items(scope.session_id, ids)
        prev = body.get("previous_response_id")
        if prev is None:
            return context
        stored = scope.responses.load(scope.session_id, str(prev))
        if stored is None:
            err = BadRequest(f"Previous response with id '{prev}' not found.", param="previous_response_id")
            err.code = "previous_response_not_found"
            raise err
        return {**context, "history": stored["conversation"]}

    def completed(self, parsed: Parsed, response: dict[str, Any], sampled: dict[str, Any],
                  scope: ProviderScope) -> None:
        if parsed.extra.get("store"):  # `store: false` keeps nothing
            own = stored_items.own_input(parsed.extra["input"])
            scope.responses.save(scope.session_id, response, stored_conversation(parsed, sampled), own,
                                 stored_items.indexed(own, response["output"]))

    def count_tokens_chat(self, body: Any, route: Route, *, history: list[dict[str, Any]] | None = None,
                          referenced: dict[str, Any] | None = None, **context: Any) -> dict[str, Any]:
        return to_chat(body, history, counting=True, referenced=referenced)[0]

    def count_tokens_response(self, count: int) -> dict[str, Any]:
        return {"object": "response.input_tokens", "input_tokens": count}

    def stored(self, route: Route, scope: ProviderScope) -> dict[str, Any]:
        """A stored response: retrieved, deleted, its input items listed, or (not) cancelled."""
        if route.kind == "delete_stored":
            if not scope.responses.delete(scope.session_id, route.item_id or ""):
                raise _not_found(route)
            return {"id": route.item_id, "object": "response", "deleted": True}
        stored = scope.responses.load(scope.session_id, route.item_id or "")
        if stored is None:
            raise _not_found(route)
        if route.kind == "input_items":
            return stored_items.page(stored_items.context_items(stored, lambda rid: scope.responses.load(scope.session_id, rid)), scope.query)
        if route.kind == "cancel_stored":  # nothing runs in the background here: every call is answered as it runs
            raise BadRequest("Only responses created with background=true can be cancelled; this one has already finished.")
        if str(scope.query.get("stream", "")).lower() in ("true", "1"):
            # Replaying a response's events is for background responses; answered as JSON, the
            # SDK's retrieve(stream=True) would silently yield nothing.
            raise BadRequest("Streaming a stored response is only supported for responses created with "
                             "background=true; retrieve it without `stream`.", param="stream")
        response: dict[str, Any] = stored["response"]
        return response

    def parse(self, body: Any, *, history: list[dict[str, Any]] | None = None,
              referenced: dict[str, Any] | None = None, **context: Any) -> Parsed:
        chat, extra = to_chat(body, history, referenced=referenced)
        extra["response_id"] = new_id("resp")
        extra["created_at"] = int(time.time())
        extra["echo"] = {k: body.get(k) for k in ("instructions", "tools", "tool_choice", "parallel_tool_calls",
                                                 "previous_response_id", "reasoning", "temperature", "top_p",
                                                 "max_output_tokens", "metadata", "truncation")}
        extra["echo"]["text"] = {"format": extra["text_format"]}
        return Parsed(chat=chat, stream=opt_bool(body, "stream") is True, model=body.get("model"),
                      top_logprobs=top_logprobs(body, "top_logprobs"), extra=extra,
                      truncate_input=body.get("truncation") == "auto")

    def shell(self, parsed: Parsed, status: str) -> dict[str, Any]:
        """The response object without output: what ``response.created`` announces."""
        echo = parsed.extra["echo"]
        return {"id": parsed.extra["response_id"], "object": "response", "created_at": parsed.extra["created_at"],
                "status": status, "model": parsed.model, "output": [], "usage": None, "error": None,
                "incomplete_details": None, "instructions": echo["instructions"], "tools": echo["tools"] or [],
                "tool_choice": echo["tool_choice"] or "auto",
                "parallel_tool_calls": echo["parallel_tool_calls"] is not False,
                "previous_response_id": echo["previous_response_id"], "reasoning": echo["reasoning"],
                "temperature": echo["temperature"], "top_p": echo["top_p"],
                "max_output_tokens": echo["max_output_tokens"], "metadata": echo["metadata"] or {},
                "store": parsed.extra["store"], "text": echo["text"], "top_logprobs": parsed.top_logprobs,
                # "auto" is echoed as asked; an input over the context is the context error (module doc)
                "truncation": echo["truncation"] or "disabled"}

    def render(self, turn: Turn, parsed: Parsed) -> dict[str, Any]:
        cut = turn.finish_reason == "length"
        response = self.shell(parsed, "incomplete" if cut else "completed")
        output = output_items(turn, parsed)
        if cut and output:  # the item the limit stopped
            output[-1]["status"] = "incomplete"
        response.update(output=output, usage=usage(turn),
                        incomplete_details={"reason": "max_output_tokens"} if cut else None)
        return response

    def stream(self, parsed: Parsed) -> ResponsesStream:
        return ResponsesStream(self, parsed)

    def error(self, err: ProxyError) -> dict[str, Any]:
        body = openai_error(err)
        if isinstance(err, ContextOverflow) and not err.prompt_fits:  # the Responses API's own wording
            body["error"].update(param="input", message=_INPUT_OVERFLOW)
        return body


def _outputs_answer_calls(messages: list[dict[str, Any]]) -> None:
    """OpenAI's 400 for a tool call output that answers no call made before it (in this input or
    the stored conversation it continues): the engine would render it as the output of a call the
    model never made, and sample from that prompt."""
    called: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or ():
            called.add(call["id"])
        if m["role"] == "tool" and m["tool_call_id"] not in called:
            raise BadRequest(f"No tool call found for function call output with call_id {m['tool_call_id']}.",
                             param="input")


def _not_found(route: Route) -> NotFound:
    err = NotFound(f"No response found with id '{route.item_id}'.")
    err.code = "response_not_found"
    return err


def stored_conversation(parsed: Parsed, assistant: dict[str, Any]) -> list[dict[str, Any]]:
    """What ``previous_response_id`` continues from: this request's messages without its
    ``instructions``, plus the answer."""
    messages = parsed.chat["messages"]
    skip = 1 if parsed.extra.get("instructions") else 0
    return [*messages[skip:], assistant]
