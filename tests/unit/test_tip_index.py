"""The radix tree behind prefix_merging's chain search, against a plain list of tips: a probe
finds exactly the items whose ids are a strict prefix, however the tree was split and folded."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.builders.tip_index import Node, TipIndex, _shared_prefix

SCALE = max(1, int(os.environ.get("POLAR_HYPOTHESIS_SCALE", "1")))
IDS = st.lists(st.integers(0, 2), max_size=10)  # three ids: tips share prefixes and part anywhere


class Item:
    def __init__(self, n: int) -> None:
        self.n = n


def check_shape(index: TipIndex) -> int:
    """Every edge has ids and is indexed by its first one, every node's source runs through its
    parent's path, and every node but the root marks a tip or branches (no chain of stale nodes
    a probe would have to walk). Returns the number of nodes."""
    nodes, stack = 0, [index.root]
    while stack:
        node: Node = stack.pop()
        nodes += 1
        for first, child in node.children.items():
            assert child.parent is node and child.depth > node.depth and child.source[node.depth] == first
            assert child.source[:node.depth] == node.source[:node.depth]
            assert child.items or len(child.children) >= 2
            stack.append(child)
    return nodes


@settings(max_examples=300 * SCALE, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "move", "remove"]), IDS, st.integers(0, 99)), max_size=60))
def test_probe_finds_exactly_the_strict_prefixes(ops):
    index: TipIndex = TipIndex()
    live: dict[Item, tuple[list[int], Node]] = {}
    for n, (op, ids, pick) in enumerate(ops):
        probe = index.probe(ids)
        expected = {item for item, (tip, _) in live.items() if len(tip) < len(ids) and ids[:len(tip)] == tip}
        assert set(probe.items) == expected and len(probe.items) == len(expected)
        chosen = sorted(live, key=lambda i: i.n)[pick % len(live)] if live else None
        if op == "add" or chosen is None:
            item = Item(n)
            live[item] = (ids, index.insert(probe, item))
        elif op == "move" and live[chosen][0] != ids:  # a chain moving on: new tip first, then the old one goes
            node = index.insert(probe, chosen)
            index.remove(live[chosen][1], chosen)
            live[chosen] = (ids, node)
        elif op == "remove":
            index.remove(live.pop(chosen)[1], chosen)
        check_shape(index)
        assert all(item in node.items and node.source[:node.depth] == tip for item, (tip, node) in live.items())


def test_a_long_conversation_keeps_the_tree_one_edge_deep():
    index: TipIndex = TipIndex()
    item, tip = Item(0), list(range(50))
    node = index.insert(index.probe(tip), item)
    for turn in range(200):
        longer = tip + [7, turn, 8]
        probe = index.probe(longer)
        assert probe.items == [item]
        new = index.insert(probe, item)
        index.remove(node, item)
        node, tip = new, longer
    assert check_shape(index) == 2 and node.parent is index.root and node.source is tip  # one leaf: no copies


@given(st.lists(st.integers(0, 1), max_size=70), st.lists(st.integers(0, 1), max_size=70), st.integers(0, 5),
       st.integers(0, 80))
def test_shared_prefix_is_the_common_run(a, b, start, stop):
    start, stop = min(start, len(a), len(b)), min(max(stop, start), len(b))
    pairs = list(zip(a[start:stop], b[start:stop]))
    expected = next((i for i, (x, y) in enumerate(pairs) if x != y), len(pairs))
    assert _shared_prefix(a, b, start, stop) == expected
