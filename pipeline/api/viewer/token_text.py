"""Token text for the viewer, from the inference engine.

Sampled tokens usually carry their text already (vLLM's logprobs name each token; the records
keep it). What has none -- interstitials, prompts, engines that return ids only -- is asked of
the engine the proxy uses (``POST /detokenize``, served by vLLM, SGLang and the reference
server; vLLM answers ``{"prompt"}``, SGLang ``{"text"}``): a span (the prompt, one interstitial)
in one call, single tokens one call per distinct id, cached per process (a tokenizer does not
change with weights). No model hub, no tokenizer in this process. A page view makes at most
``max_calls`` calls and stops at the first failure: the viewer then shows ids.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx

log = logging.getLogger("polar.api.viewer")

_CACHE_LIMIT = 200_000


class EngineText:
    def __init__(self, base_url: str, *, timeout: float = 5.0, transport: httpx.BaseTransport | None = None,
                 max_calls: int = 2048) -> None:
        self._url = base_url.rstrip("/") + "/detokenize"
        self._client = httpx.Client(timeout=timeout, transport=transport)
        self._max_calls = max_calls
        self._pieces: dict[tuple[str | None, int], str] = {}
        self._lock = threading.Lock()

    def for_view(self) -> "ViewText":
        return ViewText(self, self._max_calls)

    def decode(self, ids: list[int], model: str | None) -> str | None:
        body: dict[str, Any] = {"tokens": ids, "skip_special_tokens": False}
        if model:
            body["model"] = model
        try:
            resp = self._client.post(self._url, json=body)
            data = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            log.info("detokenize at %s failed: %s", self._url, type(exc).__name__)
            return None
        if not isinstance(data, dict):
            log.info("detokenize at %s answered %s", self._url, resp.status_code)
            return None
        text = data.get("prompt", data.get("text"))
        return text if isinstance(text, str) else None

    def cached(self, model: str | None, token_id: int) -> str | None:
        return self._pieces.get((model, token_id))

    def remember(self, model: str | None, token_id: int, text: str) -> None:
        with self._lock:
            if len(self._pieces) >= _CACHE_LIMIT:
                self._pieces.clear()
            self._pieces[(model, token_id)] = text


class ViewText:
    """One page view's access to the engine: a call budget, and no retries once it failed."""

    def __init__(self, engine: EngineText, budget: int) -> None:
        self._engine = engine
        self._budget = budget
        self.failed = False
        self.used = False

    def _decode(self, ids: list[int], model: str | None) -> str | None:
        if self.failed or self._budget <= 0:
            return None
        self._budget -= 1
        self.used = True
        text = self._engine.decode(ids, model)
        self.failed = text is None
        return text

    def span(self, ids: list[int], model: str | None) -> str | None:
        return self._decode(ids, model) if ids else ""

    def pieces(self, ids: list[int], model: str | None) -> dict[int, str]:
        out: dict[int, str] = {}
        for tid in dict.fromkeys(ids):
            text = self._engine.cached(model, tid)
            if text is None:
                text = self._decode([tid], model)
                if text is None:
                    continue
                self._engine.remember(model, tid, text)
            out[tid] = text
        return out
