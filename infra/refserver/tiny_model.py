"""Build a tiny Qwen2-shaped causal LM folder entirely offline.

The reference server needs *some* real model so that token ids, logprobs and the chat template
behave like a production vLLM deployment, but tests must never touch a model hub. So we train a
small byte-level BPE tokenizer on text that is already on disk (the Python stdlib plus a few
synthetic agent-style samples) and attach a randomly initialised two-layer Qwen2 model to it.

Everything is deterministic for a given seed and Python version (the corpus is the stdlib of the
running interpreter), and the folder is written atomically so a crash never leaves a half build.

Usage: ``python -m infra.refserver.tiny_model OUT_DIR [--seed N] [--force]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")

# Marker written last: its presence means every other file of the build is complete.
MARKER = "refserver_build.json"
# 2: the chat template renders reasoning and honours enable_thinking.
BUILD_FORMAT = 2

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Single-id, non-special tokens: they survive decode(skip_special_tokens=True), exactly as in Qwen.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

VOCAB_SIZE = 4096
N_STDLIB_FILES = 150

# GPT-4/Qwen-style split: keeps contractions, letters, single digits, punctuation runs and
# whitespace apart before byte-level BPE. Digits are split one by one so numbers stay compact
# in the vocabulary.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_SHELL_COMMANDS = [
    "ls -la", "cat README.md", "pwd", "git status", "git diff", "python -m pytest -q", "pip install -e .",
    "grep -rn \"def main\" src/", "sed -n '1,80p' app.py", "find . -name '*.py' | head", "echo done",
    "mkdir -p build && cd build", "python3 -c \"print(1 + 1)\"", "rm -rf /tmp/work", "cd /repo && ls",
    "head -n 20 setup.py", "wc -l *.py", "chmod +x run.sh && ./run.sh",
]


def _synthetic_samples() -> list[str]:
    """Agent-shaped text so tool calls, ChatML and JSON tokenise compactly."""
    out: list[str] = []
    for i, cmd in enumerate(_SHELL_COMMANDS):
        call = {"name": "bash", "arguments": {"command": cmd}}
        out.append("<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>")
        out.append("<|im_start|>assistant\nLet me run `" + cmd + "`.\n<tool_call>\n"
                   + json.dumps(call) + "\n</tool_call><|im_end|>\n")
        out.append("<|im_start|>user\n<tool_response>\n" + f"exit code {i % 3}\n" + "</tool_response><|im_end|>\n")
        edit = {"name": "str_replace_editor",
                "arguments": {"command": "view", "path": f"/repo/src/module_{i}.py", "view_range": [1, 40 + i]}}
        out.append(json.dumps(edit) + "\n" + json.dumps({"type": "function", "function": edit}))
    tool = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                           "required": ["command"]}}}
    out.append("# Tools\n\n<tools>\n" + json.dumps(tool) + "\n</tools>\n")
    out.append("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
               "Fix the failing test.<|im_end|>\n<|im_start|>assistant\n<think>\nLook first.\n</think>\n")
    return out


def _corpus() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(stdlib.glob("*.py"))[:N_STDLIB_FILES]]
    # Repeat the synthetic part so its merges win against the much larger stdlib text.
    return texts + _synthetic_samples() * 20


def _train_tokenizer():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    # NFC like Qwen2.5's tokenizer.json. Not optional in practice: transformers 5 loads every
    # model_type "qwen2" folder through Qwen2Tokenizer, which hard-codes NFC, so declaring it here
    # keeps the raw tokenizer.json, transformers 4 and transformers 5 in agreement. Consequence:
    # decode(encode(s)) == NFC(s); byte-level BPE still means no string is ever unknown.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS) - len(ADDED_TOKENS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    # Special tokens get the ids right after the BPE vocabulary, then the tool/think markers.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return tok


def template_digest() -> str:
    """sha256 of the chat template on disk; a build made from another template is stale."""
    return hashlib.sha256(TEMPLATE_PATH.read_bytes()).hexdigest()


def _write_build(tmp: Path, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    raw_template = TEMPLATE_PATH.read_bytes()  # one read: the digest must describe what is embedded
    digest = hashlib.sha256(raw_template).hexdigest()
    hf_tok.chat_template = raw_template.decode("utf-8")
    hf_tok.save_pretrained(str(tmp))
    # transformers 5 writes "TokenizersBackend", a class transformers 4 (and so most vLLM
    # releases) does not know; name the Qwen2 class, which both versions resolve from tokenizer.json.
    cfg_path = tmp / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    tok_cfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg_path.write_text(json.dumps(tok_cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    im_end = hf_tok.convert_tokens_to_ids("<|im_end|>")
    endoftext = hf_tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(hf_tok),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        tie_word_embeddings=True,
        # Wider than the usual 0.02 so the random model has a peaked, non-uniform distribution:
        # greedy/top-k tests are then meaningful instead of comparing near-ties.
        initializer_range=0.2,
        dtype="float32",
        eos_token_id=im_end,
        pad_token_id=endoftext,
        bos_token_id=None,
        use_sliding_window=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=[im_end, endoftext], pad_token_id=endoftext, bos_token_id=None,
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
    )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a shard progress bar for a 1 MB model is noise in `polar demo`
    model.save_pretrained(str(tmp), safe_serialization=True)

    import platform

    import tokenizers
    import transformers
    meta = {
        "format": BUILD_FORMAT, "seed": seed, "vocab_size": len(hf_tok), "chat_template_sha256": digest,
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
    }
    for f in tmp.iterdir():
        f.chmod(0o644)
    (tmp / MARKER).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def is_complete(out_dir: str | Path, seed: int | None = None) -> bool:
    """True when out_dir holds a finished build (optionally: built with this seed)."""
    out = Path(out_dir)
    try:
        meta = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    needed = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    if not all((out / n).is_file() for n in needed):
        return False
    # The template is embedded at build time, so editing chat_template.jinja must invalidate old
    # builds even when nobody remembers to bump BUILD_FORMAT.
    return (meta.get("format") == BUILD_FORMAT and meta.get("chat_template_sha256") == template_digest()
            and (seed is None or meta.get("seed") == seed))


def build_tiny_model(out_dir: str | Path, *, seed: int = 0, force: bool = False) -> Path:
    """Build (or reuse) the tiny model folder at out_dir and return its path."""
    out = Path(out_dir).resolve()
    if not force and is_complete(out, seed):
        return out
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        # Builds land atomically, so a non-empty folder without our marker is someone else's data.
        raise FileExistsError(f"{out} exists and is not a tiny-model build; refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Temp dir next to the target so the final rename stays on one filesystem (atomic).
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would otherwise become the final folder's mode
        _write_build(tmp, seed)
        if out.exists():
            # Replacing an old/incomplete build: move it aside first, rename can't overwrite a dir.
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            old.rmdir()
            try:
                out.rename(old)
            except FileNotFoundError:
                old = None  # someone else removed it meanwhile
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        try:
            tmp.rename(out)
        except OSError:
            # A concurrent builder won the race; its result is as good as ours.
            if not is_complete(out, seed):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the tiny offline reference model.")
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rebuild even if a complete build exists")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    path = build_tiny_model(args.out_dir, seed=args.seed, force=args.force)
    print(f"tiny model ready at {path} ({time.monotonic() - t0:.1f}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
