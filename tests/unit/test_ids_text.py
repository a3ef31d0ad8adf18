"""proxy/upstream/ids_text.py: an engine answer parsed with its prompt ids left as their JSON text
gives exactly what a full parse gives (the text parses to the same ids, the count is theirs), and
anything that is not a plain top-level array of non-negative integers is parsed whole."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.codec import unpack
from pipeline.schemas import CompletionRecord
from proxy.capture import build_record
from proxy.upstream.base import Captured
from proxy.upstream.ids_text import IdsText, parse_answer

KEY = "prompt_token_ids"
IDS = st.lists(st.integers(0, 2**40), max_size=80)
OTHER = st.dictionaries(st.text(max_size=6).filter(lambda k: k != KEY),
                        st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=30)
                        | st.lists(st.integers(0, 9), max_size=5),
                        max_size=5)


def plain(value):
    """A parse_answer result with its IdsText as the list it stands for."""
    return {k: (v.ids() if isinstance(v, IdsText) else v) for k, v in value.items()}


@given(IDS, OTHER, st.booleans())
def test_ids_kept_as_text_parse_to_what_a_full_parse_gives(ids, other, first):
    body = {KEY: ids, **other} if first else {**other, KEY: ids}
    data = orjson.dumps(body)  # compact, as engines write it
    got = parse_answer(data, KEY)
    assert isinstance(got[KEY], IdsText) and len(got[KEY]) == len(ids)
    assert plain(got) == orjson.loads(data)


@given(IDS.filter(lambda ids: len(ids) > 1), OTHER)
def test_a_spaced_array_is_parsed_whole(ids, other):
    data = json.dumps({KEY: ids, **other}).encode()  # ", " between ids
    got = parse_answer(data, KEY)
    assert got == orjson.loads(data) and not isinstance(got[KEY], IdsText)


@pytest.mark.parametrize("value", ['[1,-2]', '[1.0,2]', '[1,"2"]', '[[1],2]', '[01,2]', '[1,02]', '[1,,2]', '[,1]',
                                   '[1,]', '{"a":[1]}', 'null', '"[1,2]"', '[1,2'])
def test_what_is_not_a_plain_array_of_ids_is_parsed_whole(value):
    data = ('{"a":1,"' + KEY + '":' + value + ',"b":[3]}').encode()
    try:
        want = orjson.loads(data)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            parse_answer(data, KEY)
        return
    got = parse_answer(data, KEY)
    assert got == want and not isinstance(got[KEY], IdsText)


def test_the_key_only_counts_at_the_top_level_once_and_never_inside_a_string():
    nested = orjson.dumps({"choices": [{KEY: [1, 2]}], "x": 1})
    assert parse_answer(nested, KEY) == orjson.loads(nested)
    twice = orjson.dumps({"choices": [{KEY: [1, 2]}], KEY: [3, 4]})
    assert parse_answer(twice, KEY) == orjson.loads(twice)  # parsed whole: no IdsText
    quoted = orjson.dumps({"content": f'"{KEY}":[9,9]', KEY: [5]})  # the text in a string is escaped
    got = parse_answer(quoted, KEY)
    assert isinstance(got[KEY], IdsText) and got[KEY].ids() == [5] and got["content"] == f'"{KEY}":[9,9]'
    only_in_string = orjson.dumps({"content": f'"{KEY}":[9,9]'})
    assert parse_answer(only_in_string, KEY) == orjson.loads(only_in_string)


def test_invalid_json_still_raises_and_no_key_means_a_plain_parse():
    with pytest.raises(orjson.JSONDecodeError):
        parse_answer(b'{"' + KEY.encode() + b'":[1,2],', KEY)
    data = orjson.dumps({KEY: [1, 2]})
    assert parse_answer(data, None) == {KEY: [1, 2]}
    assert parse_answer(b"[1,2]", KEY) == [1, 2]


@settings(deadline=None)  # the first example builds pydantic's validators
@given(IDS.map(lambda ids: [i % 2**32 for i in ids]))
def test_a_record_reads_back_the_same_prompt_ids_either_way(ids):
    def record(prompt_ids):
        captured = Captured(prompt_ids=prompt_ids, response_ids=[7], response_logprobs=[-0.5], response_tokens=["x"],
                            finish_reason="stop", stop_reason=None)
        return CompletionRecord.model_validate(unpack(build_record(
            session_id="s", seq=1, provider="openai_chat", stream=False, model="m", captured=captured,
            original={"model": "m"}, normalized={"model": "m"}, upstream={"choices": [{}]}, response_message={},
            started_at=0.0, finished_at=0.0, latency_ms=0.0, upstream_url="u", policy_version=None)))

    as_text = parse_answer(orjson.dumps({KEY: ids}), KEY)[KEY]
    assert record(as_text).prompt_ids == record(list(ids)).prompt_ids == ids
