import json

import pytest

from infra.refserver.policy import ScriptedPolicy, ScriptError

from .conftest import BASH_TOOL, SCRIPT

TOL = 1e-4


def post_chat(client, **body):
    r = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def test_three_turn_script_through_the_endpoint(client, engine, teacher_forced):
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}]
    turns = SCRIPT["turns"]
    for i, turn in enumerate(turns):
        data = post_chat(client, model="script3", messages=messages, tools=[BASH_TOOL], logprobs=True,
                         return_token_ids=True)
        assert data["model"] == "script3"
        choice = data["choices"][0]
        msg = choice["message"]
        ids, prompt = choice["token_ids"], data["prompt_token_ids"]
        assert prompt == engine.tokenize_chat(messages, [BASH_TOOL])
        assert ids[-1] == engine.eos_token_id
        assert choice["finish_reason"] == ("tool_calls" if turn.get("tool_calls") else "stop")
        assert choice["stop_reason"] is None
        assert msg["content"] == turn.get("content")
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls", [])]
        assert got == [(c["name"], c["arguments"]) for c in turn.get("tool_calls", [])]
        # Logprobs are the model's, by teacher forcing over prompt + scripted ids.
        lp = teacher_forced(prompt + ids)
        content = choice["logprobs"]["content"]
        assert len(content) == len(ids)
        for j, (tid, entry) in enumerate(zip(ids, content)):
            assert abs(entry["logprob"] - lp[len(prompt) + j - 1, tid].item()) <= TOL
        # The scripted ids are exactly what the chat template renders for that message next turn.
        assistant = {"role": "assistant", "content": msg["content"]}
        if msg.get("tool_calls"):
            assistant["tool_calls"] = msg["tool_calls"]
        full = engine.tokenize_chat(messages + [assistant], [BASH_TOOL], add_generation_prompt=False)
        assert full[: len(prompt) + len(ids)] == prompt + ids
        messages = messages + [assistant]
        for c in msg.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": "ok"})
        if not msg.get("tool_calls"):
            messages.append({"role": "user", "content": "And now?"})
    # Past the script: normal sampling takes over.
    data = post_chat(client, model="script3", messages=messages, tools=[BASH_TOOL], max_tokens=5, seed=0,
                     ignore_eos=True, return_token_ids=True)
    assert len(data["choices"][0]["token_ids"]) == 5 and data["choices"][0]["finish_reason"] == "length"


def test_parallel_conversations_walk_the_same_script(client):
    a = post_chat(client, model="script3", messages=[{"role": "user", "content": "one"}], tools=[BASH_TOOL])
    b = post_chat(client, model="script3", messages=[{"role": "user", "content": "two, longer"}], tools=[BASH_TOOL])
    ca, cb = a["choices"][0]["message"]["tool_calls"], b["choices"][0]["message"]["tool_calls"]
    assert [c["function"] for c in ca] == [c["function"] for c in cb]
    assert ca[0]["id"] != cb[0]["id"]


