"""Chat history as vLLM hands it to the chat template: tool-call arguments parsed from JSON text.

The OpenAI schema carries an assistant tool call's ``function.arguments`` as a JSON *string*, and
agent CLIs send it back however they like (often re-serialised compactly, ``{"command":"ls"}``).
Before rendering, vLLM parses that string into an object (``_postprocess_messages`` in
``vllm/entrypoints/chat_utils.py``, run by ``parse_chat_messages`` for every chat rendering:
``/v1/chat/completions`` and ``/tokenize``'s messages form), so a template's
``arguments | tojson`` re-serialises it in transformers' canonical form (``json.dumps`` with
``ensure_ascii=False``, ``", "``/``": "`` separators, key order kept). Doing the same here makes
the prompt a client's re-sent history renders to -- and so the context drift prefix_merging
measures -- the one a user would get from vLLM: whatever the client did to the string, the call
renders in tojson's form, which is what the model sampled whenever it sampled that form (a
scripted turn always does; a model writing compact JSON drifts here exactly as on vLLM).

Per call, as vLLM (releases through 0.25) does it:

- missing, ``None``, ``""`` or any other falsy value -> ``{}``;
- a dict or a list -> kept as given;
- anything else goes through ``json.loads``: a JSON object becomes a dict, ``"null"`` becomes
  ``{}``, any other JSON value (``"42"``, ``"[1]"``, ``"\\"x\\""``) is passed on parsed;
- a string that is not JSON (or a number, a bool) fails the request with HTTP 400 and
  ``json``'s own message, e.g. ``Expecting ',' delimiter: line 1 column 54 (char 53)``.

Upstream vLLM main (PR #48922, after 0.25.1) instead coerces malformed or non-object arguments to
``{}`` with a warning; the released behaviour is the one kept here (README).

An assistant message whose ``tool_calls`` is an empty list loses the key, as in vLLM. The flat
call shape this server also accepts (``{"name", "arguments"}`` without ``function``) is
parsed the same way, so both shapes render alike.
"""

from __future__ import annotations

import json
from typing import Any


class ToolArgumentsError(ValueError):
    """A historical tool call's arguments are not JSON: vLLM answers 400 with json's message."""


def _parsed(arguments: Any) -> Any:
    if not arguments:
        return {}
    if isinstance(arguments, (dict, list)):
        return arguments
    try:
        value = json.loads(arguments)
    except (ValueError, TypeError, RecursionError) as exc:  # not JSON; a number/bool; absurd nesting
        raise ToolArgumentsError(str(exc)) from None
    return {} if value is None else value


def _with_parsed_arguments(call: Any) -> Any:
    if not isinstance(call, dict):
        return call  # left for the template to reject, as before
    if isinstance(call.get("function"), dict):
        fn = call["function"]
        return {**call, "function": {**fn, "arguments": _parsed(fn.get("arguments"))}}
    if "name" in call:
        return {**call, "arguments": _parsed(call.get("arguments"))}
    return call


def parse_tool_call_arguments(messages: list) -> list:
    """A copy of messages whose assistant tool calls carry parsed arguments; the input is not modified."""
    if not isinstance(messages, list):
        return messages  # not a conversation: the template's own error says so
    out = []
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) and m.get("role") == "assistant" else None
        if not isinstance(calls, list):
            out.append(m)
        elif not calls:
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
        else:
            out.append({**m, "tool_calls": [_with_parsed_arguments(c) for c in calls]})
    return out
