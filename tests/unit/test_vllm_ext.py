"""infra/vllm_ext's pure part, with stand-ins for vLLM's objects (vLLM is not installable here, so
the route itself is not run; README.md says so). The stand-ins have the shapes vLLM 0.10/0.11's
``_preprocess_chat`` and later versions return."""

from __future__ import annotations

import asyncio
import py_compile
from pathlib import Path
from types import SimpleNamespace

import pytest

from infra.vllm_ext import token_in
from infra.vllm_ext.token_in import (
    TokenInError,
    check_prompt_ids,
    error_status,
    install_route,
    refusal,
    token_in_serving,
    with_prompt_ids,
)

VOCAB, MAX_LEN = 100, 16


class FakeOpenAIServingChat:
    """vLLM's OpenAIServingChat as far as the override sees it: ``create_chat_completion`` samples
    after the engine prompt ``_preprocess_chat`` returns (here it returns that prompt's ids)."""

    use_harmony = False

    def __init__(self, layout: int = 3) -> None:
        self.model_config = SimpleNamespace(max_model_len=MAX_LEN, get_vocab_size=lambda: VOCAB)
        self.max_model_len = MAX_LEN
        self.layout = layout
        self.calls: list[tuple] = []

    async def _preprocess_chat(self, request, tokenizer, messages, chat_template=None, **kwargs):
        self.calls.append((request, tokenizer, messages, chat_template, kwargs))
        rendered = [1, 2, 3]  # the template's rendering
        prompt = {"prompt_token_ids": rendered, "prompt": "<rendered text>", "cache_salt": "s"}
        conversation = [{"role": "user", "content": messages[0]["content"]}]
        if self.layout == 3:
            return conversation, ["<rendered text>"], [prompt]
        return conversation, [prompt]

    async def create_chat_completion(self, request):
        result = await self._preprocess_chat(request, "tok", request.messages, chat_template="t", tool_dicts=None)
        return result[-1][0]["prompt_token_ids"]


def request(**fields):
    return SimpleNamespace(**{"messages": [{"role": "user", "content": "hi"}], "max_tokens": None,
                              "max_completion_tokens": None, **fields})


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("layout", [2, 3])
def test_the_ids_replace_the_rendered_prompt(layout):
    state = SimpleNamespace(openai_serving_chat=FakeOpenAIServingChat(layout))
    serving = token_in_serving(state)
    assert run(serving.create_chat_completion(request(prompt_token_ids=[7, 8, 9, 10]))) == [7, 8, 9, 10]
    # vLLM's own object and its route are untouched; the copy shares its state.
    original = state.openai_serving_chat
    assert type(original) is FakeOpenAIServingChat and isinstance(serving, FakeOpenAIServingChat)
    assert run(original.create_chat_completion(request(prompt_token_ids=[7]))) == [1, 2, 3]
    assert serving.calls is original.calls and len(original.calls) == 2
    # A request of vLLM's own route (no ids field) passes through the override unchanged.
    assert run(serving.create_chat_completion(request())) == [1, 2, 3]
    assert token_in_serving(state) is serving  # built once
    assert token_in_serving(SimpleNamespace(openai_serving_chat=None)) is None


def test_with_prompt_ids_shapes():
    prompt = {"prompt_token_ids": [1, 2], "prompt": "text", "cache_salt": "s"}
    conversation, logged, [new] = with_prompt_ids((["c"], ["text"], [prompt]), [5, 6])
    assert new == {"prompt_token_ids": [5, 6], "cache_salt": "s"} and logged == [[5, 6]] and conversation == ["c"]
    assert prompt["prompt_token_ids"] == [1, 2]  # vLLM's dict is not modified
    assert with_prompt_ids((["c"], [prompt]), [5]) == (["c"], [{"prompt_token_ids": [5], "cache_salt": "s"}])
    with pytest.raises(TokenInError, match="text-only"):
        with_prompt_ids((["c"], [{**prompt, "multi_modal_data": {"image": [object()]}}]), [5])
    for odd in ([prompt], (["c"],), (["c"], [prompt, prompt]), (["c"], ["text"])):
        with pytest.raises(TypeError, match="not supported"):
            with_prompt_ids(odd, [5])


