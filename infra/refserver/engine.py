"""Model engine: chat rendering, tokenisation, teacher-forced scoring and sampling on CPU.

This is the part of vLLM the rest of the project relies on, reduced to what a tiny model on a
CPU needs: prompt ids built exactly as vLLM builds them (chat template rendered to text, then
tokenised without special tokens), sampling with vLLM's parameters, and the *raw* model
logprobs reported for every sampled token. No HTTP here; see app.py.
"""

from __future__ import annotations

import inspect
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .history import parse_tool_call_arguments

# vLLM treats temperatures below this as greedy.
_GREEDY_EPS = 1e-5

# Keys of apply_chat_template that chat_template_kwargs must not override.
_RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "tokenize", "return_dict", "return_tensors", "chat_template", "tokenizer_kwargs",
})


class ContextLengthError(ValueError):
    """Prompt plus requested completion does not fit the model's context window."""


class ChatTemplateError(ValueError):
    """The request's messages could not be rendered by the chat template."""


# Per-position alternatives: token id -> (logprob, 1-based rank among the vocabulary).
TopLogprobs = dict[int, tuple[float, int]]


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"
    stop_reason: str | int | None
    text: str
    # Filled when top alternatives were requested: one dict per token, the token itself first.
    top_logprobs: list[TopLogprobs] | None = field(default=None)


