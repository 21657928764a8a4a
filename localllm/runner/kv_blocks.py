"""The native engine's KV blocks: reference counts, the prefix index over blocks, and the host-RAM tier.

The C pool holds ``n_blocks`` blocks of ``block_size`` positions; a sequence
is a list of block ids (its block table). This module decides which block
holds what; the C side only reads and writes the cells the tables name.

A *full* block's KV is a function of every token from position 0 to its
end, so full blocks are indexed by that token path: a tree whose edges are
block-sized token runs (SGLang's radix cache, with vLLM's fixed-size blocks).
A new prompt walks the tree one run at a time and takes every block it
finds, without copying; where it diverges inside a block, the block sharing
the longest run with it is copied once (copy on write) and the prompt
continues from there. A finished sequence's partly filled last block is
indexed too (a *partial* run, shorter than a block), so the next turn of a
chat starts from the last token of the previous one.

Invariants (:meth:`BlockPool.check` asserts them):

1. ``ref[b]`` is the number of sequences whose table holds block ``b``.
2. Every block is in exactly one state: *free* (ref 0, not indexed),
   *cached* (ref 0, indexed, evictable) or *in use* (ref > 0).
3. A sequence holds its whole path from the root, so a cached node's
   descendants are cached or gone: eviction takes the least recently
   released block, and a release queues a sequence's blocks last-first, so
   children always leave before their parents.
4. A node is in the tree only while it has a resident block, spilled bytes
   or children.

Evicted full blocks are copied to host RAM within a byte budget (least
recently used dropped first) and copied back when a prompt walks into them.
Below host RAM, the disk tier (:mod:`localllm.runner.kv_disk`) takes full
blocks that leave RAM, and every full block when the runner stops
(:meth:`BlockPool.persist`); a prompt walking past the end of the tree looks
its next blocks up there by their chained token hash (:attr:`Node.key`).

A model with recurrent layers (Gated DeltaNet) also keeps a per-sequence
state that sums up every token so far and cannot be cut back, and so does
one whose sliding-window layers keep only their window (gpt-oss, Gemma 4:
the window is in a ring of blocks a sequence, outside the pool, written over
as the sequence goes on). A pool made ``recurrent`` (the context has such a
state) keeps *snapshots* of that whole state beside the blocks: a
full node may hold the state a sequence had right after its run
(:attr:`Node.state`, taken by the engine at the block boundaries it
chooses), and a finished sequence's partial last run holds the state at
its end (the next turn of a chat resumes there). :meth:`BlockPool.match`
continues into such a partial run when the prompt holds all of it (copying
its block), else cuts what it found back to the deepest full node with a
snapshot (in RAM, or on disk under the node's key), and hands the snapshot
over with the blocks. Snapshots live in host RAM within their own budget
(least recently used out first, to the disk tier: full runs only), and go to
disk with their node when it leaves RAM and when the runner stops.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from localllm.runner.engine import CacheStats
from localllm.runner.kv_disk import ROOT_KEY, DiskTier, chain_key


class BlockStore(Protocol):
    """What the pool needs from the KV memory (the native context implements it)."""

    @property
    def block_bytes(self) -> int: ...

    def copy_block(self, dst: int, src: int) -> None: ...

    def read_block(self, block: int) -> bytes: ...

    def write_block(self, block: int, data: bytes) -> None: ...


@dataclass(eq=False)
class Node:
    """One indexed run of tokens: the KV of ``run`` after the path from the root to ``parent``."""

    run: tuple[int, ...]
    parent: Node | None
    block: int | None = None  # resident block, or None
    spilled: bytes | None = None  # the block's bytes in host RAM, or None
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)
    key: bytes = ROOT_KEY  # chained token hash of a full run: the disk tier's name for it
    state: bytes | None = None  # recurrent pools: a snapshot of the state right after ``run``, or None


@dataclass
class Placement:
    """What :meth:`BlockPool.match` found for a prompt: blocks now held for it, covering ``tokens`` positions."""

    blocks: list[int]
    nodes: list[Node | None]  # the indexed node of each block; None for a private (copied) block
    tokens: int
    restored: int = 0  # blocks copied back from host RAM
    matched: int = 0  # recurrent pools: the tokens the blocks matched before the cut back to a snapshot
    state: bytes | None = None  # recurrent pools: the state after ``tokens`` (None: start from nothing)


class BlockPool:
    """Reference-counted KV blocks, their prefix index and the host-RAM tier; see the module docstring."""

    def __init__(self, store: BlockStore, n_blocks: int, block_size: int, host_budget: int = 0,
                 disk: DiskTier | None = None, recurrent: bool = False, state_budget: int = 0) -> None:
        self.store = store
        self.recurrent = recurrent
        self.state_budget = state_budget  # host RAM for snapshots, apart from ``host_budget``
        self.state_used = 0
        self.disk = disk
        self.n_blocks = n_blocks
        self.block_size = block_size
        self.host_budget = host_budget
        self.host_used = 0
        self.ref = [0] * n_blocks
        self._shared = 0  # blocks with ref > 1, counted as refs change: counts() runs every engine step
        self.stats = CacheStats()
        self._free = list(range(n_blocks - 1, -1, -1))  # a stack: low ids first
        self._node_of: dict[int, Node] = {}  # indexed block -> its node
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached blocks, least recently released first
        self._host: OrderedDict[Node, None] = OrderedDict()  # spilled nodes, least recently used first
        self._states: OrderedDict[Node, None] = OrderedDict()  # nodes with a snapshot in RAM, least recently used first
        self.root = Node(run=(), parent=None)

    # -- sizes ----------------------------------------------------------------

    @property
    def available(self) -> int:
        """Blocks a sequence could take now: free ones and cached ones that can be evicted."""
        return len(self._free) + len(self._evictable)

    def blocks_for(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def counts(self) -> dict[str, int]:
        """Blocks in use, shared by several sequences, cached for reuse, and spilled to host RAM."""
        return {
            "total": self.n_blocks,
            "in_use": self.n_blocks - len(self._free) - len(self._evictable),  # a block is in one state (check)
            "shared": self._shared,
            "cached": len(self._evictable),
            "spilled": len(self._host),
            **({"snapshots": len(self._states)} if self.recurrent else {}),
        }

    # -- taking and growing ---------------------------------------------------

    def match(self, tokens: Sequence[int]) -> Placement:
        """Hold the blocks of the longest indexed prefix of ``tokens`` (restoring spilled ones).

        Full runs are shared as they are; where ``tokens`` continue into a
        block only in part, that block is copied into a private one. A
        recurrent pool cuts that back to its deepest snapshot instead
        (:attr:`Placement.state`). The caller owns the returned blocks
        (release them with :meth:`release`).
        """
        bs = self.block_size
        found = Placement(blocks=[], nodes=[], tokens=0)
        node = self.root
        from_disk: Iterator[bytes | None] | None = None  # the rest of the prompt's full runs, read ahead
        try:
            while found.tokens + bs <= len(tokens):
                run = tuple(tokens[found.tokens : found.tokens + bs])
                child = node.children.get(run)
                if child is None and self.disk is not None:
                    # past what RAM holds, every later run is a new node under the last: one read-ahead serves them
                    from_disk = from_disk or self.disk.read_ahead(self._chain(node.key, tokens, found.tokens))
                    child = self._from_disk(node, run, next(from_disk, None), found)
                if child is None or not self._make_resident(child, found):
                    break
                self._take(child.block)
                found.blocks.append(child.block)
                found.nodes.append(child)
                found.tokens += bs
                node = child
        finally:
            if from_disk is not None:
                from_disk.close()
        if self.recurrent:
            self._resume_point(tokens, found)
        else:
            self._copy_partial(node, tokens, found)
        return found

    def keep_state(self, node: Node, data: bytes) -> None:
        """Keep ``data``, the sequence's state right after ``node``'s run, as its snapshot (in RAM within the
        budget; the least recently used ones go to the disk tier to make room)."""
        assert self.recurrent, "a snapshot of a pool without recurrent state"
        if node.state is not None:
            return
        if len(data) > self.state_budget:
            self._state_to_disk(node, data)
            return
        while self.state_used + len(data) > self.state_budget:
            self._drop_state(next(iter(self._states)))
        node.state = data
        self._states[node] = None
        self.state_used += len(data)

    def _chain(self, key: bytes, tokens: Sequence[int], start: int) -> list[bytes]:
        """The keys of the full runs of ``tokens`` from ``start`` on, after the block whose key is ``key``."""
        keys, bs = [], self.block_size
        for i in range(start, len(tokens) - bs + 1, bs):
            key = chain_key(key, tokens[i : i + bs])
            keys.append(key)
        return keys

    def allocate(self) -> int | None:
        """A block for a sequence to write (ref 1, private), evicting the oldest cached one if needed."""
        if not self._free and not self._evict_one():
            return None
        block = self._free.pop()
        self.ref[block] = 1
        return block

    def commit(self, blocks: list[int], nodes: list[Node | None], tokens: Sequence[int]) -> None:
        """Index the sequence's blocks that ``tokens`` (all it holds now) fill completely.

        A run someone else indexed first keeps their block: this sequence's
        equal copy stays private and is freed with it (a recurrent pool's
        sequence, which recomputes runs after the snapshot it resumed from,
        takes the indexed block in its place: ``blocks`` changes).
        """
        bs = self.block_size
        parent = self.root
        for i in range(len(tokens) // bs):
            if nodes[i] is not None:
                parent = nodes[i]
                continue
            run = tuple(tokens[i * bs : (i + 1) * bs])
            node = parent.children.get(run)
            if node is None:
                node = parent.children[run] = Node(run=run, parent=parent, key=chain_key(parent.key, run))
            if node.block is None:
                self._drop_spilled(node)
                node.block = blocks[i]
                self._node_of[blocks[i]] = node
                nodes[i] = node
            elif node.block != blocks[i] and self.recurrent:  # recomputed after a snapshot: take the indexed block,
                self._take(node.block)  # equal bit for bit (batch invariance), so that later blocks index under it
                self.release([blocks[i]], [None], (), keep=False)
                blocks[i], nodes[i] = node.block, node
            elif node.block != blocks[i]:
                return  # an equal path already indexed: later blocks of ours stay private
            parent = node

    def release(self, blocks: list[int], nodes: list[Node | None], tokens: Sequence[int], keep: bool,
                state: bytes | None = None) -> None:
        """Drop a sequence's hold on its blocks; with ``keep`` its partial last block is indexed too, and
        ``state`` (recurrent pools: the state after ``tokens``) kept as the snapshot of its end.

        Blocks are queued for eviction last-first, so a conversation's tail
        leaves before its shared head.
        """
        if keep:
            self._index_partial(blocks, nodes, tokens)
            end = nodes[-(-len(tokens) // self.block_size) - 1] if tokens and state is not None else None
            if end is not None:
                self.keep_state(end, state)
        for block in reversed(blocks):
            self.ref[block] -= 1
            if self.ref[block] == 1:
                self._shared -= 1
            if self.ref[block] > 0:
                continue
            if block in self._node_of:
                self._evictable[block] = None
            else:
                self._free.append(block)

    def persist(self, deadline: float = float("inf")) -> int:
        """Write every full indexed block (resident or in host RAM) to the disk tier, parents first, until
        ``deadline`` (``time.monotonic()``): the runner is stopping. The number of blocks the disk tier holds now."""
        if self.disk is None:
            return 0
        kept, level = 0, list(self.root.children.values())
        while level and self.disk.writing:
            for node in level:
                if time.monotonic() > deadline:
                    return kept
                if len(node.run) < self.block_size:
                    continue
                data = node.spilled if node.block is None else self.store.read_block(node.block)
                if data is not None and self._to_disk(node, data):
                    kept += 1
                if node.state is not None:
                    self._state_to_disk(node, node.state)
            level = [child for node in level for child in node.children.values()]
        return kept

    # -- invariants -------------------------------------------------------------

    def check(self) -> None:
        """Assert the numbered invariants of the module docstring (tests call this)."""
        free = set(self._free)
        assert len(free) == len(self._free), "a block is free twice"
        for block in range(self.n_blocks):
            states = (block in free) + (block in self._evictable) + (self.ref[block] > 0)
            assert states == 1, f"block {block} is in {states} states"
            assert (block in self._evictable) <= (block in self._node_of), f"cached block {block} is not indexed"
        assert self.host_used == sum(len(n.spilled or b"") for n in self._host), "host bytes miscounted"
        assert self._shared == sum(1 for r in self.ref if r > 1), "shared blocks miscounted"
        assert self.state_used == sum(len(n.state or b"") for n in self._states), "snapshot bytes miscounted"
        assert self.state_used <= self.state_budget, "snapshots over their budget"

        reachable: set[int] = set()

        def walk(node: Node) -> None:
            for child in node.children.values():
                assert child.parent is node
                assert child.block is not None or child.spilled is not None or child.children, "a dead node"
                if child.block is not None:
                    assert self._node_of.get(child.block) is child
                assert (child.state is not None) == (child in self._states), "a snapshot outside the books"
                reachable.add(id(child))
                walk(child)

        walk(self.root)
        assert all(id(n) in reachable for n in self._node_of.values()), "an indexed block outside the tree"
        assert all(id(n) in reachable for n in self._host), "a spilled block outside the tree"
        assert all(id(n) in reachable for n in self._states), "a snapshot outside the tree"

    # -- helpers ----------------------------------------------------------------

    def _take(self, block: int) -> None:
        if self.ref[block] == 0:
            self._evictable.pop(block, None)
        self.ref[block] += 1
        if self.ref[block] == 2:
            self._shared += 1

    def _make_resident(self, node: Node, found: Placement) -> bool:
        """Whether ``node`` has a block now, copying its bytes back from host RAM or disk if needed."""
        if node.block is not None:
            return True
        data = node.spilled
        if data is not None:
            # out of the host tier's LRU while room is made (a spill then must not drop it), its bytes still
            # on it so that pruning a spilled child it loses meanwhile cannot take it out of the tree
            del self._host[node]
            self.host_used -= len(data)
            if not self._restore(node, data, found):
                self._host[node] = None
                self.host_used += len(data)
                return False
            node.spilled = None
            self.stats.restores += 1
            return True
        data = self.disk.read(node.key) if self.disk is not None and len(node.run) == self.block_size else None
        if data is None:
            return False
        node.spilled = data  # held on the node (not in the host tier) only so that pruning keeps it meanwhile
        restored = self._restore(node, data, found)
        node.spilled = None
        self.stats.disk_restores += restored
        return restored

    def _from_disk(self, parent: Node, run: tuple[int, ...], data: bytes | None, found: Placement) -> Node | None:
        """A new node for ``run`` under ``parent`` holding ``data``, its block as the disk tier read it (None: it
        was not there)."""
        if data is None:
            return None
        node = Node(run=run, parent=parent, key=chain_key(parent.key, run))
        if not self._restore(node, data, found):
            return None
        parent.children[run] = node
        self.stats.disk_restores += 1
        return node

    def _restore(self, node: Node, data: bytes, found: Placement) -> bool:
        """Give ``node`` a block holding ``data`` (cached: the caller takes it); False when the pool has none."""
        block = self.allocate()
        if block is None:
            return False
        self.store.write_block(block, data)
        self.ref[block] = 0  # allocate() took it for a sequence; the caller takes it as an indexed block
        node.block = block
        self._node_of[block] = node
        self._evictable[block] = None
        found.restored += 1
        return True

    def _resume_point(self, tokens: Sequence[int], found: Placement) -> None:
        """Cut ``found`` back to where a recurrent sequence can resume, deepest first: a partial run with a
        snapshot (a finished sequence's end) that ``tokens`` hold whole, continued in a copy of its block, or
        a found full run with a snapshot (in RAM, else on disk); the snapshot is handed over, and the blocks
        after it go back (they stay cached)."""
        found.matched = found.tokens
        bs = self.block_size
        for depth in range(len(found.nodes), -1, -1):
            parent = found.nodes[depth - 1] if depth else self.root
            rest = tuple(tokens[depth * bs : (depth + 1) * bs])
            ends = [c for c in parent.children.values() if c.state is not None and c.block is not None
                    and len(c.run) < bs and rest[: len(c.run)] == c.run]
            end = max(ends, key=lambda c: len(c.run), default=None)
            state = self._snapshot(parent) if depth and end is None else None
            if end is not None or state is not None or not depth:
                self._cut(found, depth)
            if end is not None and self._copy_into(end, len(end.run), found):
                self._states.move_to_end(end)
                found.state = end.state
                return
            if end is not None and depth:  # no block for the copy: the full run's snapshot, if any
                state = self._snapshot(parent)
            if state is not None:
                found.state = state
                return

    def _cut(self, found: Placement, depth: int) -> None:
        """Keep the first ``depth`` blocks of ``found``; the others go back."""
        if depth < len(found.blocks):
            self.release(found.blocks[depth:], found.nodes[depth:], (), keep=False)
            del found.blocks[depth:], found.nodes[depth:]
        found.tokens = depth * self.block_size

    def _snapshot(self, node: Node) -> bytes | None:
        """``node``'s snapshot: from RAM (now the most recently used), else read from disk and kept in RAM."""
        if node.state is not None:
            self._states.move_to_end(node)
            return node.state
        data = self.disk.read_state(node.key) if self.disk is not None else None
        if data is not None:
            self.keep_state(node, data)
        return data

    def _state_to_disk(self, node: Node, data: bytes) -> None:
        if self.disk is not None and len(node.run) == self.block_size:  # a partial run has no key
            self.disk.write_state(node.key, data)

    def _drop_state(self, node: Node) -> None:
        """Take ``node``'s snapshot out of RAM, to the disk tier if there is one."""
        if node.state is not None:
            del self._states[node]
            self.state_used -= len(node.state)
            self._state_to_disk(node, node.state)
            node.state = None

    def _copy_partial(self, node: Node, tokens: Sequence[int], found: Placement) -> None:
        """Continue into the child of ``node`` sharing the most tokens with what follows, by copying it."""
        rest = tokens[found.tokens : found.tokens + self.block_size]
        best, best_n = None, 0
        for child in node.children.values():
            if child.block is None:
                continue
            n = _common(child.run, rest)
            if n > best_n:
                best, best_n = child, n
        if best is not None:
            self._copy_into(best, best_n, found)

    def _copy_into(self, node: Node, n: int, found: Placement) -> bool:
        """Continue ``found`` with the first ``n`` tokens of ``node``'s run in a private copy of its block;
        False when the pool has no block for it."""
        source = node.block
        self._take(source)  # pinned: allocating may evict cached blocks
        target = self.allocate()
        self.release([source], [node], (), keep=False)
        if target is None:
            return False
        self.store.copy_block(target, source)
        self.stats.copies += 1
        found.blocks.append(target)
        found.nodes.append(None)
        found.tokens += n
        return True

    def _index_partial(self, blocks: list[int], nodes: list[Node | None], tokens: Sequence[int]) -> None:
        """Index the partly filled last block of a finished sequence under its parent run."""
        bs = self.block_size
        full, tail = divmod(len(tokens), bs)
        if not tail or len(blocks) <= full or nodes[full] is not None:
            return
        parent = self.root if full == 0 else nodes[full - 1]
        if parent is None:  # its path is not indexed (an equal one was): nothing can find it
            return
        run = tuple(tokens[full * bs :])
        if run in parent.children:
            return
        block = blocks[full]
        node = parent.children[run] = Node(run=run, parent=parent, block=block)
        self._node_of[block] = node
        nodes[full] = node

    def _evict_one(self) -> bool:
        """Free the least recently released cached block, spilling a full one to host RAM if it fits."""
        if not self._evictable:
            return False
        block, _ = self._evictable.popitem(last=False)
        node = self._node_of.pop(block)
        if len(node.run) == self.block_size and self.host_budget:  # spilled while it still holds its block,
            self._spill(node, self.store.read_block(block))  # so room made in the host tier cannot prune it
        elif len(node.run) == self.block_size and self.disk is not None:
            self._to_disk(node, self.store.read_block(block))
        node.block = None
        self._prune(node)
        self._free.append(block)
        return True

    def _spill(self, node: Node, data: bytes) -> None:
        if len(data) > self.host_budget:
            self._to_disk(node, data)
            return
        while self.host_used + len(data) > self.host_budget:
            oldest, _ = self._host.popitem(last=False)
            self.host_used -= len(oldest.spilled)
            self._to_disk(oldest, oldest.spilled)
            oldest.spilled = None
            self._prune(oldest)
        node.spilled = data
        self._host[node] = None
        self.host_used += len(data)
        self.stats.spills += 1

    def _to_disk(self, node: Node, data: bytes) -> bool:
        """Keep a full block that leaves RAM in the disk tier, if there is one."""
        return self.disk is not None and self.disk.write(node.key, data)

    def _drop_spilled(self, node: Node) -> None:
        if node.spilled is not None:
            del self._host[node]
            self.host_used -= len(node.spilled)
            node.spilled = None

    def _prune(self, node: Node) -> None:
        """Remove ``node`` (and ancestors) that hold nothing any more; a dropped node's subtree goes with it."""
        while node.parent is not None and node.block is None and node.spilled is None:
            if node.children:  # only spilled descendants can remain: nothing can reach them now
                if any(c.block is not None for c in node.children.values()):
                    return
                for child in list(node.children.values()):
                    self._forget(child)
            self._drop_state(node)
            del node.parent.children[node.run]
            node = node.parent

    def _forget(self, node: Node) -> None:
        for child in list(node.children.values()):
            self._forget(child)
        if node.spilled is not None:
            self._to_disk(node, node.spilled)
        self._drop_spilled(node)
        self._drop_state(node)
        node.children.clear()


def _common(run: Sequence[int], tokens: Sequence[int]) -> int:
    """How many leading tokens of ``run`` equal those of ``tokens``."""
    n = min(len(run), len(tokens))
    for j in range(n):
        if run[j] != tokens[j]:
            return j
    return n
