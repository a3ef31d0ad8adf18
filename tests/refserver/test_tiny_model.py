import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from infra.refserver import build_tiny_model
from infra.refserver.tiny_model import ADDED_TOKENS, MARKER, SPECIAL_TOKENS, is_complete


def _weights_equal(a, b) -> bool:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)


def test_build_is_deterministic_and_seed_dependent(model_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert (again / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    assert _weights_equal(again, model_dir)
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert (other / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    assert not _weights_equal(other, model_dir)
    # No temp folders are left next to the results.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "other"]


def test_skip_if_complete_and_force(model_dir, tmp_path):
    out = build_tiny_model(tmp_path / "m", seed=3)
    marker = out / MARKER
    before = marker.stat().st_mtime_ns
    assert build_tiny_model(out, seed=3) == out
    assert marker.stat().st_mtime_ns == before  # reused, not rebuilt
    build_tiny_model(out, seed=3, force=True)
    assert marker.stat().st_mtime_ns != before
    assert is_complete(out, 3) and not is_complete(out, 4)


def test_refuses_to_replace_foreign_folder(tmp_path):
    foreign = tmp_path / "precious"
    foreign.mkdir()
    (foreign / "data.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        build_tiny_model(foreign)
    assert (foreign / "data.txt").read_text() == "keep me"


def test_folder_contents(model_dir, ref_tokenizer):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]) == (64, 256, 2)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (4, 2)
    assert cfg["tie_word_embeddings"] is True and cfg["max_position_embeddings"] == 32768
    assert cfg["vocab_size"] == len(ref_tokenizer)
    assert cfg["eos_token_id"] == ref_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ref_tokenizer.eos_token == "<|im_end|>" and ref_tokenizer.pad_token == "<|endoftext|>"
    assert ref_tokenizer.chat_template


def test_special_and_added_tokens_are_single_ids(ref_tokenizer):
    for t in SPECIAL_TOKENS + ADDED_TOKENS:
        ids = ref_tokenizer(t, add_special_tokens=False).input_ids
        assert len(ids) == 1 and ref_tokenizer.convert_ids_to_tokens(ids) == [t]
    text = "<|im_start|>assistant\n<think>hm</think><tool_call>x</tool_call><|im_end|>"
    ids = ref_tokenizer(text, add_special_tokens=False).input_ids
    # Special tokens vanish with skip_special_tokens, tool/think markers stay (as in Qwen).
    assert ref_tokenizer.decode(ids, skip_special_tokens=True) == "assistant\n<think>hm</think><tool_call>x</tool_call>"


def test_tool_call_json_tokenises_compactly(ref_tokenizer):
    text = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
    assert len(ref_tokenizer(text, add_special_tokens=False).input_ids) <= 24


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_byte_level_round_trip(ref_tokenizer, s):
    ids = ref_tokenizer(s, add_special_tokens=False).input_ids
    assert ref_tokenizer.unk_token_id not in ids or "<|endoftext|>" in s
    # The Qwen2 tokenizer NFC-normalises (transformers 5 enforces it); beyond that it is lossless.
    assert ref_tokenizer.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", s)


@pytest.mark.parametrize("s", ["", "héllo wörld 🌍🚀", "\x00\x01\x7f\t\r\n", "中文 日本語 한국어", "\ud7ff\ue000\U0010ffff",
                               "   leading and trailing   ", "a\u200db\ufeff"])
def test_round_trip_examples(ref_tokenizer, s):
    ids = ref_tokenizer(s, add_special_tokens=False).input_ids
    assert ref_tokenizer.decode(ids) == s


def test_build_embeds_current_template_and_goes_stale_when_it_changes(model_dir, ref_tokenizer, tmp_path,
                                                                       monkeypatch):
    from infra.refserver import tiny_model

    assert ref_tokenizer.chat_template == tiny_model.TEMPLATE_PATH.read_text(encoding="utf-8")
    meta = json.loads((model_dir / MARKER).read_text())
    assert meta["format"] == tiny_model.BUILD_FORMAT and meta["chat_template_sha256"] == tiny_model.template_digest()
    # A copy of the build with an old format, or made from another template, is not reused.
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in model_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    assert is_complete(copy, 0)
    (copy / MARKER).write_text(json.dumps({**meta, "format": 1}))
    assert not is_complete(copy, 0)
    (copy / MARKER).write_text(json.dumps(meta))
    edited = tmp_path / "edited.jinja"
    edited.write_text(tiny_model.TEMPLATE_PATH.read_text(encoding="utf-8") + "\n")
    monkeypatch.setattr(tiny_model, "TEMPLATE_PATH", edited)
    assert not is_complete(copy, 0)
