"""The prefix cache end to end: real SmolLM2 runners, real KV reuse, spill to host RAM.

Greedy output must not depend on where a prompt's KV came from (computed,
copied from another sequence, kept by an idle slot, restored from RAM) nor
on what else is batched; the cached/evaluated token counts must show the
work that was saved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.runner.prefix_cache import HostSpill, RadixTree, Spilled
from support.runner import (
    SYSTEM, RunnerProcess, cancellation_storm, chat, complete, parse_stream, running_runner, runner_threads, tokens_of,
)

GREEDY = {"temperature": 0}
def shared_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def wait_idle(client: httpx.Client, timeout: float = 60.0) -> dict[str, Any]:
    """/health once no sequence runs and no request waits."""
    deadline = time.monotonic() + timeout
    while True:
        health = client.get("/health").json()
        idle = health["kv_used_cells"] == health["cache_tokens"] and health["queue_depth"] == 0
        if idle or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


async def _complete_async(client: httpx.AsyncClient, prompt: str | list[int], n: int) -> tuple[str, dict]:
    body = {"prompt": prompt, "options": {**GREEDY, "num_predict": n}}
    async with client.stream("POST", "/completion", json=body) as r:
        assert r.status_code == 200
        pieces, done = parse_stream([line async for line in r.aiter_lines()])
    return "".join(pieces), done


def concurrently(runner: RunnerProcess, prompts: list[str | list[int]], n: int) -> list[tuple[str, dict]]:
    async def run() -> list[tuple[str, dict]]:
        async with runner.async_client() as ac:
            return await asyncio.gather(*(_complete_async(ac, p, n) for p in prompts))

    return asyncio.run(run())


@pytest.fixture(scope="module")
def runner(smollm2_path: Path) -> Iterator[RunnerProcess]:
    """Eight sequences: room for one request batched with seven others."""
    with running_runner(smollm2_path, "--ctx", "1024", "--parallel", "8", "--threads", runner_threads()) as r:
        yield r


@pytest.fixture
def client(runner: RunnerProcess) -> Iterator[httpx.Client]:
    with runner.client() as c:
        yield c


# -- the radix tree on its own ------------------------------------------------


def test_radix_tree_finds_the_longest_shared_prefix() -> None:
    tree: RadixTree[str] = RadixTree()
    tree.insert([1, 2, 3, 4, 5], "a")
    tree.insert([1, 2, 3, 9], "b")
    tree.insert([7, 8], "c")
    assert tree.match([1, 2, 3, 4, 5, 6]) == (5, {"a"})
    assert tree.match([1, 2, 3, 7]) == (3, {"a", "b"})
    assert tree.match([1, 2]) == (2, {"a", "b"})
    assert tree.match([5]) == (0, set())
    assert tree.covers([1, 2, 3], besides="a") and not tree.covers([1, 2, 3, 4], besides="a")
    tree.insert([7, 8, 9], "a")  # a holder holds one sequence: re-inserting moves it
    assert tree.match([1, 2, 3, 4]) == (3, {"b"})
    assert tree.match([7, 8, 9]) == (3, {"a"})
    tree.remove("a")
    tree.remove("a")  # twice is fine
    assert tree.match([7, 8, 9]) == (2, {"c"})
    tree.remove("b")
    tree.remove("c")
    assert len(tree) == 0 and tree.match([1, 2]) == (0, set())


def test_host_spill_keeps_the_most_recent_within_budget() -> None:
    spill = HostSpill(budget_bytes=10)
    a, b, c = Spilled((1,), b"x" * 4), Spilled((2,), b"x" * 4), Spilled((3,), b"x" * 4)
    assert spill.add(a) == [] and spill.add(b) == []
    spill.touch(a)  # b is now the least recently used
    assert spill.add(c) == [b]
    assert list(spill) == [a, c] and spill.used == 8
    big = Spilled((4,), b"x" * 11)
    assert spill.add(big) == [big] and big not in spill


# -- reuse and determinism ----------------------------------------------------


def test_second_turn_evaluates_only_the_new_tokens(client: httpx.Client) -> None:
    first_prompt = chat("What is a meteor shower?")
    pieces, first = complete(client, first_prompt, num_predict=16, **GREEDY)
    assert first["cached_tokens"] == 0
    follow_up = "<|im_end|>\n<|im_start|>user\nWhen can I see the next one?<|im_end|>\n<|im_start|>assistant\n"
    added = tokens_of(client, follow_up, add_special=False)
    turn2 = first["context"] + added
    pieces2, second = complete(client, turn2, num_predict=8, **GREEDY)
    assert second["cached_tokens"] >= len(first["context"]) - 1
    assert second["prompt_eval_count"] <= len(added) + 1
    assert second["prompt_eval_count"] + second["cached_tokens"] == len(turn2)
    health = wait_idle(client)
    assert health["cache_tokens"] >= len(second["context"]) - 1
    assert 0 < health["cache_hit_rate"] < 1
    # Not compared with a cold run of ``turn2``: the first answer's KV was made one token at a
    # time while decoding, a cold run makes it in one prompt batch, and llama.cpp's batched
    # kernels round differently. Reusing it is what one uninterrupted generation would do.


def test_cached_output_is_the_same_solo_and_batched(runner: RunnerProcess, client: httpx.Client) -> None:
    questions = [
        "How do I find the North Star?", "What is a light year?", "Why does the moon have phases?",
        "Which planet has the most moons?", "What is a nebula?", "How big is the Sun?",
        "What is a comet made of?", "Why do stars twinkle?",
    ]
    prompts = [chat(q, system=f"Session {time.time_ns()}. " + SYSTEM) for q in questions]  # nothing cached
    first = concurrently(runner, prompts, 32)  # one system prompt, computed once, copied to the others
    assert sum(done["cached_tokens"] for _, done in first) > 0
    batched = concurrently(runner, prompts, 32)  # now each prompt but its last token comes from the cache
    assert all(done["cached_tokens"] == len(done["context"]) - done["eval_count"] - 1 for _, done in batched)
    solo = complete(client, prompts[0], num_predict=32, **GREEDY)  # from the cache, alone
    assert solo[1]["cached_tokens"] == len(solo[1]["context"]) - solo[1]["eval_count"] - 1
    assert "".join(solo[0]) == batched[0][0]
    assert [text for text, _ in concurrently(runner, prompts, 32)] == [text for text, _ in batched]
    branch = complete(client, prompts[0][:-60] + "tell me a joke<|im_end|>\n<|im_start|>assistant\n", num_predict=8, **GREEDY)
    assert branch[1]["cached_tokens"] > 0  # a prompt that diverges mid-way reuses the part before


def test_cached_output_equals_a_cold_computation(smollm2_path: Path, client: httpx.Client) -> None:
    """Wherever the cached prefix ends, the continuation is the cold computation's, token for token."""
    warm, prompts = [], []
    for cut in (40, 130, 260):  # the cached prefix ends at different places in a ~500-token prompt
        prompt = chat("Explain how a refracting telescope works, step by step.", system=f"Run {time.time_ns()}. " + SYSTEM * 2)
        complete(client, prompt[:-cut] + "<|im_end|>\n<|im_start|>assistant\n", num_predict=4, **GREEDY)
        pieces, done = complete(client, prompt, num_predict=32, **GREEDY)
        assert done["cached_tokens"] > 50
        warm.append(pieces)
        prompts.append(prompt)
    args = ("--ctx", "1024", "--parallel", "1", "--threads", runner_threads())
    with running_runner(smollm2_path, *args) as fresh, fresh.client() as c:
        for prompt, pieces in zip(prompts, warm):
            cold, done = complete(c, prompt, num_predict=32, **GREEDY)
            assert done["cached_tokens"] == 0
            assert "".join(pieces) == "".join(cold)