@pytest.mark.parametrize("ids, max_tokens, message", [
    ([], None, "non-empty list of token ids"),
    ("1 2", None, "non-empty list of token ids"),
    ([1, "2"], None, "list of integers"),
    ([1, True], None, "list of integers"),
    ([1, 2.0], None, "list of integers"),
    ([1, VOCAB], None, f"Token id {VOCAB} is out of vocabulary"),
    ([-1], None, "Token id -1 is out of vocabulary"),
    ([1] * MAX_LEN, None, f"maximum context length is {MAX_LEN} tokens. However, your request has {MAX_LEN} input"),
    ([1] * 10, 7, "you requested 17 tokens (10 in the messages, 7 in the completion)"),
])
def test_bad_ids_in_vllms_words(ids, max_tokens, message):
    with pytest.raises(TokenInError) as err:
        check_prompt_ids(ids, vocab_size=VOCAB, max_model_len=MAX_LEN, max_tokens=max_tokens)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)  # what vLLM's create_chat_completion answers with a 400


def test_the_override_checks_against_the_model_and_the_requested_limit():
    serving = token_in_serving(SimpleNamespace(openai_serving_chat=FakeOpenAIServingChat()))
    assert check_prompt_ids([1] * 10, vocab_size=VOCAB, max_model_len=MAX_LEN, max_tokens=6) == [1] * 10
    for bad in (request(prompt_token_ids=[1] * 10, max_tokens=9),
                request(prompt_token_ids=[1] * 10, max_tokens=1, max_completion_tokens=9),
                request(prompt_token_ids=[VOCAB + 5])):
        with pytest.raises(TokenInError):
            run(serving.create_chat_completion(bad))


def test_harmony_models_are_refused_and_error_status():
    assert refusal(SimpleNamespace(use_harmony=True)) and refusal(FakeOpenAIServingChat()) is None
    assert error_status(SimpleNamespace(error=SimpleNamespace(code=404))) == 404  # vLLM >= 0.10.1
    assert error_status(SimpleNamespace(code=400, message="x")) == 400  # earlier
    assert error_status(SimpleNamespace()) == 400


def test_install_route_wraps_build_app_once():
    built = []

    class App:
        def __init__(self):
            self.routers = []

        def include_router(self, router):
            self.routers.append(router)

    def build_app(args, supported_tasks=None):
        built.append((args, supported_tasks))
        return App()

    api_server = SimpleNamespace(build_app=build_app)
    install_route(api_server, "ROUTER")
    install_route(api_server, "ROUTER")  # idempotent
    app = api_server.build_app("args", supported_tasks=("generate",))
    assert app.routers == ["ROUTER"] and built == [("args", ("generate",))]


def test_one_route_for_all_three_servers():
    from infra.refserver.dialects import TOKEN_IDS_FIELD, TOKENS_ROUTE
    from proxy.upstream import token_prompts

    assert token_in.TOKENS_ROUTE == TOKENS_ROUTE == token_prompts.TOKENS_ROUTE == "/v1/chat/completions/tokens"
    assert token_in.TOKEN_IDS_FIELD == TOKEN_IDS_FIELD == token_prompts.TOKEN_IDS_FIELD


def test_vllm_modules_compile_and_stay_out_of_the_pure_part():
    root = Path(token_in.__file__).parent
    for name in ("serving.py", "serve.py"):
        py_compile.compile(str(root / name), doraise=True)
    source = (root / "token_in.py").read_text(encoding="utf-8")
    assert "import vllm" not in source and "from vllm" not in source and "fastapi" not in source
