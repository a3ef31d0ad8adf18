"""Chains by their tip: a radix tree over token ids, for ``prefix_merging``'s chain search.

A completion continues a chain whose tip (last prompt) is a strict prefix of its prompt. Asking
every open chain costs a comparison per chain; walking the prompt down a radix tree of the tips
finds all of them at once, at the cost of comparing the prompt once (list slices, compared in C)
plus one dict lookup per branching point on its path -- however many chains are open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(eq=False)
class Node(Generic[T]):
    label: list[int]  # the ids on the edge from the parent
    depth: int  # ids from the root to the end of this node's label
    parent: "Node[T] | None" = None
    children: "dict[int, Node[T]]" = field(default_factory=dict)  # by the first id of their label
    items: list[T] = field(default_factory=list)  # whatever ends exactly here


@dataclass
class Probe(Generic[T]):
    """A walk down the tree: ``items`` end at strict prefixes of the ids; the walk stopped at
    ``node`` (``depth`` ids matched) and an insert of the same ids resumes there."""

    ids: list[int]
    items: list[T]
    node: Node[T]


class TipIndex(Generic[T]):
    def __init__(self) -> None:
        self.root: Node[T] = Node([], 0)

    def probe(self, ids: list[int]) -> Probe[T]:
        node, n, found = self.root, len(ids), []
        while True:
            d = node.depth
            if node.items and d < n:
                found += node.items
            child = node.children.get(ids[d]) if d < n else None
            if child is None or child.depth > n or ids[d:child.depth] != child.label:
                return Probe(ids, found, node)
            node = child

    def insert(self, probe: Probe[T], item: T) -> Node[T]:
        """Adds ``item`` at ``probe.ids``; the tree must not have changed since the probe."""
        ids, node = probe.ids, probe.node
        d, n = node.depth, len(ids)
        if d < n and (child := node.children.get(ids[d])) is not None:
            # The ids leave (or end inside) the child's edge: split it where they part.
            shared = _shared_prefix(ids, d, child.label)
            node = self._split(child, shared)
            d = node.depth
        if d < n:
            leaf: Node[T] = Node(ids[d:], n, node)
            node.children[ids[d]] = leaf
            node = leaf
        node.items.append(item)
        return node

    def remove(self, node: Node[T], item: T) -> None:
        """Drops ``item`` from ``node``, folding the node away when it no longer marks a tip."""
        del node.items[next(i for i, x in enumerate(node.items) if x is item)]
        parent = node.parent
        if node.items or parent is None:
            return
        if not node.children:
            del parent.children[node.label[0]]
            if len(parent.children) == 1 and not parent.items and parent.parent is not None:
                self._merge_into_child(parent)
        elif len(node.children) == 1:
            self._merge_into_child(node)

    @staticmethod
    def _split(child: Node[T], at: int) -> Node[T]:
        """A node ``at`` ids into ``child``'s edge, between its parent and it."""
        parent = child.parent
        assert parent is not None and 0 < at <= len(child.label)
        if at == len(child.label):
            return child
        mid: Node[T] = Node(child.label[:at], parent.depth + at, parent)
        parent.children[child.label[0]] = mid
        child.label = child.label[at:]
        child.parent = mid
        mid.children[child.label[0]] = child
        return mid

    @staticmethod
    def _merge_into_child(node: Node[T]) -> None:
        parent = node.parent
        assert parent is not None
        [child] = node.children.values()
        child.label = node.label + child.label
        child.parent = parent
        parent.children[child.label[0]] = child


def _shared_prefix(ids: list[int], start: int, label: list[int]) -> int:
    """How many ids of ``label`` equal ``ids[start:]``: galloping then halving over slice
    comparisons, so a long shared run costs C comparisons, not a Python loop per id."""
    limit = min(len(ids) - start, len(label))
    j, step = 0, 1
    while j + step <= limit and ids[start + j:start + j + step] == label[j:j + step]:
        j += step
        step *= 2
    while step > 1:  # the mismatch (or the limit) lies in [j, j + step)
        step //= 2
        if j + step <= limit and ids[start + j:start + j + step] == label[j:j + step]:
            j += step
    return j
