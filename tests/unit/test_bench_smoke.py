"""The benchmarks run by hand (bench/); their pure parts run here at toy sizes so a refactor
cannot break them unnoticed."""

from __future__ import annotations

import json

from bench import blob_bench, chat_requests, merge_bench, record_bench
from bench.proxy_bench import _dumps
from infra import fake_upstream
from proxy import upstream


def test_record_bench_converts_and_records_every_provider():
    answer = json.dumps(record_bench.engine_answer()).encode()
    for name, body in record_bench.requests().items():
        parse_ms, convert_ms, record = record_bench.one(name, body, answer)
        assert parse_ms >= 0 and convert_ms >= 0 and len(record) > 1000


def test_merge_bench_session_merges_into_its_conversations():
    records = merge_bench.session(conversations=2, turns=3, base=50, response=5, tool=4)
    assert merge_bench.timed(records, repeat=1) > 0


def test_merge_bench_times_a_git_revision_beside_this_tree():
    records = merge_bench.session(conversations=3, turns=3, base=50, response=5, tool=4, shared=30)
    here = merge_bench.builders.create("prefix_merging", {"end_of_turn_token_id": merge_bench.EOT})
    # measure() checks both builders find the 3 conversations and agree on every chain.
    times = merge_bench.measure(records, [here, merge_bench.builder_at("HEAD")], repeat=1, conversations=3)
    assert len(times) == 2 and min(times) > 0


def test_blob_bench_measures_both_shapes_and_formats():
    for make in (blob_bench.merged, blob_bench.per_request):
        m = blob_bench.measure(make(3000, messages=True), repeat=1)
        assert 2000 < m["tokens"] <= 3000 and m["v3"]["bpt"] <= m["v2"]["bpt"] < m["v1"]["bpt"]
        assert all(m[v]["numpy"] > 0 and m[v]["dec"] > 0 for v in ("v1", "v2", "v3"))


def test_proxy_bench_requests_and_the_fake_engines_agent_turn():
    ten, long = chat_requests.coding_turns(), chat_requests.long_conversation()
    assert len(ten["messages"]) == 10 and 4400 < len(_dumps(ten)) < 4700
    assert [m["role"] for m in ten["messages"][:4]] == ["system", "user", "assistant", "tool"]
    assert len(_dumps(long)) >= 32_768 * 4
    raw = _dumps(ten)
    answer = fake_upstream._agent_turn(ten, raw)
    captured = upstream.create("vllm").extract(answer)  # the shape the proxy records from vLLM
    assert len(captured.prompt_ids) == len(raw) // 4 and len(captured.response_ids) == 48
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"


def test_proxy_instructions_drives_model_calls_through_the_proxy_app(r, redis_url):
    from bench import proxy_instructions
    from tests.support import records, running_session

    key = running_session(redis_url)
    proxy_instructions.drive(2, redis_url, key, "coding_turns")
    done, _ = records(redis_url, key)
    assert len(done) == 22 and all(len(c["prompt_ids"]) == 1144 and len(c["response_ids"]) == 48 for c in done)
