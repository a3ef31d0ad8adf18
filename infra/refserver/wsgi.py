"""WSGI entry point for ``polar model serve`` (configuration through POLAR_REFSERVER_* env)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from infra.refserver import ModelEngine, ScriptedPolicy, create_app

_policies = json.loads(os.environ.get("POLAR_REFSERVER_POLICIES") or "{}")
# Like vLLM's --chat-template: a template file replacing the tokenizer's built-in one (empty = built-in).
_template_path = (os.environ.get("POLAR_REFSERVER_CHAT_TEMPLATE") or "").strip()
_chat_template = Path(_template_path).expanduser().read_text(encoding="utf-8") if _template_path else None
app = create_app(
    ModelEngine.load(os.environ["POLAR_REFSERVER_MODEL_DIR"],
                     max_model_len=int(os.environ.get("POLAR_REFSERVER_MAX_MODEL_LEN", "32768")),
                     chat_template=_chat_template),
    served_model_name=os.environ.get("POLAR_REFSERVER_NAME", "tiny"),
    policies={name: ScriptedPolicy.load(path, name=name) for name, path in _policies.items()},
    dialect=os.environ.get("POLAR_REFSERVER_DIALECT") or "vllm",
    # SGLang's /generate names no model: the policy it plays (empty = the tiny model samples).
    generate_policy=os.environ.get("POLAR_REFSERVER_GENERATE_POLICY") or None,
)