class ModelEngine:
    def __init__(self, tokenizer, model, *, max_model_len: int, model_dir: str | Path | None = None,
                 chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.model = model
        self.model_dir = str(model_dir) if model_dir is not None else None
        self.max_model_len = int(max_model_len)
        if chat_template is not None and (not isinstance(chat_template, str) or not chat_template.strip()):
            raise ValueError("chat_template must be the template text (a non-empty string) or None")
        # Like vLLM's --chat-template: when set, every rendering uses this template text instead
        # of the tokenizer's built-in one; None keeps the built-in template.
        self.chat_template = chat_template
        # One forward pass at a time: the WSGI server is threaded and torch already uses
        # intra-op threads; interleaving steps of several requests is fine, overlapping is not.
        self._lock = threading.Lock()
        self.vocab_size = int(model.config.vocab_size)
        self.eos_token_id = int(tokenizer.eos_token_id)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        gen_eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        # Like vLLM: the tokenizer's EOS stops with stop_reason None; further EOS ids from
        # generation_config act as implicit stop_token_ids (stop_reason = the id).
        self.extra_eos_ids = tuple(int(i) for i in gen_eos if int(i) != self.eos_token_id)
        # transformers renamed the KV-cache argument (past_key_values -> cache) in 5.x.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @classmethod
    def load(cls, model_dir: str | Path, *, max_model_len: int = 32768, num_threads: int = 2,
             chat_template: str | None = None) -> "ModelEngine":
        """Load tokenizer and model from a local folder; chat_template (template text) overrides the built-in."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if num_threads:
            torch.set_num_threads(int(num_threads))
        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32)
        model.eval()
        limit = min(int(max_model_len), int(getattr(model.config, "max_position_embeddings", max_model_len)))
        return cls(tok, model, max_model_len=limit, model_dir=model_dir, chat_template=chat_template)

    # ---------------------------------------------------------------- text <-> ids

    def render_chat(self, messages, tools=None, add_generation_prompt: bool = True,
                    continue_final_message: bool = False, chat_template_kwargs: dict | None = None) -> str:
        extra = dict(chat_template_kwargs or {})
        bad = sorted(_RESERVED_TEMPLATE_KWARGS.intersection(extra))
        if bad:
            raise ChatTemplateError(f"chat_template_kwargs may not set {', '.join(bad)}")
        if self.chat_template is not None:
            extra["chat_template"] = self.chat_template
        # As vLLM does before every chat rendering: tool-call argument strings become objects, so
        # the template re-serialises them (ToolArgumentsError, a ValueError, for invalid JSON).
        messages = parse_tool_call_arguments(messages)
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, tokenize=False, **extra)
        except Exception as exc:  # jinja errors, transformers' ValueErrors, odd content types
            raise ChatTemplateError(f"chat template rendering failed: {exc}") from exc
        if not isinstance(text, str):
            raise ChatTemplateError("chat template did not render to a string")
        return text

    def tokenize_chat(self, messages, tools=None, add_generation_prompt: bool = True,
                      continue_final_message: bool = False, chat_template_kwargs: dict | None = None) -> list[int]:
        # Same two steps as vLLM's chat path: render to text, tokenise without special tokens.
        text = self.render_chat(messages, tools, add_generation_prompt, continue_final_message, chat_template_kwargs)
        return self.tokenize_text(text, add_special_tokens=False)

    def tokenize_text(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens).input_ids)

    def decode(self, token_ids, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """Text of a single token as vLLM shows it in logprobs (lone partial UTF-8 -> U+FFFD)."""
        return self.tokenizer.decode([int(token_id)], skip_special_tokens=False)

    def token_strs(self, token_ids) -> list[str]:
        return [t if t is not None else "" for t in self.tokenizer.convert_ids_to_tokens(list(token_ids))]

    def check_context(self, prompt_len: int, max_tokens: int) -> None:
        if prompt_len + max_tokens > self.max_model_len:
            raise ContextLengthError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.")

    def check_token_ids(self, token_ids) -> None:
        for t in token_ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self.vocab_size:
                raise ValueError(f"Token id {t!r} is out of vocabulary")

    # ---------------------------------------------------------------- scoring

    def _forward_logprobs(self, token_ids: list[int], keep: int) -> torch.Tensor:
        """log_softmax of the last `keep` positions' next-token logits, float32, shape [keep, V]."""
        ids = torch.tensor([token_ids], dtype=torch.long)
        with self._lock, torch.inference_mode():
            out = self.model(input_ids=ids, use_cache=False, logits_to_keep=keep)
        return torch.log_softmax(out.logits[0, -keep:].float(), dim=-1)

    def _check_score_args(self, token_ids, start: int) -> None:
        if not 1 <= start <= len(token_ids):
            raise ValueError(f"start must be in [1, {len(token_ids)}], got {start}")
        self.check_token_ids(token_ids)

    def score(self, token_ids: list[int], start: int) -> list[float]:
        """Raw logprob of token_ids[i] given token_ids[:i], for i in range(start, len), in one pass."""
        self._check_score_args(token_ids, start)
        n = len(token_ids) - start
        if n == 0:
            return []
        lp = self._forward_logprobs(token_ids, keep=n + 1)[:-1]  # row j predicts token start+j
        targets = torch.tensor(token_ids[start:], dtype=torch.long)
        return lp.gather(1, targets[:, None])[:, 0].tolist()

    def score_top(self, token_ids: list[int], start: int, k: int) -> list[TopLogprobs]:
        """Like score, but each position maps the actual token and the k best tokens to (logprob, rank)."""
        self._check_score_args(token_ids, start)
        n = len(token_ids) - start
        if n == 0:
            return []
        lp = self._forward_logprobs(token_ids, keep=n + 1)[:-1]
        return [_top_entry(lp[j], token_ids[start + j], k) for j in range(n)]

    # ---------------------------------------------------------------- sampling

    def generate(self, prompt_ids: list[int], *, max_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = -1, seed: int | None = None, stop: list[str] | None = None,
                 stop_token_ids: list[int] | None = None, ignore_eos: bool = False,
                 include_stop_str_in_output: bool = False, top_logprobs: int | None = None) -> Generation:
        """Sample up to max_tokens after prompt_ids, reporting raw logprobs of each sampled token.

        top_logprobs=None skips computing alternatives; an int k (0 allowed) fills
        Generation.top_logprobs with the sampled token plus the k best tokens per step.
        """
        if not prompt_ids:
            raise ValueError("The prompt cannot be empty")
        self.check_token_ids(prompt_ids)
        self.check_context(len(prompt_ids), max_tokens)
        stops = [s for s in (stop or []) if s]
        # A stop string of L characters spans at most 4L bytes, hence at most 4L byte-level
        # tokens (+1 for a split boundary), so only that tail needs decoding at each step.
        window = 4 * max((len(s) for s in stops), default=0) + 2
        # token id -> stop_reason; the tokenizer EOS (None) is checked first, as in vLLM.
        stop_ids: dict[int, int | None] = {int(t): int(t) for t in (stop_token_ids or [])}
        if not ignore_eos:
            stop_ids.update({t: t for t in self.extra_eos_ids})
            stop_ids[self.eos_token_id] = None
        gen = torch.Generator()
        # Any int is a valid seed (as in vLLM); torch wants it within 64 bits.
        gen.manual_seed(int(seed) % (1 << 64) if seed is not None else int.from_bytes(os.urandom(8), "little"))

        out_ids: list[int] = []
        out_lps: list[float] = []
        tops: list[TopLogprobs] | None = [] if top_logprobs is not None else None
        finish, reason, text = "length", None, None
        cache = None
        next_input = prompt_ids
        with torch.inference_mode():
            for _ in range(max_tokens):
                with self._lock:
                    out = self.model(input_ids=torch.tensor([next_input], dtype=torch.long),
                                     use_cache=True, logits_to_keep=1, **{self._cache_kw: cache})
                cache = out["cache"] if "cache" in out.keys() else out["past_key_values"]
                logits = out.logits[0, -1].float()
                raw = torch.log_softmax(logits, dim=-1)
                tok = _sample(logits, temperature, top_p, top_k, gen)
                out_ids.append(tok)
                out_lps.append(float(raw[tok]))
                if tops is not None:
                    tops.append(_top_entry(raw, tok, top_logprobs))
                next_input = [tok]
                if tok in stop_ids:
                    finish, reason = "stop", stop_ids[tok]
                    body = out_ids if include_stop_str_in_output else out_ids[:-1]
                    text = self.decode(body)
                    break
                if stops and _find_stop(self.decode(out_ids[-window:]), stops, False) is not None:
                    # Earlier occurrences would have stopped earlier, so the first one in the
                    # full text is the one that just completed.
                    hit = _find_stop(self.decode(out_ids), stops, include_stop_str_in_output)
                    if hit is not None:
                        (text, reason), finish = hit, "stop"
                        break
        if text is None:
            text = self.decode(out_ids)
        return Generation(out_ids, out_lps, finish, reason, text, tops)


def _top_entry(lp_row: torch.Tensor, token_id: int, k: int) -> TopLogprobs:
    """The token's (logprob, rank) first, then the k best; rank counts tokens with logprob >= its own."""
    token_lp = lp_row[token_id]
    entry: TopLogprobs = {int(token_id): (float(token_lp), int((lp_row >= token_lp).sum()))}
    if k > 0:
        vals, idx = torch.topk(lp_row, min(int(k), lp_row.shape[0]))
        for rank, (v, i) in enumerate(zip(vals.tolist(), idx.tolist()), start=1):
            entry.setdefault(int(i), (float(v), rank))
    return entry


def _sample(logits: torch.Tensor, temperature: float, top_p: float, top_k: int, gen: torch.Generator) -> int:
    if temperature < _GREEDY_EPS:
        return int(torch.argmax(logits))
    x = logits / float(temperature)
    if 0 < top_k < x.shape[0]:
        kth = torch.topk(x, int(top_k)).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # Drop a token when the mass strictly before it already reaches top_p; the best stays.
        drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop[0] = False
        x = x.clone()
        x[order[drop]] = float("-inf")
    probs = torch.softmax(x, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


def first_stop(engine: "ModelEngine", ids: list[int], stops: list[str], include: bool) -> tuple[int, str, str] | None:
    """Where a stop string first completes in ``ids``, as sampling them one by one would have
    stopped: (the tokens kept, the text, the stop string); None when none does."""
    stops = [s for s in stops if s]
    if not stops:
        return None
    window = 4 * max(len(s) for s in stops) + 2
    for k in range(1, len(ids) + 1):
        if _find_stop(engine.decode(ids[max(0, k - window):k]), stops, False) is not None:
            hit = _find_stop(engine.decode(ids[:k]), stops, include)
            if hit is not None:
                return k, hit[0], hit[1]
    return None


def _find_stop(text: str, stops: list[str], include: bool) -> tuple[str, str] | None:
    """Earliest stop string in text -> (truncated text, the stop string)."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, s)
    if best is None:
        return None
    i, s = best
    return (text[: i + len(s)] if include else text[:i]), s
