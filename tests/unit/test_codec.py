"""JSON nesting limits (pipeline/codec.py): the level-by-level walk agrees with a plain recursive
depth on arbitrary JSON, exactly at the limit."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pipeline.codec import nesting_depth_exceeds

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
                    max_leaves=40)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@given(JSON)
def test_walk_agrees_with_recursive_depth(value):
    d = depth(value)
    assert not nesting_depth_exceeds(value, d)
    if d:
        assert nesting_depth_exceeds(value, d - 1)


def test_deep_chains_without_recursion():
    value: Any = "leaf"
    for i in range(5000):
        value = [value] if i % 2 else {"k": value}
    assert nesting_depth_exceeds(value, 4999) and not nesting_depth_exceeds(value, 5000)
