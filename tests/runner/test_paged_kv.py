"""The native engine's paged KV: the block pool's bookkeeping, and the engine over it through a real runner.

The pool's invariants are checked after every operation (:meth:`BlockPool.check`);
its store is a real native context of a tiny model, so copies, spills and
restores move real bytes. The runner tests drive SmolLM2 on the native
engine: shared system prompts held once, the same sampled text whatever
runs beside it or wherever its prefix came from, preemption when the pool
runs out, and every block back after a storm of cancelled requests.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.backends.native import backend as native
from localllm.runner.kv_blocks import BlockPool
from support.native import BLOCK, tiny_block_store
from support.runner import (
    SYSTEM, RunnerProcess, cancellation_storm, chat, complete, parse_stream, running_runner, runner_threads, tokens_of,
)

BS = BLOCK  # the tiny store's block size


@pytest.fixture
def store(tmp_path: Path) -> Iterator[native.Context]:
    with tiny_block_store(tmp_path, 8) as ctx:
        yield ctx


def run(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# -- the pool on its own ---------------------------------------------------------


def test_a_shared_prefix_is_held_once_and_counted(store: native.Context) -> None:
    pool = BlockPool(store, 8, BS)
    tokens = run(40)
    assert pool.match(tokens).blocks == []
    blocks = [pool.allocate() for _ in range(3)]
    nodes: list = [None, None, None]
    pool.commit(blocks, nodes, tokens)  # two full blocks indexed; the third is partial and private
    assert nodes[0] is not None and nodes[1] is not None and nodes[2] is None
    b = pool.match(tokens[:35] + [99])  # another sequence with the same first 35 tokens
    assert b.blocks == blocks[:2] and b.tokens == 32  # the full blocks, shared without a copy
    assert pool.counts() == {"total": 8, "in_use": 3, "shared": 2, "cached": 0, "spilled": 0}
    pool.release(blocks, nodes, tokens, keep=True)  # the first sequence ends: its tail is indexed
    c = pool.match(tokens[:35] + [99])
    assert c.blocks[:2] == blocks[:2] and c.tokens == 35  # and 3 positions of the tail, copied on write
    assert c.blocks[2] not in blocks and pool.stats.copies == 1
    assert pool.counts() == {"total": 8, "in_use": 3, "shared": 2, "cached": 1, "spilled": 0}
    pool.check()
    pool.release(b.blocks, b.nodes, tokens[:32], keep=True)
    pool.release(c.blocks, c.nodes, tokens[:35], keep=True)
    assert pool.counts() == {"total": 8, "in_use": 0, "shared": 0, "cached": 4, "spilled": 0}
    pool.check()


def test_eviction_takes_the_least_recently_released_tail_first(store: native.Context) -> None:
    pool = BlockPool(store, 4, BS)
    first = [pool.allocate(), pool.allocate()]
    first_nodes: list = [None, None]
    pool.commit(first, first_nodes, run(32))
    pool.release(first, first_nodes, run(32), keep=True)
    assert pool.available == 4
    taken = [pool.allocate() for _ in range(3)]  # two free blocks, then the cached tail (not the head)
    assert first[1] in taken and first[0] not in taken
    assert pool.match(run(32)).tokens == 16  # the head is still found
    assert pool.allocate() is None  # everything in use now: no block for anyone
    pool.check()


def test_evicted_blocks_spill_to_host_ram_and_come_back_bit_for_bit(store: native.Context) -> None:
    pool = BlockPool(store, 2, BS, host_budget=4 * store.block_bytes)
    blocks, nodes = [pool.allocate(), pool.allocate()], [None, None]
    store.write_block(blocks[0], bytes([7]) * store.block_bytes)
    store.write_block(blocks[1], bytes(range(256)) * (store.block_bytes // 256))
    written = [store.read_block(b) for b in blocks]
    pool.commit(blocks, nodes, run(32))
    pool.release(blocks, nodes, run(32), keep=True)
    other, other_nodes = [pool.allocate(), pool.allocate()], [None, None]  # evicts both: they spill
    assert pool.counts()["spilled"] == 2 and pool.host_used == 2 * store.block_bytes
    pool.commit(other, other_nodes, run(32, 1000))
    pool.release(other, other_nodes, run(32, 1000), keep=True)
    back = pool.match(run(32) + [5])
    assert back.tokens == 32 and back.restored == 2 and pool.stats.restores == 2
    assert [store.read_block(b) for b in back.blocks] == written
    pool.check()


def test_the_host_budget_drops_the_oldest_spilled_blocks(store: native.Context) -> None:
    pool = BlockPool(store, 1, BS, host_budget=store.block_bytes)
    for start in (0, 100, 200):
        block, nodes = pool.allocate(), [None]
        pool.commit([block], nodes, run(16, start))
        pool.release([block], nodes, run(16, start), keep=True)
    pool.allocate()
    assert pool.counts()["spilled"] == 1 and pool.host_used == store.block_bytes
    pool.check()


def test_a_failed_sequence_keeps_no_partial_block(store: native.Context) -> None:
    pool = BlockPool(store, 4, BS)
    blocks, nodes = [pool.allocate(), pool.allocate()], [None, None]
    pool.commit(blocks, nodes, run(20))
    pool.release(blocks, nodes, run(20), keep=False)
    assert pool.counts()["cached"] == 1  # the complete first block; the partial one is free
    assert pool.match(run(20)).tokens == 16
    pool.check()


# -- the engine through a real runner -----------------------------------------------

GREEDY = {"temperature": 0}
SAMPLED = {"temperature": 0.9, "top_k": 40, "seed": 1234}


@pytest.fixture(scope="module")
def runner(smollm2_path: Path) -> Iterator[RunnerProcess]:
    args = ("--engine", "native", "--ctx", "1024", "--parallel", "16", "--threads", runner_threads())
    with running_runner(smollm2_path, *args) as r:
        yield r


def stream_all(runner: RunnerProcess, bodies: list[dict[str, Any]]) -> list[tuple[str, dict]]:
    async def one(ac: httpx.AsyncClient, body: dict[str, Any]) -> tuple[str, dict]:
        async with ac.stream("POST", "/completion", json=body) as r:
            pieces, done = parse_stream([line async for line in r.aiter_lines()])
        return "".join(pieces), done

    async def all_() -> list[tuple[str, dict]]:
        async with runner.async_client(timeout=300) as ac:
            return await asyncio.gather(*(one(ac, b) for b in bodies))

    return asyncio.run(all_())


def answers(results: list[tuple[str, dict]]) -> list[tuple[str, list[int]]]:
    """Each answer's text and token ids (the prompt's, then the answer's): both must match, not the text alone."""
    return [(text, done["context"]) for text, done in results]


