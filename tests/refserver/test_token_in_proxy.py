"""Token-in through the proxy (issue 14): the proxy app and the reference server in this process
(WSGI), real Redis, the openai SDK as the harness. For random conversations whose model emits
tool-call JSON its own way, whose harness re-serialises it, drops reasoning or strips content,
and whose engine template may drop history reasoning: with ``token_in: auto`` every merged turn
is trained in the context it was sampled in (``prefix_merging``: context_matches everywhere, one
chain), and a recomputation of every trainable logprob in that context agrees; with it off, the
turns that drift are exactly the ones the generator perturbed."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import openai
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.refserver import ModelEngine, ScriptedPolicy, create_app
from pipeline.builders import BuildContext
from pipeline.builders import create as create_builder
from pipeline.codec import unpack
from pipeline.keys import session_completions
from pipeline.schemas import CompletionRecord
from pipeline.settings import Settings
from proxy.app import create_app as create_proxy
from proxy.upstream import WSGITransport
from tests.refserver.conftest import BASH_TOOL
from tests.support import running_session, sid_of

TEMPLATES = Path(__file__).resolve().parents[2] / "infra" / "refserver" / "templates"
BASE, UPSTREAM = "http://proxy.test", "http://engine.test"


@pytest.fixture(scope="module")
def engines(model_dir):
    return {"keeps": ModelEngine.load(model_dir, num_threads=1),
            "strips": ModelEngine.load(model_dir, num_threads=1,
                                       chat_template=(TEMPLATES / "strip_history_reasoning.jinja").read_text())}


def model_text(command: str, style: str, reasoning: str | None) -> str:
    """A turn as a model emits it: a think block, then a hermes call whose JSON is in its own style."""
    args = {"command": command, "timeout": 30}
    body = {"compact": json.dumps({"name": "bash", "arguments": args}, separators=(",", ":")),
            "spaced": json.dumps({"name": "bash", "arguments": args}),
            "unsorted": '{"name": "bash", "arguments": {"timeout": 30, "command": ' + json.dumps(command) + "}}"}[style]
    return (f"<think>\n{reasoning}\n</think>\n\n" if reasoning else "") + f"<tool_call>\n{body}\n</tool_call>"


@st.composite
def conversations(draw):
    n = draw(st.integers(2, 4))
    turns = []
    for i in range(n):
        reasoning = draw(st.sampled_from([None, "Check the tree first.", "Now the tests."]))
        style = draw(st.sampled_from(["compact", "spaced", "unsorted"]))
        turns.append({
            "text": model_text(draw(st.sampled_from(["ls -la", "pytest -q", "cat a.py"])), style, reasoning),
            "style": style, "reasoning": reasoning,
            # what the harness does to this turn when it sends it back
            "reserialise": draw(st.booleans()), "drop_reasoning": draw(st.booleans()),
        })
    return {"turns": turns, "final": "All done.", "template": draw(st.sampled_from(["keeps", "strips"]))}


def harness_echo(message, turn) -> dict:
    """The assistant turn as a harness sends it back."""
    out = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = []
        for c in message.tool_calls:
            args = c.function.arguments
            if turn["reserialise"]:  # JSON.stringify of the parsed object (JS harnesses)
                args = json.dumps(json.loads(args), separators=(",", ":"))
            out["tool_calls"].append({"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                                     "arguments": args}})
    reasoning = getattr(message, "reasoning_content", None) or (message.model_extra or {}).get("reasoning_content")
    if reasoning and not turn["drop_reasoning"]:
        out["reasoning_content"] = reasoning
    return out


def run(engine, redis_url, tmp_path, conv, token_in: str, truth: list | None = None) -> list[CompletionRecord]:
    """The conversation through the proxy; ``truth`` gets, per call, the history as it was
    sampled: each assistant turn as the text the model emitted (which the template renders
    verbatim as content)."""
    script = [{"text": t["text"]} for t in conv["turns"]] + [{"content": conv["final"]}]
    policy = ScriptedPolicy.from_obj({"turns": script}, name="agent")
    engine_app = create_app(engine, policies={"agent": policy})
    settings = Settings(home=tmp_path, redis_url=redis_url, upstream_url=UPSTREAM, upstream_timeout_seconds=30)
    app = create_proxy(settings, transport=WSGITransport(engine_app))
    key = running_session(redis_url, agent={"custom_shell": "true", "token_in": token_in})
    sdk = openai.OpenAI(base_url=f"{BASE}/s/{key}/v1", api_key=key, max_retries=0,
                        http_client=httpx2.Client(transport=httpx2.WSGITransport(app=app), timeout=60))
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}]
    sampled = list(messages)
    for i, turn in enumerate(conv["turns"] + [None]):
        if truth is not None:
            truth.append(list(sampled))
        answer = sdk.chat.completions.create(model="agent", messages=messages, tools=[BASH_TOOL]).choices[0].message
        if turn is None:
            break
        messages.append(harness_echo(answer, turn))
        tool = {"role": "tool", "tool_call_id": answer.tool_calls[0].id, "content": f"output {i}"}
        messages.append(tool)
        sampled += [{"role": "assistant", "content": turn["text"]}, tool]
    r = redis.Redis.from_url(redis_url)
    return [CompletionRecord.model_validate(unpack(x)) for x in r.lrange(session_completions(sid_of(key)), 0, -1)]


def merged_turns(records):
    trajectory = create_builder("prefix_merging", {"end_of_turn_token_id": records[0].response_ids[-1]}).build(
        records, BuildContext("s", "t", None, {}))
    return trajectory, [turn for t in trajectory.traces for turn in t.metadata["turns"]]


def perturbed(conv) -> set[int]:
    """The merged turns whose context a re-rendered history differs in: every turn after a turn
    the generator perturbed (its prompt holds that turn's re-rendering). A turn is perturbed when
    its re-rendering is not its sampled ids: the template re-serialises tool-call arguments with
    json.dumps' spacing in their own key order (a compact emission comes back other ids; a spaced
    one, sorted or not, the same), and a think block the harness dropped, or the template drops
    from history, is gone."""
    first = None
    for i, t in enumerate(conv["turns"]):
        lost_reasoning = t["reasoning"] and (t["drop_reasoning"] or conv["template"] == "strips")
        if t["style"] == "compact" or lost_reasoning:
            first = i
            break
    return set() if first is None else set(range(first + 1, len(conv["turns"]) + 1))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations())
def test_with_token_in_every_merged_turn_is_trained_where_it_was_sampled(engines, redis_url, tmp_path, conv):
    engine = engines[conv["template"]]
    truth: list = []
    records = run(engine, redis_url, tmp_path, conv, "auto", truth)
    assert [r.token_in["spliced"] for r in records] == [False] + [True] * (len(records) - 1)
    assert records[0].token_in["reason"].startswith("no assistant turn")
    # Each prompt is the template's rendering of the history as it was sampled -- whatever the
    # harness sent back and however the template renders history.
    for rec, history in zip(records, truth):
        assert rec.prompt_ids == engines["keeps"].tokenize_chat(history, [BASH_TOOL])
    for prev, rec in zip(records, records[1:]):
        assert rec.prompt_ids[:len(prev.prompt_ids) + len(prev.response_ids)] == prev.prompt_ids + prev.response_ids
    trajectory, turns = merged_turns(records)
    assert len(trajectory.traces) == 1 and all(t["context_matches"] for t in turns)
    # every trainable logprob is the model's in the context the merged trace trains it in
    [trace] = trajectory.traces
    full = trace.prompt_ids + trace.response_ids
    scored = engine.score(full, len(trace.prompt_ids))
    for lp, mask, got in zip(trace.response_logprobs, trace.loss_mask, scored):
        if mask:
            assert abs(lp.logprob - got) < 1e-4


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations())
def test_without_it_the_drifted_turns_are_the_perturbed_ones(engines, redis_url, tmp_path, conv):
    engine = engines[conv["template"]]
    records = run(engine, redis_url, tmp_path, conv, "off")
    assert all(r.token_in is None for r in records)
    _, turns = merged_turns(records)
    drifted = {i for i, t in enumerate(turns) if not t["context_matches"]}
    assert drifted == perturbed(conv)


def scripted_sdk(engine, redis_url, tmp_path, turns: list, token_in: str):
    """The openai SDK on a session with ``token_in``, through the proxy app to a scripted policy."""
    policy = ScriptedPolicy.from_obj({"turns": turns}, name="agent")
    app = create_proxy(Settings(home=tmp_path, redis_url=redis_url, upstream_url=UPSTREAM, upstream_timeout_seconds=30),
                       transport=WSGITransport(create_app(engine, policies={"agent": policy})))
    key = running_session(redis_url, agent={"custom_shell": "true", "token_in": token_in})
    return openai.OpenAI(base_url=f"{BASE}/s/{key}/v1", api_key=key, max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.WSGITransport(app=app), timeout=60)), key


def test_a_compacted_history_is_rendered_with_its_reason_and_nothing_is_misspliced(engines, redis_url, tmp_path):
    engine = engines["keeps"]
    sdk, key = scripted_sdk(engine, redis_url, tmp_path, [{"text": model_text("ls", "compact", None)},
                                                          {"content": "Done."}, {"content": "Still done."}], "auto")
    system, user = {"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}
    first = sdk.chat.completions.create(model="agent", messages=[system, user], tools=[BASH_TOOL]).choices[0].message
    # The harness compacts: its history is now a summary and an assistant turn it wrote itself.
    compacted = [system, {"role": "user", "content": "Summary: listed the files."},
                 {"role": "assistant", "content": "I listed them."}, {"role": "user", "content": "Go on."}]
    sdk.chat.completions.create(model="agent", messages=compacted, tools=[BASH_TOOL])
    r = redis.Redis.from_url(redis_url)
    records = [CompletionRecord.model_validate(unpack(x)) for x in r.lrange(session_completions(sid_of(key)), 0, -1)]
    assert first.tool_calls and [x.token_in["spliced"] for x in records] == [False, False]
    assert "no recorded turn matches" in records[1].token_in["reason"]
    assert records[1].prompt_ids == engine.tokenize_chat(compacted, [BASH_TOOL])  # rendered, as any call


def test_strict_refuses_what_it_cannot_splice_in_the_callers_format(engines, redis_url, tmp_path):
    sdk, _ = scripted_sdk(engines["keeps"], redis_url, tmp_path, [{"content": "Hi."}, {"content": "Again."}], "strict")
    sdk.chat.completions.create(model="agent", messages=[{"role": "user", "content": "Hello"}])  # a first call: fine
    with pytest.raises(openai.BadRequestError, match="token_in is strict"):
        sdk.chat.completions.create(model="agent", messages=[
            {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Something I never said."},
            {"role": "user", "content": "?"}])


@pytest.mark.parametrize("dialect, path", [("vllm", "chat_tokens"), ("vllm", "completions"),
                                           ("sglang", "sglang_generate"), ("sglang", "chat_input_ids")])
def test_every_engine_path_continues_the_sampled_turn(engines, redis_url, tmp_path, dialect, path):
    """The same drifting conversation (compact JSON, reasoning the harness drops) on each token-in
    path: each spliced call's prompt is the sampled history's rendering, on every engine dialect."""
    engine = engines["keeps"]
    turns = [{"text": model_text("ls -la", "compact", "Look first.")},
             {"text": model_text("pytest -q", "compact", None)}, {"content": "All done."}]
    policy = ScriptedPolicy.from_obj({"turns": turns}, name="agent")
    engine_app = create_app(engine, policies={"agent": policy}, dialect=dialect,
                            generate_policy="agent" if dialect == "sglang" else None)
    settings = Settings(home=tmp_path, redis_url=redis_url, upstream_url=UPSTREAM, upstream_timeout_seconds=30,
                        upstream_engine=dialect, upstream_token_in=path)
    app = create_proxy(settings, transport=WSGITransport(engine_app))
    key = running_session(redis_url, agent={"custom_shell": "true", "token_in": "auto"})
    sdk = openai.OpenAI(base_url=f"{BASE}/s/{key}/v1", api_key=key, max_retries=0,
                        http_client=httpx2.Client(transport=httpx2.WSGITransport(app=app), timeout=60))
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}]
    sampled, histories = list(messages), []
    for i, turn in enumerate(turns):
        histories.append(list(sampled))
        answer = sdk.chat.completions.create(model="agent", messages=messages, tools=[BASH_TOOL]).choices[0].message
        if "text" not in turn:
            assert answer.content == "All done."
            break
        assert answer.tool_calls and answer.tool_calls[0].function.name == "bash"  # parsed on every path
        echo = {"role": "assistant", "content": answer.content or "", "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in answer.tool_calls]}  # the reasoning dropped
        tool = {"role": "tool", "tool_call_id": answer.tool_calls[0].id, "content": f"output {i}"}
        messages += [echo, tool]
        sampled += [{"role": "assistant", "content": turn["text"]}, tool]
    r = redis.Redis.from_url(redis_url)
    records = [CompletionRecord.model_validate(unpack(x)) for x in r.lrange(session_completions(sid_of(key)), 0, -1)]
    assert [x.token_in["spliced"] for x in records] == [False, True, True]
    assert {x.token_in.get("path") for x in records[1:]} == {path}
    for rec, history in zip(records, histories):
        assert rec.prompt_ids == engine.tokenize_chat(history, [BASH_TOOL])


def test_a_turn_cut_by_a_stop_string_does_not_set_the_sessions_end_of_turn_token(engines, redis_url, tmp_path):
    """A side call cut by a stop string ended on an ordinary token, which was taken for the
    session's end-of-turn token: every later turn then looked cut, and strict refused the
    session's next continuations. Its token is no end-of-turn token now."""
    sdk, key = scripted_sdk(engines["keeps"], redis_url, tmp_path, [{"content": "Here we go."}, {"content": "Done."}],
                            "strict")
    side = sdk.chat.completions.create(model="agent", messages=[{"role": "user", "content": "Title?"}], stop=["e"])
    assert side.choices[0].message.content == "H"
    first = [{"role": "user", "content": "Hello"}]
    said = sdk.chat.completions.create(model="agent", messages=first).choices[0].message.content
    assert said == "Here we go."
    answer = sdk.chat.completions.create(model="agent", messages=[
        *first, {"role": "assistant", "content": said}, {"role": "user", "content": "And?"}])
    assert answer.choices[0].message.content == "Done."
    r = redis.Redis.from_url(redis_url)
    records = [CompletionRecord.model_validate(unpack(x)) for x in r.lrange(session_completions(sid_of(key)), 0, -1)]
    assert [x.token_in["spliced"] for x in records] == [False, False, True]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_spliced_prompt_keeps_the_reasoning_effort_the_chat_route_renders(engines, redis_url, tmp_path, dialect):
    """Qwen3-style thinking off (``reasoning_effort: none``): the chat route renders an empty think
    block after the generation prompt, so the spliced prompt's new part (the engine's /tokenize
    of the new messages) must carry the effort too -- as the kwargs on vLLM, whose /tokenize has no
    such field, and as the field itself on SGLang."""
    engine = engines["keeps"]
    policy = ScriptedPolicy.from_obj({"turns": [{"content": "Hi."}, {"content": "Again."}]}, name="agent")
    settings = Settings(home=tmp_path, redis_url=redis_url, upstream_url=UPSTREAM, upstream_timeout_seconds=30,
                        upstream_engine=dialect)
    app = create_proxy(settings, transport=WSGITransport(create_app(engine, policies={"agent": policy},
                                                                    dialect=dialect)))
    key = running_session(redis_url, agent={"custom_shell": "true", "token_in": "auto"})
    sdk = openai.OpenAI(base_url=f"{BASE}/s/{key}/v1", api_key=key, max_retries=0,
                        http_client=httpx2.Client(transport=httpx2.WSGITransport(app=app), timeout=60))
    messages = [{"role": "user", "content": "Hello"}]
    first = sdk.chat.completions.create(model="agent", messages=messages, reasoning_effort="none")
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And again?"}]
    sdk.chat.completions.create(model="agent", messages=messages, reasoning_effort="none")
    r = redis.Redis.from_url(redis_url)
    records = [CompletionRecord.model_validate(unpack(x)) for x in r.lrange(session_completions(sid_of(key)), 0, -1)]
    assert [x.token_in["spliced"] for x in records] == [False, True]
    off = {"reasoning_effort": "none", "enable_thinking": False}
    think = engine.tokenize_text("<think>\n\n</think>\n\n", False)
    assert records[0].prompt_ids == engine.tokenize_chat(messages[:1], chat_template_kwargs=off)
    assert records[0].prompt_ids[-len(think):] == think  # the chat route rendered thinking off
    # The recorded first turn, then the new messages rendered with thinking off as well.
    assert records[1].prompt_ids[-len(think):] == think
    assert records[1].prompt_ids[:len(records[0].prompt_ids) + len(records[0].response_ids)] == \
        records[0].prompt_ids + records[0].response_ids
