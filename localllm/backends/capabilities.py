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


NATIVE = "native"
LLAMA_CPP = "llama.cpp"

CAPABILITIES: dict[str, Capabilities] = {
    NATIVE: Capabilities(
        shared_kv=True, spill=True, batch_invariant=True, embeddings=False, lora=False, gpu_layers=False,
        workers=False, grammar=True, logprobs=True,
    ),
    LLAMA_CPP: Capabilities(
        shared_kv=False, spill=True, batch_invariant=False, embeddings=True, lora=True, gpu_layers=True,
        workers=True, grammar=True, logprobs=True,
    ),
}  # fmt: skip

# The native engine's KV pool holds as many positions as this many full contexts: the memory llama.cpp's
# four streams took, now shared by every sequence (the number served at once follows from the pool).
POOL_CONTEXTS = 4


def native_parallel(pool_tokens: int) -> int:
    """Sequences the native engine serves at once (unless LOCALLLM_NUM_PARALLEL says): one per 1,024
    positions of its pool, at least 16, since sequences take blocks only as they grow."""
    return max(16, pool_tokens // 1024)
