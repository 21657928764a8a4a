"""The prefix cache: which token sequences have KV we can reuse, and where it lives.

A KV sequence lives in one of two places:

- **resident**: in a sequence slot of the llama.cpp context (a slot keeps its
  KV after its request ends, so the next turn of a chat finds it there);
- **spilled**: copied out to host RAM (``llama_state_seq_get_data``) when its
  slot had to be given to another request, within a byte budget, oldest
  dropped first.

:class:`RadixTree` indexes both by their tokens, so a new prompt finds the
holder sharing its longest prefix in one walk down the tree (the shape of
SGLang's radix cache: edges labelled with token runs, split where sequences
diverge). The engine decides what to do with a match (take the slot, copy
its cells, restore the spilled bytes); this module only keeps the books.

Why copies and not shared cells: the context keeps one KV stream per
sequence (see :class:`localllm.backends.llama_cpp.Context`) because with a
unified cache a sequence's logits change with what else is batched, so
greedy output would depend on the neighbours. Reusing a prefix therefore
copies cells, which is still no recomputation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

H = TypeVar("H", bound=Hashable)


@dataclass(eq=False)
class _Node(Generic[H]):
    key: tuple[int, ...] = ()  # the tokens on the edge from the parent
    children: dict[int, _Node[H]] = field(default_factory=dict)
    holders: set[H] = field(default_factory=set)  # every holder whose tokens pass through this node


class RadixTree(Generic[H]):
    """Token sequences, each owned by a holder; longest-prefix lookup.

    A holder owns at most one sequence at a time: inserting again replaces it.
    """

    def __init__(self) -> None:
        self._root: _Node[H] = _Node()
        self._tokens: dict[H, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, holder: object) -> bool:
        return holder in self._tokens

    def tokens(self, holder: H) -> tuple[int, ...]:
        return self._tokens[holder]

    def insert(self, tokens: Sequence[int], holder: H) -> None:
        """Record that ``holder`` holds ``tokens`` (replacing what it held before)."""
        self.remove(holder)
        key = tuple(tokens)
        self._tokens[holder] = key
        node, i = self._root, 0
        node.holders.add(holder)
        while i < len(key):
            child = node.children.get(key[i])
            if child is None:
                child = node.children[key[i]] = _Node(key=key[i:])
            else:
                m = _common(child.key, key, i)
                if m < len(child.key):
                    child = self._split(node, child, m)
            child.holders.add(holder)
            node, i = child, i + len(child.key)

    def remove(self, holder: H) -> None:
        """Forget ``holder``'s sequence (no-op when it holds none)."""
        key = self._tokens.pop(holder, None)
        if key is None:
            return
        node, i = self._root, 0
        node.holders.discard(holder)
        while i < len(key):
            child = node.children[key[i]]
            child.holders.discard(holder)
            if not child.holders:  # nobody else below: drop the whole branch
                del node.children[key[i]]
                return
            node, i = child, i + len(child.key)

    def match(self, tokens: Sequence[int]) -> tuple[int, set[H]]:
        """The longest prefix of ``tokens`` some holder shares, and every holder sharing it."""
        node, i = self._root, 0
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                break
            m = _common(child.key, tokens, i)
            if m < len(child.key):
                return i + m, set(child.holders)
            node, i = child, i + m
        return (i, set(node.holders)) if i else (0, set())

    def ends_along(self, tokens: Sequence[int]) -> list[tuple[int, set[H]]]:
        """The holders whose whole sequence is a prefix of ``tokens``, grouped by its length, longest first.

        A recurrent model's state can resume only where it was saved, at the end of a holder's sequence,
        never inside it.
        """
        found: list[tuple[int, set[H]]] = []
        node, i = self._root, 0
        while True:
            ends = {holder for holder in node.holders if len(self._tokens[holder]) == i}
            if ends and i:
                found.append((i, ends))
            child = node.children.get(tokens[i]) if i < len(tokens) else None
            if child is None or _common(child.key, tokens, i) < len(child.key):
                return found[::-1]
            node, i = child, i + len(child.key)

    def covers(self, tokens: Sequence[int], besides: H, exactly: bool = False) -> bool:
        """Whether a holder other than ``besides`` holds all of ``tokens`` (perhaps followed by more, unless
        ``exactly``)."""
        if exactly:
            return any(n == len(tokens) and holders - {besides} for n, holders in self.ends_along(tokens)[:1])
        n, holders = self.match(tokens)
        return n == len(tokens) and bool(holders - {besides})

    def check(self) -> None:
        """Assert that every holder's path exists and every node lists exactly the holders passing through it."""
        through: dict[int, set[H]] = {}
        for holder, key in self._tokens.items():
            node, i = self._root, 0
            while i < len(key):
                child = node.children.get(key[i])
                assert child is not None and tuple(key[i : i + len(child.key)]) == child.key, f"{holder} has no path"
                through.setdefault(id(child), set()).add(holder)
                node, i = child, i + len(child.key)

        def walk(node: _Node[H]) -> None:
            for first, child in node.children.items():
                assert child.key and child.key[0] == first, "an edge under the wrong token"
                assert child.holders == through.get(id(child), set()), "a node's holders are wrong"
                walk(child)

        walk(self._root)

    @staticmethod
    def _split(parent: _Node[H], child: _Node[H], m: int) -> _Node[H]:
        """Cut ``child``'s edge after ``m`` tokens; returns the new middle node."""
        middle = _Node(key=child.key[:m], holders=set(child.holders))
        parent.children[child.key[0]] = middle
        child.key = child.key[m:]
        middle.children[child.key[0]] = child
        return middle


def _common(edge: tuple[int, ...], tokens: Sequence[int], start: int) -> int:
    """How many leading tokens of ``edge`` equal ``tokens[start:]``."""
    n = min(len(edge), len(tokens) - start)
    for j in range(n):
        if edge[j] != tokens[start + j]:
            return j
    return n


@dataclass(eq=False)
class Spilled:
    """One sequence's KV state copied to host RAM, restorable into any slot (for a recurrent model: a
    checkpoint, the state after exactly ``tokens``)."""

    tokens: tuple[int, ...]
    state: bytes


class HostSpill:
    """Spilled sequences within a byte budget; the least recently used go first."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self._entries: OrderedDict[Spilled, None] = OrderedDict()

    def __iter__(self) -> Iterator[Spilled]:
        return iter(list(self._entries))  # a snapshot: callers discard entries while iterating

    def __contains__(self, entry: object) -> bool:
        return entry in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, entry: Spilled) -> list[Spilled]:
        """Keep ``entry``; returns the entries dropped to make room (``entry`` itself if it can never fit)."""
        if len(entry.state) > self.budget:
            return [entry]
        dropped = []
        while self.used + len(entry.state) > self.budget:
            oldest = next(iter(self._entries))
            self.discard(oldest)
            dropped.append(oldest)
        self._entries[entry] = None
        self.used += len(entry.state)
        return dropped

    def touch(self, entry: Spilled) -> None:
        """Mark ``entry`` recently used (if it is still kept)."""
        if entry in self._entries:
            self._entries.move_to_end(entry)

    def discard(self, entry: Spilled) -> None:
        if entry in self._entries:
            del self._entries[entry]
            self.used -= len(entry.state)
