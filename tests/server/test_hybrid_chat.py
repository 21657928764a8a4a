"""A multi-turn chat with a hybrid model through the daemon and the ``ollama`` client.

Each turn's greedy answer equals the answer a fresh runner gives to the same messages, turns after the
first resume from a saved state (the reused tokens are counted in ``/api/ps``), and ``ps`` says how the
model's cache works. The chat goes on as users do: new questions, the last answer asked again, the last
question edited. Before recurrent states were checkpointed, asking again failed with a 500 (the cached
prefix could not be cut back: "decode returned -1"). Tiny random-weight LFM2 (short convolutions and attention) with
SmolLM2's tokenizer and chat template, on llama.cpp (the native engine has no LFM2).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from support import hybrid_models
from support.daemon import Daemon
from support.runner import runner_threads

MODEL = "lfm2-tiny"
OPTIONS = {"temperature": 0, "num_predict": 12}
QUESTIONS = ["Tell me about the sea.", "And the rivers?", "Which one is colder?"]
EDITED = "Which one is warmer?"


@pytest.fixture(scope="module")
def daemon(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("hybrid")
    model = hybrid_models.lfm2(root / "lfm2.gguf", smollm2_path)
    instance = Daemon(root / "daemon", LOCALLLM_NUM_THREADS=runner_threads()).start()
    try:
        instance.create(MODEL, f"FROM {model}\n")
        yield instance
    finally:
        instance.stop()


def loaded(daemon: Daemon) -> dict[str, Any] | None:
    models = httpx.get(f"{daemon.url}/api/ps").json()["models"]
    return next((m for m in models if m["name"].startswith(MODEL)), None)


def unloaded(daemon: Daemon, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while loaded(daemon) is not None:
        assert time.monotonic() < deadline, "the model did not unload"
        time.sleep(0.05)


@pytest.mark.slow  # a fresh runner for each reference answer
def test_each_turn_equals_a_fresh_runner_and_resumes_from_a_saved_state(daemon: Daemon) -> None:
    client = ollama.Client(host=daemon.url)
    turns = []

    def ask(messages: list[dict[str, str]]) -> str:
        reused_before = (loaded(daemon) or {}).get("cache_reused_tokens", 0)
        answer = client.chat(MODEL, messages=messages, options=OPTIONS)
        status = loaded(daemon)
        assert status["engine"] == "llama.cpp" and status["cache"] == "recurrent state checkpoints", status
        turns.append((messages, answer, status["cache_reused_tokens"] - reused_before))
        return answer.message.content

    history: list[dict[str, str]] = []
    for question in QUESTIONS:
        history.append({"role": "user", "content": question})
        history.append({"role": "assistant", "content": ask(list(history))})
    ask(history[:-1])  # the last answer asked again
    ask([*history[:-2], {"role": "user", "content": EDITED}])  # the last question edited

    client.generate(MODEL, keep_alive=0)  # unload: each answer below comes from a runner that has seen nothing
    unloaded(daemon)
    for i, (asked, answer, reused) in enumerate(turns):
        reference = client.chat(MODEL, messages=asked, options=OPTIONS, keep_alive=0)
        unloaded(daemon)
        assert answer.message.content == reference.message.content, f"turn {i + 1}"
        # the fresh runner evaluated the whole prompt; the chat's runner only what it did not reuse
        assert answer.prompt_eval_count + reused == reference.prompt_eval_count, f"turn {i + 1}"
        assert reused > 0 if i else reused == 0, f"turn {i + 1} reused {reused} tokens"


def test_ps_and_show_say_how_the_cache_and_the_context_were_chosen(daemon: Daemon) -> None:
    client = ollama.Client(host=daemon.url)
    client.generate(MODEL, prompt="Hi", options={"num_predict": 1})
    status = loaded(daemon)
    assert status["context_length"] == 4096 and status["context_reason"] == "the model's trained length", status
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": MODEL}).json()
    assert shown["context"] == {"length": 4096, "reason": "the model's trained length", "loaded": True}
