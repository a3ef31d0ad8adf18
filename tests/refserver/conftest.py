"""Shared fixtures: one tiny model built per session, an engine, an app and an independent reference.

The "reference" tokenizer and model are loaded separately from the engine's, so tests compare
the server against an independent computation rather than against itself.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from infra.refserver import ModelEngine, ScriptedPolicy, build_tiny_model, create_app  # noqa: E402

SCRIPT = {
    "turns": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]},
        {"content": "Now the tests.", "tool_calls": [{"name": "bash", "arguments": {"command": "pytest -q tests/ ✓"}}]},
        {"content": "All tests pass."},
    ]
}

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("refserver") / "tiny", seed=0)


@pytest.fixture(scope="session")
def engine(model_dir):
    return ModelEngine.load(model_dir, num_threads=2)


@pytest.fixture(scope="session")
def ref_tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


@pytest.fixture(scope="session")
def ref_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def app(engine):
    return create_app(engine, served_model_name="tiny",
                      policies={"script3": ScriptedPolicy.from_obj(SCRIPT, name="script3")}, default_max_tokens=32)


@pytest.fixture()
def client(app):
    return app.test_client()


@pytest.fixture(scope="session")
def teacher_forced(ref_model):
    """Independent full-sequence forward pass: log_softmax rows, row i predicts token i+1."""

    def run(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = ref_model(input_ids=torch.tensor([ids])).logits[0].float()
        return torch.log_softmax(logits, dim=-1)

    return run
