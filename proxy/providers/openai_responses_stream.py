"""The Responses API's stream, synthesised from the finished answer: typed events, each with a
``sequence_number``, no ``[DONE]`` (pure: no I/O)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.errors import ContextOverflow, ProxyError
from proxy.providers.base import Parsed, Turn
from proxy.sse import named_event

if TYPE_CHECKING:
    from proxy.providers.openai_responses import OpenAIResponses


class ResponsesStream:
    """Typed events with a ``sequence_number``, no ``[DONE]``; Codex needs
    ``response.output_item.done`` and ``response.completed``."""

    content_type = "text/event-stream"

    def __init__(self, provider: OpenAIResponses, parsed: Parsed) -> None:
        self.provider, self.parsed = provider, parsed
        self.seq = 0
        self.opened = False

    def _ev(self, kind: str, **payload: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **payload}
        self.seq += 1
        return named_event(kind, data)

    def head(self, turn: Turn | None = None) -> list[bytes]:
        self.opened = True
        shell = self.provider.shell(self.parsed, "in_progress")
        return [self._ev("response.created", response=shell), self._ev("response.in_progress", response=shell)]

    def keepalive(self) -> bytes | None:
        return b": keepalive\n\n"

    def body(self, response: dict[str, Any], turn: Turn) -> list[bytes]:
        out = [] if self.opened else self.head(turn)
        for i, item in enumerate(response["output"]):
            out += self._item(i, item)
        terminal = "response.completed" if response["status"] == "completed" else "response.incomplete"
        out.append(self._ev(terminal, response=response))
        return out

    def _item(self, i: int, item: dict[str, Any]) -> list[bytes]:
        ev = self._ev
        kind = item["type"]
        if kind == "message":
            text, logprobs = item["content"][0]["text"], item["content"][0]["logprobs"]
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            common = {"item_id": item["id"], "output_index": i, "content_index": 0}
            return [ev("response.output_item.added", output_index=i,
                       item={**item, "status": "in_progress", "content": []}),
                    ev("response.content_part.added", **common, part=part),
                    ev("response.output_text.delta", **common, delta=text, logprobs=logprobs),
                    ev("response.output_text.done", **common, text=text, logprobs=logprobs),
                    ev("response.content_part.done", **common, part=item["content"][0]),
                    ev("response.output_item.done", output_index=i, item=item)]
        if kind == "function_call":
            return [ev("response.output_item.added", output_index=i,
                       item={**item, "arguments": "", "status": "in_progress"}),
                    ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
                       delta=item["arguments"]),
                    ev("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                       name=item["name"], arguments=item["arguments"]),
                    ev("response.output_item.done", output_index=i, item=item)]
        if kind == "custom_tool_call":
            return [ev("response.output_item.added", output_index=i, item={**item, "input": ""}),
                    ev("response.custom_tool_call_input.delta", item_id=item["id"], output_index=i,
                       delta=item["input"]),
                    ev("response.custom_tool_call_input.done", item_id=item["id"], output_index=i,
                       input=item["input"]),
                    ev("response.output_item.done", output_index=i, item=item)]
        text = item["content"][0]["text"]  # reasoning, raw chain of thought as vLLM streams it
        part = {"type": "reasoning_text", "text": ""}
        common = {"item_id": item["id"], "output_index": i, "content_index": 0}
        return [ev("response.output_item.added", output_index=i, item={**item, "content": [], "status": "in_progress"}),
                ev("response.content_part.added", **common, part=part),
                ev("response.reasoning_text.delta", **common, delta=text),
                ev("response.reasoning_text.done", **common, text=text),
                ev("response.content_part.done", **common, part={**part, "text": text}),
                ev("response.output_item.done", output_index=i, item=item)]

    def error(self, err: ProxyError) -> list[bytes]:
        failed = self.provider.shell(self.parsed, "failed")
        shown = self.provider.error(err)["error"]  # Codex compacts on a context_length_exceeded code
        code = err.code if isinstance(err, ContextOverflow) else "server_error" if err.status >= 500 else "invalid_request"
        failed["error"] = {"code": code, "message": shown["message"]}
        return [self._ev("error", code=err.code, message=shown["message"], param=shown["param"]),
                self._ev("response.failed", response=failed)]
