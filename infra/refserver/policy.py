"""Scripted-policy mode: deterministic assistant turns with real token ids and real logprobs.

A random tiny model cannot drive a coding agent through a task, but the pipeline still needs
multi-turn rollouts whose tokens and logprobs are genuine. A script fixes *what* the assistant
says at each turn; the token ids then come from the tokenizer (via the chat template, exactly as
the model would have to emit them) and the logprobs from the model by teacher forcing.

Script file (JSON)::

    {"turns": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
        {"content": "Looks good.", "tool_calls": [{"name": "bash", "arguments": {"command": "pytest"}}]},
        {"content": "All tests pass.", "reasoning": "The suite is green, so I can stop."}
    ]}

``reasoning`` (optional) is rendered by the chat template as a ``<think>`` block, so its tokens are
part of the turn's ids exactly as a Qwen3-style model would emit them. ``text`` (instead of the
fields above) is the turn's body verbatim -- what a model emitted, compact or oddly spaced JSON in
its ``<tool_call>`` blocks included -- tokenised as it stands; the server parses it as it parses
any generation (so the next prompt may re-render it differently: drift, as with a real model). ``delay_seconds``
(optional) holds the answer back that long, like a slow engine (fault tests: a call in flight).

A bare list of turns is accepted too. The turn played is the number of assistant messages
already in the request, so every conversation walks the same script independently. A token-id
prompt (``/v1/completions``, SGLang's ``/generate``) carries no messages: there the turn is the
number of assistant turns its ChatML text holds before the open generation header.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .engine import Generation, ModelEngine, first_stop

_END = "<|im_end|>\n"
_ASSISTANT_HEADER = "<|im_start|>assistant"
_PROBE_USER = {"role": "user", "content": "x"}


class ScriptError(ValueError):
    """The script file is malformed; the message names the turn and field."""


@dataclass(frozen=True)
class ScriptedTurn:
    content: str | None
    # Each call: {"name": str, "arguments": dict}; arguments are kept as an object so the
    # template's tojson and the hermes parser agree on one canonical JSON string.
    tool_calls: tuple[dict, ...] = ()
    reasoning: str | None = None
    delay_seconds: float = 0.0
    text: str | None = None  # the body verbatim (then content/tool_calls/reasoning are unused)

    def as_message(self) -> dict:
        msg: dict = {"role": "assistant", "content": self.content}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [
                {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in self.tool_calls
            ]
        return msg


def _parse_call(i: int, j: int, call) -> dict:
    where = f"turn {i}: tool_calls[{j}]"
    if not isinstance(call, dict):
        raise ScriptError(f"{where} must be an object")
    if isinstance(call.get("function"), dict):  # OpenAI shape {"type": "function", "function": {...}}
        call = call["function"]
    name = call.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ScriptError(f"{where}.name must be a non-empty string")
    args = call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            raise ScriptError(f"{where}.arguments is a string but not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise ScriptError(f"{where}.arguments must be a JSON object (or a string holding one)")
    return {"name": name, "arguments": args}


def _parse_turn(i: int, raw) -> ScriptedTurn:
    if not isinstance(raw, dict):
        raise ScriptError(f"turn {i}: must be an object with 'content' and/or 'tool_calls'")
    unknown = sorted(set(raw) - {"content", "tool_calls", "reasoning", "delay_seconds", "text"})
    if unknown:
        raise ScriptError(f"turn {i}: unknown field(s) {', '.join(unknown)}")
    if "text" in raw:
        if set(raw) - {"text", "delay_seconds"} or not isinstance(raw["text"], str) or not raw["text"]:
            raise ScriptError(f"turn {i}: 'text' is a non-empty string and comes alone (with delay_seconds)")
        return ScriptedTurn(content=None, text=raw["text"], delay_seconds=float(raw.get("delay_seconds", 0)))
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        raise ScriptError(f"turn {i}: content must be a string or null")
    reasoning = raw.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ScriptError(f"turn {i}: reasoning must be a string or null")
    calls = raw.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ScriptError(f"turn {i}: tool_calls must be a list")
    parsed = tuple(_parse_call(i, j, c) for j, c in enumerate(calls))
    if not content and not parsed:
        raise ScriptError(f"turn {i}: needs a non-empty 'content' or at least one tool call")
    delay = raw.get("delay_seconds", 0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 3600:
        raise ScriptError(f"turn {i}: delay_seconds must be a number of seconds in [0, 3600]")
    return ScriptedTurn(content=content or None, tool_calls=parsed, reasoning=reasoning or None,
                        delay_seconds=float(delay))


class ScriptedPolicy:
    def __init__(self, turns, *, name: str | None = None):
        self.name = name
        self.turns: list[ScriptedTurn] = [
            t if isinstance(t, ScriptedTurn) else _parse_turn(i, t) for i, t in enumerate(turns)
        ]
        if not self.turns:
            raise ScriptError("script has no turns")
        self._ids_cache: dict[tuple[int, str | None, int], list[int]] = {}
        self._cache_lock = threading.Lock()

    @classmethod
    def from_obj(cls, obj, *, name: str | None = None) -> "ScriptedPolicy":
        if isinstance(obj, dict):
            unknown = sorted(set(obj) - {"turns"})
            if unknown:
                raise ScriptError(f"script: unknown top-level field(s) {', '.join(unknown)}")
            obj = obj.get("turns")
        if not isinstance(obj, list):
            raise ScriptError("script: expected {\"turns\": [...]} or a list of turns")
        return cls(obj, name=name)

    @classmethod
    def load(cls, path: str | Path, *, name: str | None = None) -> "ScriptedPolicy":
        p = Path(path)
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ScriptError(f"{p}: not valid JSON: {exc}") from None
        try:
            return cls.from_obj(obj, name=name or p.stem)
        except ScriptError as exc:
            raise ScriptError(f"{p}: {exc}") from None

    def __len__(self) -> int:
        return len(self.turns)

    @staticmethod
    def turn_index(messages) -> int:
        return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")

    def turn_for(self, messages) -> int | None:
        """Index of the turn to play for this conversation, or None past the end of the script."""
        i = self.turn_index(messages)
        return i if i < len(self.turns) else None

    def turn_for_prompt(self, prompt_text: str) -> int | None:
        """The turn for a rendered ChatML prompt, or None when it does not end in an open
        assistant turn (not a generation prompt) or is past the end of the script."""
        last = prompt_text.rfind(_ASSISTANT_HEADER)
        if last < 0 or "<|im_end|>" in prompt_text[last:]:
            return None
        i = prompt_text.count(_ASSISTANT_HEADER) - 1
        return i if i < len(self.turns) else None

    def response_ids(self, engine: ModelEngine, turn: int) -> list[int]:
        """Token ids the model would emit for this turn, ending with <|im_end|>."""
        # The ids depend on the engine's chat template (a per-server override changes them).
        key = (id(engine), getattr(engine, "chat_template", None), turn)
        with self._cache_lock:
            cached = self._ids_cache.get(key)
        if cached is not None:
            return list(cached)
        if self.turns[turn].text is not None:
            body = self.turns[turn].text  # what the model emitted, as it emitted it
        else:
            # Let the chat template decide the exact body text, so scripted turns look exactly like
            # the same assistant message would look when it reappears in the next prompt.
            a = engine.render_chat([_PROBE_USER], add_generation_prompt=True)
            b = engine.render_chat([_PROBE_USER, self.turns[turn].as_message()], add_generation_prompt=False)
            if not b.startswith(a) or not b.endswith(_END):
                raise ScriptError(f"turn {turn}: chat template does not render assistant turns as ChatML")
            body = b[len(a): -len(_END)]
        ids = engine.tokenize_text(body, add_special_tokens=False) + [engine.eos_token_id]
        with self._cache_lock:
            self._ids_cache[key] = ids
        return list(ids)

    def respond(self, engine: ModelEngine, messages, prompt_ids: list[int], *, max_tokens: int,
                top_logprobs: int | None = None, stop: list[str] | None = None,
                include_stop: bool = False) -> Generation | None:
        """The scripted turn for this conversation as a Generation, or None past the script.

        The caller has already checked the context window; max_tokens only truncates the turn.
        """
        turn = self.turn_for(messages)
        return None if turn is None else self.play(engine, turn, prompt_ids, max_tokens=max_tokens,
                                                   top_logprobs=top_logprobs, stop=stop, include_stop=include_stop)

    def play(self, engine: ModelEngine, turn: int, prompt_ids: list[int], *, max_tokens: int,
             top_logprobs: int | None = None, stop: list[str] | None = None,
             include_stop: bool = False) -> Generation:
        """Turn ``turn`` sampled after ``prompt_ids``: its ids, with logprobs teacher-forced in
        that context (whatever rendering or splice produced the ids). A ``stop`` string ends it
        where sampling would have (the ids up to the token completing it, the text before it)."""
        if self.turns[turn].delay_seconds:
            time.sleep(self.turns[turn].delay_seconds)
        ids = self.response_ids(engine, turn)
        limit = max(int(max_tokens), 0)
        finish = "stop"
        if len(ids) > limit:
            ids, finish = ids[:limit], "length"
        reason: str | None = None
        text = None
        hit = first_stop(engine, ids, stop or [], include_stop)
        if hit is not None:
            kept, text, reason = hit
            ids, finish = ids[:kept], "stop"
        full = list(prompt_ids) + ids
        if top_logprobs is None:
            lps, tops = engine.score(full, len(prompt_ids)), None
        else:
            tops = engine.score_top(full, len(prompt_ids), top_logprobs)
            lps = [t[i][0] for t, i in zip(tops, ids)]
        if text is None:  # the turn's own end (its EOS), or the limit
            text = engine.decode(ids[:-1] if finish == "stop" else ids)
        return Generation(ids, lps, finish, reason, text, tops)
