"""Qwen 3.5 on the native engine (by default, and when asked), chatting through the daemon.

A tiny random-weight qwen35 (Q8_0; support.arch_models.qwen_hybrid) with SmolLM2's tokenizer and a ChatML
template. Every turn of a chat gives llama.cpp's greedy answer on the same file, the later turns resumed from
the recurrent state snapshots of the earlier ones (tests/server/test_hybrid_prefix_cache.py counts them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from localllm.backends.native import kernels
from localllm.server.engine_choice import MEASURED_ISAS
from support.daemon import Daemon
from support.runner import runner_threads

OPTIONS = {"temperature": 0, "num_predict": 12}
QUESTIONS = ["Tell me about the sea.", "And the rivers?", "Which one is colder?"]


@pytest.fixture(scope="module")
def daemon(qwen35_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    instance = Daemon(tmp_path_factory.mktemp("qwen35-daemon"), LOCALLLM_NUM_THREADS=runner_threads()).start()
    try:
        for name, engine in (("q35-native", "native"), ("q35-llama", "llama.cpp"), ("q35-default", None)):
            instance.create(name, f"FROM {qwen35_path}\n" + (f"PARAMETER engine {engine}\n" if engine else ""))
        yield instance
    finally:
        instance.stop()


def engine_of(daemon: Daemon, name: str) -> dict[str, Any]:
    models = httpx.get(f"{daemon.url}/api/ps").json()["models"]
    return next(m for m in models if m["name"].startswith(name))


@pytest.mark.slow  # six chats, a runner for each engine
def test_every_turn_of_a_chat_equals_llama_cpp_s_answer(daemon: Daemon) -> None:
    client = ollama.Client(host=daemon.url)
    histories: dict[str, list[dict[str, str]]] = {"q35-native": [], "q35-llama": []}
    for question in QUESTIONS:
        answers = {}
        for name, history in histories.items():
            history.append({"role": "user", "content": question})
            answers[name] = client.chat(name, messages=history, options=OPTIONS).message.content
            history.append({"role": "assistant", "content": answers[name]})
        assert engine_of(daemon, "q35-native")["engine"] == "native"
        assert answers["q35-native"] == answers["q35-llama"] and answers["q35-native"]


def test_without_the_setting_it_runs_natively_where_that_is_measured_faster(daemon: Daemon) -> None:
    client = ollama.Client(host=daemon.url)
    client.generate("q35-default", prompt="Hello", options=OPTIONS)
    status = engine_of(daemon, "q35-default")
    assert status["engine"] == ("native" if kernels.isa() in MEASURED_ISAS else "llama.cpp"), status
