"""Chains by their tip: a radix tree over token ids, for ``prefix_merging``'s chain search.

A completion continues a chain whose tip (last prompt) is a strict prefix of its prompt. Asking
every open chain costs a comparison per chain; walking the prompt down a radix tree of the tips
finds all of them at once, at the cost of comparing the prompt once (list slices, compared in C)
plus one dict lookup per branching point on its path -- however many chains are open.

Edges copy no ids: a node keeps a ``source`` list whose first ``depth`` ids are its path (any tip
below it), so its edge is ``source[parent.depth:depth]`` and folding a node into its child, which
a chain moving on does on every turn, is a pointer change, not a copy of a 30k-id prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(eq=False)
class Node(Generic[T]):
    source: list[int]  # its first ``depth`` ids are the path from the root to this node
    depth: int
    parent: "Node[T] | None" = None
    children: "dict[int, Node[T]]" = field(default_factory=dict)  # by the first id of their edge
    items: list[T] = field(default_factory=list)  # whatever ends exactly here


@dataclass
class Probe(Generic[T]):
    """A walk down the tree: ``items`` end at strict prefixes of the ids; the walk stopped at
    ``node`` (its ``depth`` ids matched) and an insert of the same ids resumes there."""

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
            if child is None or child.depth > n or not _same_run(ids, child.source, d, child.depth):
                return Probe(ids, found, node)
            node = child

    def near(self, probe: Probe[T], max_extra: int, max_nodes: int = 64) -> tuple[int, list[T]]:
        """Where no tip is a prefix of ``probe.ids``: how many of its ids run along the tree
        (``shared``) and the tips that go on from there by at most ``max_extra`` ids -- a prompt
        whose last few ids the next prompt does not repeat (a template's generation prompt). Only
        the branch the ids ran into is walked, no deeper than ``max_extra`` and through
        ``max_nodes`` nodes at most (where many conversations part at one point, their tips are
        far below it: the walk stays bounded however many are open)."""
        ids, node = probe.ids, probe.node
        d, shared, start = node.depth, node.depth, node
        if d < len(ids) and (child := node.children.get(ids[d])) is not None:
            shared, start = d + _shared_prefix(ids, child.source, d, child.depth), child
        found: list[T] = []
        stack = [start] if start is not node else list(node.children.values())[:max_nodes]
        visited = 0
        while stack and visited < max_nodes:
            x = stack.pop()
            visited += 1
            if x.depth - shared <= max_extra:
                found += x.items
                stack.extend(x.children.values())
        return shared, found

    def insert(self, probe: Probe[T], item: T) -> Node[T]:
        """Adds ``item`` at ``probe.ids``; the tree must not have changed since the probe."""
        ids, node = probe.ids, probe.node
        d, n = node.depth, len(ids)
        if d < n and (child := node.children.get(ids[d])) is not None:
            # The ids leave (or end inside) the child's edge: split it where they part.
            node = self._split(child, d + _shared_prefix(ids, child.source, d, child.depth))
            d = node.depth
        if d < n:
            leaf: Node[T] = Node(ids, n, node)
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
            del parent.children[node.source[parent.depth]]
            if len(parent.children) == 1 and not parent.items and parent.parent is not None:
                self._fold_into_child(parent)
        elif len(node.children) == 1:
            self._fold_into_child(node)

    @staticmethod
    def _split(child: Node[T], depth: int) -> Node[T]:
        """A node at ``depth`` on ``child``'s edge, between its parent and it."""
        parent = child.parent
        assert parent is not None and parent.depth < depth <= child.depth
        if depth == child.depth:
            return child
        mid: Node[T] = Node(child.source, depth, parent)
        parent.children[child.source[parent.depth]] = mid
        mid.children[child.source[depth]] = child
        child.parent = mid
        return mid

    @staticmethod
    def _fold_into_child(node: Node[T]) -> None:
        parent = node.parent
        assert parent is not None
        [child] = node.children.values()  # its source runs through this node's path too
        child.parent = parent
        parent.children[child.source[parent.depth]] = child


def _same_run(ids: list[int], source: list[int], start: int, stop: int) -> bool:
    """``ids[start:stop] == source[start:stop]``, slicing only what must be sliced."""
    if start == 0 and stop == len(source):
        return (ids if stop == len(ids) else ids[:stop]) == source
    return ids[start:stop] == source[start:stop]


def _shared_prefix(ids: list[int], source: list[int], start: int, stop: int) -> int:
    """How many ids from ``start`` on agree in ``ids`` and ``source[:stop]``: galloping then
    halving over slice comparisons, so a long shared run costs C comparisons, not a Python loop
    per id."""
    limit = min(len(ids), stop) - start
    j, step = 0, 1
    while j + step <= limit and _same_run(ids, source, start + j, start + j + step):
        j += step
        step *= 2
    while step > 1:  # the mismatch (or the limit) lies in [j, j + step)
        step //= 2
        if j + step <= limit and _same_run(ids, source, start + j, start + j + step):
            j += step
    return j