def test_max_tokens_truncates_script_turn(client, engine):
    msgs = [{"role": "user", "content": "go"}]
    full = post_chat(client, model="script3", messages=msgs, tools=[BASH_TOOL], return_token_ids=True)
    ids = full["choices"][0]["token_ids"]
    short = post_chat(client, model="script3", messages=msgs, tools=[BASH_TOOL], max_tokens=len(ids) - 3,
                      return_token_ids=True, logprobs=True)
    choice = short["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["token_ids"] == ids[: len(ids) - 3] and engine.eos_token_id not in choice["token_ids"]
    assert len(choice["logprobs"]["content"]) == len(ids) - 3


def test_script_without_tools_in_request_returns_text(client):
    data = post_chat(client, model="script3", messages=[{"role": "user", "content": "go"}])
    choice = data["choices"][0]
    assert "tool_calls" not in choice["message"] and "<tool_call>" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop"


def test_scripted_top_logprobs(client, teacher_forced):
    data = post_chat(client, model="script3", messages=[{"role": "user", "content": "go"}], tools=[BASH_TOOL],
                     logprobs=True, top_logprobs=2, return_token_ids=True)
    prompt, ids = data["prompt_token_ids"], data["choices"][0]["token_ids"]
    lp = teacher_forced(prompt + ids)
    for j, entry in enumerate(data["choices"][0]["logprobs"]["content"]):
        best = lp[len(prompt) + j - 1].max().item()
        assert len(entry["top_logprobs"]) == 2 and abs(entry["top_logprobs"][0]["logprob"] - best) <= TOL


def test_load_from_file_and_bare_list(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(SCRIPT["turns"]))
    pol = ScriptedPolicy.load(p)
    assert len(pol) == 3 and pol.name == "s"
    assert pol.turn_for([{"role": "user", "content": "x"}]) == 0
    assert pol.turn_for([{"role": "assistant", "content": "x"}] * 3) is None
    # Arguments given as a JSON string are normalised to the object.
    pol2 = ScriptedPolicy.from_obj([{"tool_calls": [{"name": "bash", "arguments": '{"command": "ls"}'}]}])
    assert pol2.turns[0].tool_calls[0]["arguments"] == {"command": "ls"}


@pytest.mark.parametrize("obj, needle", [
    ({"turns": []}, "no turns"),
    ({"turns": [{"content": 3}]}, "turn 0: content"),
    ({"turns": [{"content": "a"}, {}]}, "turn 1: needs"),
    ({"turns": [{"content": "a", "tool_calls": [{"arguments": {}}]}]}, "turn 0: tool_calls[0].name"),
    ({"turns": [{"tool_calls": [{"name": "x", "arguments": "nope"}]}]}, "turn 0: tool_calls[0].arguments"),
    ({"turns": [{"tool_calls": [{"name": "x", "arguments": [1]}]}]}, "turn 0: tool_calls[0].arguments"),
    ({"turns": [{"content": "a", "extra": 1}]}, "turn 0: unknown field"),
    ({"turns": [{"tool_calls": {"name": "x"}}]}, "turn 0: tool_calls must be a list"),
    ({"steps": []}, "unknown top-level"),
    ("nope", "expected"),
])
def test_validation_errors(obj, needle):
    with pytest.raises(ScriptError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        ScriptedPolicy.from_obj(obj)


def test_invalid_json_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ScriptError, match="bad.json: not valid JSON"):
        ScriptedPolicy.load(p)


@pytest.mark.parametrize("include", [False, True])
def test_a_stop_string_ends_a_scripted_turn_where_sampling_would(client, engine, teacher_forced, include):
    first = post_chat(client, model="script3", messages=[{"role": "user", "content": "Fix it."}], tools=[BASH_TOOL])
    call = first["choices"][0]["message"]["tool_calls"][0]
    messages = [{"role": "user", "content": "Fix it."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
    data = post_chat(client, model="script3", messages=messages, tools=[BASH_TOOL], stop=["tests", "never"],
                     include_stop_str_in_output=include, logprobs=True, return_token_ids=True)
    choice = data["choices"][0]  # the turn is "Now the tests." and a call: cut inside the text
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", "tests")
    assert choice["message"]["content"] == ("Now the tests" if include else "Now the ")
    assert "tool_calls" not in choice["message"]
    ids, prompt = choice["token_ids"], data["prompt_token_ids"]
    assert "tests" in engine.decode(ids) and "tests" not in engine.decode(ids[:-1])  # up to the completing token
    lp = teacher_forced(prompt + ids)
    content = choice["logprobs"]["content"]
    assert len(content) == len(ids)
    assert all(abs(e["logprob"] - lp[len(prompt) + j - 1, t].item()) <= TOL for j, (t, e) in enumerate(zip(ids, content)))