def test_shared_system_prompt_is_evaluated_once(runner: RunnerProcess, client: httpx.Client) -> None:
    system = f"Briefing {time.time_ns()}. " + SYSTEM * 8  # several hundred tokens, never seen before
    n_system = len(tokens_of(client, f"<|im_start|>system\n{system}<|im_end|>\n"))
    assert n_system > 400
    prompts = [chat(f"Question {i}: name a constellation.", system=system) for i in range(8)]
    results = concurrently(runner, prompts, 8)
    evaluated = sum(done["prompt_eval_count"] for _, done in results)
    total = sum(done["prompt_eval_count"] + done["cached_tokens"] for _, done in results)
    assert evaluated < n_system + 8 * 30, (evaluated, n_system)
    assert evaluated / total < 0.25
    assert sum(done["cached_tokens"] for _, done in results) >= 7 * (n_system - 5)


def test_prompt_longer_than_the_context_without_truncation_is_refused(client: httpx.Client) -> None:
    long_prompt = chat("Summarise: " + "stars and planets " * 400)
    r = client.post("/completion", json={"prompt": long_prompt, "truncate": False, "options": GREEDY})
    assert r.status_code == 400
    assert "context length of 1024" in r.json()["error"]
    assert client.post("/completion", json={"prompt": "hi", "truncate": "no"}).status_code == 400


