"""The engine contract: what each engine can do, declared once.

The scheduler picks an engine from these declarations and the model
(:mod:`localllm.server.engine_choice`); the memory planner gives GPU and worker
layers only to an engine that can use them; the API refuses what the chosen engine
cannot do. Nothing asks an engine object what it happens to support.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    shared_kv: bool  # sequences share a prefix's KV blocks without copies
    spill: bool  # evicted KV is kept in host RAM and restored on reuse
    batch_invariant: bool  # a request's logits never depend on the batch, the chunking or the cache
    embeddings: bool
    lora: bool
    gpu_layers: bool
    workers: bool  # layers on other machines' devices (llama.cpp's RPC backend, `localllm worker`)
    grammar: bool
    logprobs: bool
    images: bool  # a vision projector's image embeddings in the prompt (llama.cpp's libmtmd)


NATIVE = "native"
LLAMA_CPP = "llama.cpp"

CAPABILITIES: dict[str, Capabilities] = {
    NATIVE: Capabilities(
        shared_kv=True, spill=True, batch_invariant=True, embeddings=False, lora=False, gpu_layers=False,
        workers=False, grammar=True, logprobs=True, images=False,
    ),
    LLAMA_CPP: Capabilities(
        shared_kv=False, spill=True, batch_invariant=False, embeddings=True, lora=True, gpu_layers=True,
        workers=True, grammar=True, logprobs=True, images=True,
    ),
}  # fmt: skip

# The native engine's KV pool holds as many positions as this many contexts of POOL_CONTEXT_TOKENS: the memory
# llama.cpp's four streams take at Ollama's CPU default, shared by every sequence (the number served at once
# follows from the pool).
POOL_CONTEXTS = 4
POOL_CONTEXT_TOKENS = 4096
NATIVE_BLOCK_SIZE = 16  # positions a block of the native KV pool
#: A runner's host RAM for its prefix cache by default (``--cache-ram-mb``): for KV moved out of the context, and
#: on the native engine, as much again for a hybrid model's recurrent state snapshots (which the planner counts).
HOST_CACHE_MB = 512
#: Copies of sequences' states one native batch takes at most (the snapshots a prompt's chunk reaches, kept once the
#: batch is committed: runner/paged_engine.py); the planner counts that many states beside the snapshots' budget.
STATE_CAPTURES = 8


def native_pool_tokens(n_ctx: int) -> int:
    """Positions in a native KV pool for sequences of up to ``n_ctx``: POOL_CONTEXTS x POOL_CONTEXT_TOKENS, or one
    whole context where that is more. It does not grow with the context beyond that: a sequence takes blocks
    only as it grows, so a long context (the default is the model's trained length) costs memory only when a
    sequence uses it, and a full pool preempts the youngest sequence (runner/paged_engine.py)."""
    return max(POOL_CONTEXTS * POOL_CONTEXT_TOKENS, n_ctx)


def native_parallel(pool_tokens: int) -> int:
    """Sequences the native engine serves at once (unless LOCALLLM_NUM_PARALLEL says): one per 1,024
    positions of its pool, at least 16, since sequences take blocks only as they grow."""
    return max(16, pool_tokens // 1024)
