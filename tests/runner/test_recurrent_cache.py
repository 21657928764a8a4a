"""Prefix reuse on models whose state cannot be cut back (recurrent and hybrid), on llama.cpp.

A prompt resumes only where a state was saved: the end of an idle slot's sequence, or a checkpoint kept
one token before the end of each prompt (and when an idle slot is given away). Every answer equals the
same prompt's answer computed from nothing, whatever the cache held, and the KV books stay right
(``--check-kv``). Tiny LFM2 (short convolutions and attention) and Mamba models with SmolLM2's tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localllm.runner.prefix_cache import RadixTree
from support import hybrid_models
from support.runner import chat, complete, running_runner, runner_threads, tokens_of

ANSWER = 10
FOLLOW = "<|im_end|>\n<|im_start|>user\nAnd what about the moon?<|im_end|>\n<|im_start|>assistant\n"


def test_ends_along_lists_the_holders_a_state_can_resume_from() -> None:
    tree: RadixTree[str] = RadixTree()
    tree.insert([1, 2, 3], "turn 1")
    tree.insert([1, 2, 3, 4, 5], "turn 2")
    tree.insert([1, 2, 9], "other")
    tree.insert([1, 2, 3, 4, 5, 6, 7], "longer")
    assert tree.ends_along([1, 2, 3, 4, 5, 6]) == [(5, {"turn 2"}), (3, {"turn 1"})]  # "longer" ends past it
    assert tree.ends_along([1, 2, 3]) == [(3, {"turn 1"})]
    assert tree.ends_along([1, 2]) == [] and tree.ends_along([]) == []
    assert tree.covers([1, 2, 3, 4], besides="x") and not tree.covers([1, 2, 3, 4], besides="x", exactly=True)
    assert tree.covers([1, 2, 3], besides="x", exactly=True) and not tree.covers([1, 2, 3], "turn 1", exactly=True)


@pytest.fixture(scope="module", params=["lfm2", "mamba"])
def model(request: pytest.FixtureRequest, smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = getattr(hybrid_models, request.param)
    return build(tmp_path_factory.mktemp("recurrent") / f"{request.param}.gguf", smollm2_path)


@pytest.fixture(scope="module")
def cold(model: Path) -> Iterator[httpx.Client]:
    """A runner that keeps no state to resume from: every prompt computed from its first token."""
    args = ("--ctx", "512", "--parallel", "1", "--cache-ram-mb", "0", "--threads", runner_threads())
    with running_runner(model, *args) as r, r.client() as c:
        yield c


def held(done: dict) -> int:
    """Tokens the answer's sequence holds in its state: all of its context but a last token that hit the
    length limit (sampled, never evaluated)."""
    return len(done["context"]) - (done["done_reason"] == "length")


def fresh(cold: httpx.Client, prompt: list[int]) -> tuple[str, dict]:
    """``prompt``'s greedy answer computed from nothing (the slot first holds an unrelated prompt)."""
    complete(cold, "unrelated", num_predict=1, temperature=0)
    pieces, done = complete(cold, prompt, num_predict=ANSWER, temperature=0)
    assert done["cached_tokens"] == 0, done
    return "".join(pieces), done


def test_a_recurrent_model_resumes_only_from_saved_states(model: Path, cold: httpx.Client) -> None:
    args = ("--ctx", "512", "--parallel", "2", "--threads", runner_threads(), "--check-kv")
    with running_runner(model, *args) as r, r.client() as c:
        assert c.get("/health").json()["cache_mode"] == "recurrent state checkpoints"
        follow = tokens_of(c, FOLLOW, add_special=False)
        seen: list[tuple[list[int], dict]] = []

        def ask(prompt: list[int] | str) -> dict:
            tokens = prompt if isinstance(prompt, list) else tokens_of(c, prompt)
            pieces, done = complete(c, tokens, num_predict=ANSWER, temperature=0)
            assert "error" not in done, done
            assert "".join(pieces) == fresh(cold, tokens)[0], f"answer differs from a fresh computation: {done}"
            seen.append((tokens, done))
            return done

        first = ask(chat("Tell me about the stars."))
        assert first["cached_tokens"] == 0
        # the next turn extends the first (its prompt, answer and a new question): the idle slot resumes
        second = ask(first["context"] + follow)
        assert second["cached_tokens"] == held(first)
        # the same prompt again: the slot holds more than it, the checkpoint before its last token is taken
        again = ask(first["context"] + follow)
        assert again["cached_tokens"] == len(first["context"] + follow) - 1
        # an edited question after the first turn: the slot's state is past the fork; the first prompt's checkpoint
        fork = ask(first["context"] + tokens_of(c, FOLLOW.replace("moon", "sun"), add_special=False))
        first_prompt = len(tokens_of(c, chat("Tell me about the stars.")))
        assert fork["cached_tokens"] == first_prompt - 1
        # other conversations take both slots: the first one's states come back from host RAM
        for topic in ("comets", "planets", "galaxies"):
            ask(chat(f"Tell me about {topic}."))
        third = ask(second["context"] + follow)
        assert third["cached_tokens"] == held(second)
        health = c.get("/health").json()
        assert health["cache_reused_tokens"] == sum(done["cached_tokens"] for _, done in seen)
        assert health["cache_ram_bytes"] > 0