# -- pressure, spill, cancellation ----------------------------------------------


def test_eviction_and_spill_restore_keep_the_output_right(smollm2_path: Path, client: httpx.Client) -> None:
    """Two slots, many conversations: old ones are evicted, spilled to RAM and restored."""
    convs = [chat(f"Conversation {i}: describe the planet {p} in detail.") for i, p in
             enumerate(["Mercury", "Venus", "Mars", "Jupiter", "Saturn"])]
    follow = "<|im_end|>\n<|im_start|>user\nAnd its moons?<|im_end|>\n<|im_start|>assistant\n"
    expected = {}
    for i in (0, 1):  # references from the big runner
        first = complete(client, convs[i], num_predict=24, **GREEDY)[1]
        second_prompt = first["context"] + tokens_of(client, follow, add_special=False)
        expected[i] = (first["context"], "".join(complete(client, second_prompt, num_predict=24, **GREEDY)[0]))
    args = ("--ctx", "256", "--parallel", "2", "--threads", runner_threads())
    with running_runner(smollm2_path, *args, "--cache-ram-mb", "64") as r, r.client() as c:
        firsts = [complete(c, p, num_predict=24, **GREEDY)[1] for p in convs]  # five conversations, two slots
        assert firsts[0]["context"] == expected[0][0]
        assert wait_idle(c)["cache_ram_bytes"] > 0
        turn2 = firsts[0]["context"] + tokens_of(c, follow, add_special=False)
        pieces, done = complete(c, turn2, num_predict=24, **GREEDY)  # conversation 0 comes back from RAM
        assert done["cached_tokens"] >= len(firsts[0]["context"]) - 1
        assert "".join(pieces) == expected[0][1]
    with running_runner(smollm2_path, *args, "--cache-ram-mb", "0") as r, r.client() as c:
        firsts = [complete(c, p, num_predict=24, **GREEDY)[1] for p in convs]
        turn2 = firsts[1]["context"] + tokens_of(c, follow, add_special=False)
        pieces, done = complete(c, turn2, num_predict=24, **GREEDY)  # evicted and not kept: recomputed
        header = shared_prefix(firsts[1]["context"], firsts[4]["context"])  # still resident in another slot
        assert done["cached_tokens"] <= header < len(firsts[1]["context"]) - 20
        assert c.get("/health").json()["cache_ram_bytes"] == 0
        assert done["done"] and pieces  # recomputed (its text equal to the first run's only where llama.cpp
        # rounds the same for every batch shape: exact recomputation is the native engine's promise)


def test_spill_budget_drops_the_oldest(smollm2_path: Path) -> None:
    """A budget holding about one conversation: the newest spilled one survives."""
    convs = [chat(f"Conversation {i}: " + "tell me about the stars. " * 12) for i in range(4)]
    args = ("--ctx", "256", "--parallel", "1", "--threads", runner_threads(), "--cache-ram-mb", "5")
    with running_runner(smollm2_path, *args) as r, r.client() as c:
        assert 100 < len(tokens_of(c, convs[0])) < 200  # ~23 kB of KV a token: one fits in 5 MB, two do not
        firsts = [complete(c, p, num_predict=8, **GREEDY)[1] for p in convs]
        assert c.get("/health").json()["cache_ram_bytes"] <= 5 << 20
        newest_spilled = complete(c, firsts[2]["context"], num_predict=4, **GREEDY)[1]
        oldest = complete(c, firsts[0]["context"], num_predict=4, **GREEDY)[1]
    assert newest_spilled["cached_tokens"] >= len(firsts[2]["context"]) - 1
    assert oldest["cached_tokens"] <= shared_prefix(firsts[0]["context"], firsts[2]["context"])  # the header only


def test_hundred_requests_with_random_cancellations_leave_nothing_behind(smollm2_path: Path) -> None:
    args = ("--ctx", "512", "--parallel", "4", "--threads", runner_threads())
    with running_runner(smollm2_path, *args) as r, r.client() as c:
        outcomes = cancellation_storm(r, lambda i: chat(f"Request {i % 7}: count to {i}."), seed=5)
        assert outcomes.count("done") > 20 and outcomes.count("cancelled") > 10
        health = wait_idle(c)
        assert health["kv_used_cells"] == health["cache_tokens"] <= 4 * 512
        assert health["queue_depth"] == 0
        pieces, done = complete(c, chat("Request 1: count to 3."), num_predict=12, **GREEDY)
        assert done["done"] and r.proc.poll() is None
