"""One driver per vendor SDK: the same two conversations, spoken through each official SDK.

``weather``: a turn with reasoning and two parallel tool calls, the tool results sent back,
a final answer. ``think``: one turn with reasoning and a short answer. Each driver returns the
normalised outcome, so tests can compare SDKs, streaming and non-streaming.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
from google import genai
from google.genai import types as gt

SYSTEM = "You are a weather bot."
QUESTION = "What is the weather in Paris and Rome?"
RESULTS = {"Paris": "sunny", "Rome": "rainy"}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
DESCRIPTION = "Current weather of a city."


@dataclass
class Outcome:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    reasoning: str | None = None
    text: str | None = None
    final_text: str | None = None


class ChatDriver:
    name = "openai_chat"
    tools = [{"type": "function", "function": {"name": "get_weather", "description": DESCRIPTION, "parameters": SCHEMA}}]

    def __init__(self, base: str, sid: str) -> None:
        self.sdk = openai.OpenAI(base_url=f"{base}/s/{sid}/v1", api_key=sid, max_retries=0)

    def _ask(self, model: str, messages: list, stream: bool) -> Any:
        if stream:
            with self.sdk.chat.completions.stream(model=model, messages=messages, tools=self.tools) as s:
                return s.get_final_completion().choices[0].message
        return self.sdk.chat.completions.create(model=model, messages=messages, tools=self.tools).choices[0].message

    def weather(self, stream: bool) -> Outcome:
        messages: list = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        m = self._ask("sdk-tools", messages, stream)
        reasoning = (m.model_extra or {}).get("reasoning_content")
        out = Outcome(calls=[(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls],
                      call_ids=[c.id for c in m.tool_calls], reasoning=reasoning, text=m.content)
        messages.append({"role": "assistant", "content": m.content, "reasoning_content": reasoning,
                         "tool_calls": [c.model_dump() for c in m.tool_calls]})
        for c, (_, args) in zip(m.tool_calls, out.calls):
            messages.append({"role": "tool", "tool_call_id": c.id, "content": RESULTS[args["city"]]})
        out.final_text = self._ask("sdk-tools", messages, stream).content
        return out

    def think(self, stream: bool) -> Outcome:
        m = self._ask("sdk-think", [{"role": "user", "content": "6*7?"}], stream)
        return Outcome(reasoning=(m.model_extra or {}).get("reasoning_content"), text=m.content)


class AnthropicDriver:
    name = "anthropic"
    tools = [{"name": "get_weather", "description": DESCRIPTION, "input_schema": SCHEMA}]
    thinking = {"type": "enabled", "budget_tokens": 1024}

    def __init__(self, base: str, sid: str) -> None:
        self.sdk = anthropic.Anthropic(base_url=f"{base}/s/{sid}", api_key=sid, max_retries=0)

    def _ask(self, model: str, messages: list, stream: bool, system: str | None = SYSTEM) -> Any:
        kw = dict(model=model, max_tokens=2048, messages=messages, tools=self.tools, thinking=self.thinking)
        if system:
            kw["system"] = system
        if stream:
            with self.sdk.messages.stream(**kw) as s:
                return s.get_final_message()
        return self.sdk.messages.create(**kw)

    def weather(self, stream: bool) -> Outcome:
        messages: list = [{"role": "user", "content": QUESTION}]
        msg = self._ask("sdk-tools", messages, stream)
        uses = [b for b in msg.content if b.type == "tool_use"]
        thinking = [b for b in msg.content if b.type == "thinking"]
        assert msg.stop_reason == "tool_use" and thinking and thinking[0].signature
        out = Outcome(calls=[(b.name, b.input) for b in uses], call_ids=[b.id for b in uses],
                      reasoning=thinking[0].thinking, text="".join(b.text for b in msg.content if b.type == "text") or None)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": RESULTS[b.input["city"]]} for b in uses]})
        final = self._ask("sdk-tools", messages, stream)
        assert final.stop_reason == "end_turn"
        out.final_text = "".join(b.text for b in final.content if b.type == "text")
        return out

    def think(self, stream: bool) -> Outcome:
        msg = self._ask("sdk-think", [{"role": "user", "content": "6*7?"}], stream, system=None)
        return Outcome(reasoning=next(b.thinking for b in msg.content if b.type == "thinking"),
                       text="".join(b.text for b in msg.content if b.type == "text"))


class ResponsesDriver:
    name = "openai_responses"
    tools = [{"type": "function", "name": "get_weather", "description": DESCRIPTION, "parameters": SCHEMA,
              "strict": False}]

    def __init__(self, base: str, sid: str) -> None:
        self.sdk = openai.OpenAI(base_url=f"{base}/s/{sid}/v1", api_key=sid, max_retries=0)

    def _ask(self, stream: bool, **kw: Any) -> Any:
        if stream:
            with self.sdk.responses.stream(**kw) as s:
                return s.get_final_response()
        return self.sdk.responses.create(**kw)

    def weather(self, stream: bool) -> Outcome:
        # Non-streaming continues with previous_response_id (server-side state); streaming
        # replays everything itself with store=false, as Codex does.
        kw = dict(model="sdk-tools", instructions=SYSTEM, tools=self.tools)
        first_input = [{"role": "user", "content": QUESTION}]
        if stream:
            r = self._ask(True, input=first_input, store=False, include=["reasoning.encrypted_content"], **kw)
        else:
            r = self._ask(False, input=first_input, **kw)
        calls = [o for o in r.output if o.type == "function_call"]
        reasoning = [o for o in r.output if o.type == "reasoning"]
        out = Outcome(calls=[(c.name, json.loads(c.arguments)) for c in calls], call_ids=[c.call_id for c in calls],
                      reasoning=reasoning[0].content[0].text if reasoning else None)
        outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": RESULTS[json.loads(c.arguments)["city"]]}
                   for c in calls]
        if stream:
            replay = first_input + [o.model_dump(exclude_none=True) for o in r.output] + outputs
            final = self._ask(True, input=replay, store=False, include=["reasoning.encrypted_content"], **kw)
        else:
            final = self._ask(False, previous_response_id=r.id, input=outputs, **kw)
        out.final_text = final.output_text
        return out

    def think(self, stream: bool) -> Outcome:
        r = self._ask(stream, model="sdk-think", input="6*7?")
        reasoning = next(o for o in r.output if o.type == "reasoning")
        return Outcome(reasoning=reasoning.content[0].text, text=r.output_text)


class GoogleDriver:
    name = "google"

    def __init__(self, base: str, sid: str) -> None:
        self.sdk = genai.Client(api_key=sid, http_options=gt.HttpOptions(
            base_url=f"{base}/s/{sid}", retry_options=gt.HttpRetryOptions(attempts=1)))

    def _config(self, system: str | None = SYSTEM) -> gt.GenerateContentConfig:
        return gt.GenerateContentConfig(
            system_instruction=system,
            tools=[gt.Tool(function_declarations=[gt.FunctionDeclaration(
                name="get_weather", description=DESCRIPTION, parameters_json_schema=SCHEMA)])],
            thinking_config=gt.ThinkingConfig(include_thoughts=True),
            automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True))

    def _ask(self, model: str, contents: list, stream: bool, system: str | None = SYSTEM) -> list[gt.Part]:
        if stream:
            chunks = list(self.sdk.models.generate_content_stream(model=model, contents=contents,
                                                                  config=self._config(system)))
            assert chunks[-1].candidates[0].finish_reason == gt.FinishReason.STOP
            return [p for c in chunks for p in c.candidates[0].content.parts]
        r = self.sdk.models.generate_content(model=model, contents=contents, config=self._config(system))
        assert r.candidates[0].finish_reason == gt.FinishReason.STOP
        return list(r.candidates[0].content.parts)

    def weather(self, stream: bool) -> Outcome:
        contents: list = [gt.Content(role="user", parts=[gt.Part(text=QUESTION)])]
        parts = self._ask("sdk-tools", contents, stream)
        calls = [p.function_call for p in parts if p.function_call]
        out = Outcome(calls=[(c.name, dict(c.args)) for c in calls], call_ids=[c.id for c in calls],
                      reasoning="".join(p.text for p in parts if p.thought),
                      text="".join(p.text for p in parts if p.text and not p.thought) or None)
        contents.append(gt.Content(role="model", parts=parts))
        contents.append(gt.Content(role="user", parts=[gt.Part(function_response=gt.FunctionResponse(
            name=c.name, id=c.id, response={"output": RESULTS[c.args["city"]]})) for c in calls]))
        final = self._ask("sdk-tools", contents, stream)
        out.final_text = "".join(p.text for p in final if p.text and not p.thought)
        return out

    def think(self, stream: bool) -> Outcome:
        parts = self._ask("sdk-think", [gt.Content(role="user", parts=[gt.Part(text="6*7?")])], stream, system=None)
        return Outcome(reasoning="".join(p.text for p in parts if p.thought),
                       text="".join(p.text for p in parts if p.text and not p.thought))


DRIVERS = [ChatDriver, AnthropicDriver, ResponsesDriver, GoogleDriver]
