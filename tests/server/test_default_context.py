"""The context a load gets when no request asks: the model's trained length where memory fits it.

Through the real daemon: a 10,000-token prompt to a model trained for 32k, naming no ``num_ctx``, is
served whole; on llama.cpp (four sequences of a whole context each, allocated at load) a memory limit
that cannot hold the trained length gets the longest halving that fits, and ``ps`` and ``show`` say which
and why. Tiny one-layer models with SmolLM2's vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from localllm.gguf import read_gguf
from localllm.server.memory import footprint
from support.daemon import Daemon
from support.gguf_builders import tiny_model
from support.runner import runner_threads

WORDS = 10_000


@pytest.fixture(scope="module")
def trained_32k(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("ctx") / "long.gguf", vocab_from=smollm2_path, context_length=32768)


def ps_entry(daemon: Daemon, name: str) -> dict:
    return next(m for m in httpx.get(f"{daemon.url}/api/ps").json()["models"] if m["name"].startswith(name))


def test_a_long_prompt_is_served_whole_at_the_trained_context(trained_32k: Path, tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, LOCALLLM_NUM_THREADS=runner_threads()).start()
    try:
        daemon.create("long", f"FROM {trained_32k}\n")
        body = {"model": "long", "prompt": " hello" * WORDS, "raw": True, "stream": False, "truncate": False,
                "options": {"num_predict": 1}}
        answer = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        assert answer.json()["prompt_eval_count"] >= WORDS and "truncated" not in answer.json()
        loaded = ps_entry(daemon, "long")
        assert loaded["context_length"] == 32768 and loaded["context_reason"] == "the model's trained length"
        shown = httpx.post(f"{daemon.url}/api/show", json={"model": "long"}).json()["context"]
        assert shown == {"length": 32768, "reason": "the model's trained length", "loaded": True}
    finally:
        daemon.stop()


def test_llama_cpp_takes_the_longest_context_memory_fits(smollm2_path: Path, tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "huge.gguf", vocab_from=smollm2_path, context_length=131072)
    fitting = footprint(read_gguf(model), 32768, 4).total  # llama.cpp's four sequences of 32k
    assert footprint(read_gguf(model), 65536, 4).total > fitting + (1 << 20)
    daemon = Daemon(tmp_path / "d", LOCALLLM_ENGINE="llama.cpp", LOCALLLM_MEMORY_LIMIT=str(fitting + (1 << 20)),
                    LOCALLLM_NUM_THREADS=runner_threads()).start()
    try:
        daemon.create("huge", f"FROM {model}\n")
        shown = httpx.post(f"{daemon.url}/api/show", json={"model": "huge"}).json()["context"]
        assert shown["length"] == 131072 and not shown["loaded"] and "if memory fits it" in shown["reason"]
        answer = httpx.post(f"{daemon.url}/api/generate", timeout=300,
                            json={"model": "huge", "prompt": "Hi", "stream": False, "options": {"num_predict": 1}})
        assert answer.status_code == 200, answer.text
        loaded = ps_entry(daemon, "huge")
        assert loaded["engine"] == "llama.cpp" and loaded["context_length"] == 32768, loaded
        assert loaded["context_reason"] == "what memory fits of 131072 trained"
        assert loaded["size"] <= fitting + (1 << 20)  # the planner counted what it chose
        shown = httpx.post(f"{daemon.url}/api/show", json={"model": "huge"}).json()["context"]
        assert shown == {"length": 32768, "reason": "what memory fits of 131072 trained", "loaded": True}
        asked = httpx.post(f"{daemon.url}/api/generate", timeout=300, json={
            "model": "huge", "prompt": "Hi", "stream": False, "options": {"num_predict": 1, "num_ctx": 8192}})
        assert asked.status_code == 200 and ps_entry(daemon, "huge")["context_length"] == 32768  # it holds 8192
    finally:
        daemon.stop()
