"""The verifier on real captured sessions: a faithful merge verifies to 1e-4; tampering is
caught; a template that strips reasoning from history makes merged turns drift, which the
builder flags, the verifier measures, and strict mode avoids."""

from __future__ import annotations

import redis

from pipeline import builders, keys
from pipeline.builders import BuildContext
from pipeline.codec import unpack
from pipeline.schemas import CompletionRecord
from proxy.verify import Verifier
from tests.proxy.sdk_drivers import ChatDriver, GoogleDriver
from tests.support import running_session, sid_of


def session_records(stack, driver) -> list[CompletionRecord]:
    key = running_session(stack.settings.redis_url)
    driver(stack.settings.proxy_url, key).weather(stream=False)
    r = redis.Redis.from_url(stack.settings.redis_url)
    return [CompletionRecord.model_validate(unpack(b)) for b in r.lrange(keys.session_completions(sid_of(key)), 0, -1)]


def merge(records, **config):
    return builders.create("prefix_merging", config).build(records, BuildContext("s", "t", "shell", {}))


def test_faithful_merge_verifies_and_tampering_is_caught(ref_stack):
    records = session_records(ref_stack, GoogleDriver)
    traj = merge(records)
    [trace] = traj.traces  # the two turns of the tool round trip are one conversation
    assert len(trace.metadata["turns"]) == 2 and trace.metadata["context_exact"]
    verifier = Verifier(ref_stack.settings.upstream_url, "sdk-tools")
    report = verifier.verify(traj, records)
    assert report.ok and report.traces[0].max_abs_diff <= 1e-4, report.summary()
    assert report.traces[0].trainable == sum(len(r.response_ids) for r in records)
    assert report.traces[0].masked > 0 and report.traces[0].id_mismatches == 0

    turn = trace.metadata["turns"][1]
    bad = trace.model_copy(deep=True)
    bad.response_logprobs[turn["response_start"]].logprob += 0.01  # a logprob from the wrong policy
    assert verifier.verify_trace(0, bad).violations == 1
    swapped = trace.model_copy(deep=True)
    j = turn["response_start"] + 1
    swapped.response_ids[j] = (swapped.response_ids[j] + 7) % 4000  # a token nobody sampled
    swapped.response_logprobs[j].token_id = swapped.response_ids[j]
    rep = verifier.verify_trace(0, swapped, {r.completion_id: r for r in records})
    assert rep.id_mismatches and rep.violations >= 1 and not rep.ok


def test_reasoning_stripped_from_history_drifts_and_strict_mode_splits(strip_stack):
    stack, _ = strip_stack
    records = session_records(stack, ChatDriver)
    first, second = records[0], records[1]
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids  # still one chain by tokens
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.response_ids)] != first.prompt_ids + first.response_ids

    merged = merge(records)
    [trace] = merged.traces
    assert [t["context_matches"] for t in trace.metadata["turns"]] == [True, False]
    assert merged.metadata["reconstruction"]["drifted_turns"] == 1
    verifier = Verifier(stack.settings.upstream_url, "sdk-tools")
    report = verifier.verify(merged, records)
    [t] = report.traces
    assert t.violations == 0 and t.id_mismatches == 0  # every trainable id is still the sampled one
    assert len(t.drifted_turns) == 1 and t.drifted_turns[0].max_abs_diff > 1e-3  # but scored in another context
    assert report.ok and not Verifier(stack.settings.upstream_url, "sdk-tools", fail_on_drift=True).verify(merged).ok

    strict = merge(records, strict=True)
    assert len(strict.traces) == 2 and strict.metadata["reconstruction"]["strict_splits"] == 1
    strict_report = verifier.verify(strict, records)
    assert strict_report.ok and not any(t.drifted_turns for t in strict_report.traces)
    assert max(t.max_abs_diff for t in strict_report.traces) <= 1e-4


def test_per_request_billing_lines_do_not_break_the_chain(ref_stack):
    import anthropic

    from tests.proxy.sdk_drivers import RESULTS, AnthropicDriver

    key = running_session(ref_stack.settings.redis_url)
    sdk = anthropic.Anthropic(base_url=f"{ref_stack.settings.proxy_url}/s/{key}", api_key=key, max_retries=0)

    def system(n):  # Claude Code's first system block changes on every request
        return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197; cch={n:05x};"},
                {"type": "text", "text": "You are a weather bot."}]

    messages = [{"role": "user", "content": "What is the weather in Paris and Rome?"}]
    msg = sdk.messages.create(model="sdk-tools", max_tokens=512, system=system(1), messages=messages,
                              tools=AnthropicDriver.tools)
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": RESULTS[b.input["city"]]}
                                              for b in msg.content if b.type == "tool_use"]}]
    sdk.messages.create(model="sdk-tools", max_tokens=512, system=system(2), messages=messages,
                        tools=AnthropicDriver.tools)
    r = redis.Redis.from_url(ref_stack.settings.redis_url)
    records = [CompletionRecord.model_validate(unpack(b)) for b in r.lrange(keys.session_completions(sid_of(key)), 0, -1)]
    assert all(rec.normalizations == ["anthropic_billing_header"] for rec in records)
    assert all("billing" not in rec.normalized_request["messages"][0]["content"] for rec in records)
    assert "cch=00001" in str(records[0].original_request["system"])  # the original is kept verbatim
    assert len(merge(records).traces) == 1


def test_sglang_sessions_are_scored_through_its_native_generate(sglang_stack):
    records = session_records(sglang_stack, ChatDriver)
    traj = merge(records)
    verifier = Verifier(sglang_stack.settings.upstream_url, "sdk-tools", engine="sglang")
    assert verifier.engine.score_path == "/generate"
    report = verifier.verify(traj, records)
    assert report.ok and report.traces[0].max_abs_diff <= 1e-4, report.summary()
    assert report.traces[0].trainable == sum(len(r.response_ids) for r in records)
    bad = traj.traces[0].model_copy(deep=True)
    first = next(i for i, m in enumerate(bad.loss_mask) if m)
    bad.response_logprobs[first].logprob -= 0.05
    assert verifier.verify_trace(0, bad).violations == 1