def idle_health(client: httpx.Client, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        health = client.get("/health").json()
        if health["kv_blocks"]["in_use"] == 0 and health["queue_depth"] == 0 or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def test_sixteen_requests_share_one_copy_of_their_system_prompt(runner: RunnerProcess) -> None:
    system = f"Briefing {time.time_ns()}. " + SYSTEM * 10
    with runner.client() as c:
        n_system = len(tokens_of(c, f"<|im_start|>system\n{system}<|im_end|>\n"))
        bodies = [{"prompt": chat(f"Question {i}: name a star.", system=system), "options": {**GREEDY, "num_predict": 24}}
                  for i in range(16)]  # fmt: skip
        peak: dict[str, int] = {"shared": 0, "in_use": 0}
        done_polling = threading.Event()

        def poll() -> None:
            with runner.client() as pc:
                while not done_polling.is_set():
                    blocks = pc.get("/health").json()["kv_blocks"]
                    if blocks["shared"] > peak["shared"]:
                        peak.update(shared=blocks["shared"], in_use=blocks["in_use"])
                    time.sleep(0.02)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            results = stream_all(runner, bodies)
        finally:
            done_polling.set()
            poller.join()
        assert all(done.get("done") for _, done in results), results
        assert sum(done["prompt_eval_count"] for _, done in results) < n_system + 16 * 30
        assert peak["shared"] >= n_system // BS - 1  # the system prompt's blocks, held by many at once
        # one copy: far fewer blocks in use than 16 separate copies of the system prompt would take
        assert peak["in_use"] < 16 * (n_system // BS) / 4
        alone = complete(c, bodies[5]["prompt"], num_predict=24, **GREEDY)
        assert ("".join(alone[0]), alone[1]["context"]) == (results[5][0], results[5][1]["context"])


def test_seeded_sampling_is_the_same_alone_cached_and_batched(runner: RunnerProcess) -> None:
    prompt = chat(f"Story {time.time_ns()}: tell me about a lighthouse keeper.")
    body = {"prompt": prompt, "options": {**SAMPLED, "num_predict": 40, "logprobs": True, "top_logprobs": 5}}
    with runner.client() as c:
        cold = complete(c, prompt, **body["options"])
        assert cold[1]["cached_tokens"] < BS  # at most the chat header other prompts began with
        warm = complete(c, prompt, **body["options"])  # every prompt block but the last from the cache
        assert warm[1]["cached_tokens"] > 0
    others = [{"prompt": chat(f"Other {i}: count to {i + 5}."), "options": {**SAMPLED, "num_predict": 30 + i}}
              for i in range(7)]  # fmt: skip
    batched = stream_all(runner, [others[0], others[1], body, *others[2:]])[2]
    assert "".join(cold[0]) == "".join(warm[0]) == batched[0]
    assert cold[1]["context"] == warm[1]["context"] == batched[1]["context"]


def test_log_probabilities_are_identical_alone_and_batched(runner: RunnerProcess) -> None:
    """Log-probabilities are a function of the logits: equal floats mean the logits agreed."""
    body = {"prompt": chat(f"Facts {time.time_ns()}: what is a comet?"),
            "options": {**GREEDY, "num_predict": 16, "logprobs": True, "top_logprobs": 10}}  # fmt: skip
    others = [{"prompt": chat(f"Noise {i}: " + "list some planets. " * (i + 1)), "options": {**GREEDY, "num_predict": 20}}
              for i in range(7)]  # fmt: skip

    async def logprobs(ac: httpx.AsyncClient, payload: dict) -> list:
        entries = []
        async with ac.stream("POST", "/completion", json=payload) as r:
            async for line in r.aiter_lines():
                if line.strip():
                    entries += json.loads(line).get("logprobs", [])
        return [(e["id"], e["logprob"], [(t["id"], t["logprob"]) for t in e["top_logprobs"]]) for e in entries]

    async def alone_then_together() -> tuple[list, list]:
        async with runner.async_client(timeout=300) as ac:
            alone = await logprobs(ac, body)
            noise = [asyncio.create_task(logprobs(ac, o)) for o in others[:4]]
            await asyncio.sleep(0.3)  # ours arrives while those decode, beside three new prefills
            ours = asyncio.create_task(logprobs(ac, body))
            noise += [asyncio.create_task(logprobs(ac, o)) for o in others[4:]]
            await asyncio.gather(*noise)
            return alone, await ours

    alone, batched = asyncio.run(alone_then_together())
    assert len(alone) == 16 and alone == batched


@pytest.mark.slow
def test_a_full_pool_preempts_and_recomputes_exactly(smollm2_path: Path, runner: RunnerProcess) -> None:
    """Eight long generations in a pool of 40 blocks: the newest are preempted and resumed, bit for bit."""
    bodies = [{"prompt": chat(f"Essay {i}: why do stars twinkle? " * 3), "options": {**GREEDY, "num_predict": 90}}
              for i in range(8)]  # fmt: skip
    expected = stream_all(runner, bodies)  # the big pool: no pressure
    args = ("--engine", "native", "--ctx", "256", "--parallel", "8", "--kv-tokens", "640", "--threads", runner_threads())
    with running_runner(smollm2_path, *args) as small, small.client() as c:
        got = stream_all(small, bodies)
        assert "preempting" in small.stderr
        assert answers(got) == answers(expected)
        health = idle_health(c)
        assert health["kv_blocks"]["in_use"] == 0


def test_evicted_conversations_come_back_from_host_ram(smollm2_path: Path, runner: RunnerProcess) -> None:
    convs = [chat(f"Conversation {i}: describe the planet {p}.") for i, p in
             enumerate(["Mercury", "Venus", "Mars", "Jupiter", "Saturn", "Uranus"])]  # fmt: skip
    follow = "<|im_end|>\n<|im_start|>user\nAnd its moons?<|im_end|>\n<|im_start|>assistant\n"
    with runner.client() as big:
        first = complete(big, convs[0], num_predict=24, **GREEDY)[1]
        turn2 = first["context"] + tokens_of(big, follow, add_special=False)
        expected = complete(big, turn2, num_predict=24, **GREEDY)
    args = ("--engine", "native", "--ctx", "256", "--parallel", "2", "--kv-tokens", "288", "--threads",
            runner_threads(), "--cache-ram-mb", "64")  # fmt: skip
    with running_runner(smollm2_path, *args) as r, r.client() as c:
        for p in convs:  # six conversations through a pool of 18 blocks: the first ones are evicted
            complete(c, p, num_predict=24, **GREEDY)
        health = idle_health(c)
        assert health["kv_blocks"]["spilled"] > 0 and health["cache_ram_bytes"] > 0
        pieces, done = complete(c, turn2, num_predict=24, **GREEDY)
        assert done["cached_tokens"] >= len(first["context"]) - BS  # back from RAM, not recomputed
        assert ("".join(pieces), done["context"]) == ("".join(expected[0]), expected[1]["context"])


def test_hundred_requests_with_random_cancellations_return_every_block(runner: RunnerProcess) -> None:
    outcomes = cancellation_storm(runner, lambda i: chat(f"Request {i % 7}: count to {i}."), seed=7)
    assert outcomes.count("done") > 20 and outcomes.count("cancelled") > 10
    with runner.client() as c:
        health = idle_health(c)
        blocks = health["kv_blocks"]
        assert blocks["in_use"] == 0 and blocks["shared"] == 0
        assert blocks["cached"] <= blocks["total"] and health["queue_depth"] == 0
        assert complete(c, chat("Request 1: count to 3."), num_predict=12, **GREEDY)[1]["done"]


def test_a_prompt_longer_than_the_context_without_truncation_is_refused(smollm2_path: Path) -> None:
    args = ("--engine", "native", "--ctx", "128", "--parallel", "2", "--threads", runner_threads())
    with running_runner(smollm2_path, *args) as r, r.client() as c:
        long_prompt = chat("Summarise: " + "stars and planets " * 100)
        refused = c.post("/completion", json={"prompt": long_prompt, "truncate": False, "options": GREEDY})
        assert refused.status_code == 400 and "context length of 128" in refused.json()["error"]
        pieces, done = complete(c, long_prompt, num_predict=4, **GREEDY)  # truncated as Ollama does
        assert done["done"] and len(done["context"]) <= 128 + 4
        assert idle_health(c)["kv_blocks"]["in_use"] == 0


def test_a_full_context_shifts_or_ends_the_answer_as_asked(smollm2_path: Path) -> None:
    args = ("--engine", "native", "--ctx", "128", "--parallel", "2", "--threads", runner_threads())
    endless = 'root ::= [0-9]+ ", " root'  # the model cannot end it
    body = {"prompt": chat("Count from 1 to 100, separated by commas."), "grammar": endless, "stream": False}
    with running_runner(smollm2_path, *args) as r, r.client() as c:
        shifted = c.post("/completion", json=dict(body, options=dict(GREEDY, num_predict=200, num_keep=5))).json()
        assert shifted["done_reason"] == "length" and shifted["eval_count"] == 200
        stopped = c.post("/completion", json=dict(body, shift=False, options=dict(GREEDY, num_predict=200))).json()
        assert stopped["done_reason"] == "length" and stopped["prompt_eval_count"] + stopped["cached_tokens"] + \
            stopped["eval_count"] == 128 + 1  # the context's last token is sampled, and ends the answer
        assert idle_health(c)["kv_blocks"]["in_use"] == 0
        assert "context shift" in r.stderr


def test_gemma3_sampled_text_is_the_same_alone_cached_and_batched(gemma3_path: Path) -> None:
    """Gemma 3's sliding-window layers too: a 600-token prompt is past their 512-position window."""
    text = "The lighthouse keeper wrote in his log every night. " * 60
    options = {**SAMPLED, "num_predict": 24}
    args = ("--engine", "native", "--ctx", "1024", "--parallel", "4", "--threads", runner_threads())
    with running_runner(gemma3_path, *args) as r, r.client() as c:
        assert len(tokens_of(c, text)) > 560
        cold = complete(c, text, **options)
        warm = complete(c, text, **options)
        assert warm[1]["cached_tokens"] > 512
        body = {"prompt": text, "options": options}
        noise = [{"prompt": f"Story {i}: once upon a time", "options": {**SAMPLED, "num_predict": 20}} for i in range(3)]
        batched = stream_all(r, [noise[0], body, noise[1], noise[2]])[1]
    assert "".join(cold[0]) == "".join(warm[0]) == batched[0]
    assert cold[1]["context"] == warm[1]["context"] == batched[1]["context"]


def test_restoring_a_block_when_the_host_tier_is_full_keeps_its_bytes(store: native.Context) -> None:
    """Making room to restore a spilled block spills another, which must not drop the one being restored."""
    pool = BlockPool(store, 1, BS, host_budget=store.block_bytes)
    block, nodes = pool.allocate(), [None]
    store.write_block(block, bytes([3]) * store.block_bytes)
    pool.commit([block], nodes, run(16))
    pool.release([block], nodes, run(16), keep=True)
    other, other_nodes = pool.allocate(), [None]  # the first block spills: the host tier is full
    pool.commit([other], other_nodes, run(16, 500))
    pool.release([other], other_nodes, run(16, 500), keep=True)
    back = pool.match(run(16) + [1])  # restoring it evicts and spills the other one
    assert back.tokens == 16 and store.read_block(back.blocks[0]) == bytes([3]) * store.block_bytes
    assert pool.counts()["spilled"] == 1
    pool.check()


@pytest.mark.slow
def test_random_traffic_through_a_small_pool_gives_every_request_its_solo_output(
    smollm2_path: Path, runner: RunnerProcess
) -> None:
    """Shared prefixes, partial blocks, eviction, spills, restores and preemption all at once: each
    request that completes has exactly the text it has alone on an idle runner."""
    rng = random.Random(13)
    heads = [chat(f"Topic {t}: " + "tell me about the night sky. " * rng.randint(1, 6)) for t in range(4)]
    bodies = []
    for i in range(24):
        prompt = rng.choice(heads)[: -rng.randint(0, 40) or None] + f" ({i})"
        bodies.append({"prompt": prompt, "options": {**GREEDY, "num_predict": rng.randint(4, 60)}})
    expected = [stream_all(runner, [b])[0] for b in bodies]  # one at a time, big pool
    args = ("--engine", "native", "--ctx", "256", "--parallel", "8", "--kv-tokens", "400", "--threads",
            runner_threads(), "--cache-ram-mb", "2")  # fmt: skip
    with running_runner(smollm2_path, *args) as small, small.client() as c:
        got = stream_all(small, bodies)
        assert answers(got) == answers(expected)
        health = idle_health(c)
        assert health["kv_blocks"]["in_use"] == 0 and health["cache_ram_bytes"] <= 2 << 20
        assert "preempting" in small.stderr and sum(done["cached_tokens"] for _, done in got) > 0


@pytest.mark.parametrize("seed", range(6))
def test_random_pool_traffic_keeps_the_invariants(store: native.Context, seed: int) -> None:
    """Random sequences over a few shared prefixes: taken, grown, committed, released (kept or not),
    with a host tier of 0-3 blocks; the invariants hold after every step, and a prefix found again
    has the bytes it was written with."""
    rng = random.Random(seed)
    pool = BlockPool(store, 6, BS, host_budget=rng.randint(0, 3) * store.block_bytes)
    heads = [[rng.randrange(50) for _ in range(40)] for _ in range(3)]
    written: dict[tuple[int, ...], bytes] = {}  # the tokens of a full block's path -> its bytes
    for step in range(150):
        tokens = rng.choice(heads)[: rng.randint(1, 40)] + [rng.randrange(50) for _ in range(rng.randint(0, 20))]
        found = pool.match(tokens[:-1])
        blocks, nodes = found.blocks, found.nodes
        for i in range(len(tokens[: found.tokens]) // BS):
            path = tuple(tokens[: (i + 1) * BS])
            if path in written:
                assert store.read_block(blocks[i]) == written[path], (step, i)
        while len(blocks) * BS < len(tokens):
            block = pool.allocate()
            if block is None:
                break
            blocks.append(block)
            nodes.append(None)
        held = tokens[: len(blocks) * BS]
        for i in range(found.tokens // BS, len(held) // BS):  # "compute" the new full blocks
            data = bytes([(sum(held[: (i + 1) * BS]) + i) % 256]) * store.block_bytes
            store.write_block(blocks[i], data)
            written[tuple(held[: (i + 1) * BS])] = data
        pool.commit(blocks, nodes, held)
        pool.check()
        pool.release(blocks, nodes, held, keep=rng.random() < 0.8)
        pool.check()
    assert pool.counts()["in_use"] == 0
