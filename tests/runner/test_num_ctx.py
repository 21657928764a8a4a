"""``num_ctx`` per request: it bounds that request's sequence on the loaded runner, and a native runner serves a
larger one without a reload while its KV pool and the model's trained context allow.

SmolLM2 (trained context 8,192) on the native engine, through a runner and through the daemon.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.daemon import Daemon
from support.gguf_builders import fewer_layers
from support.runner import RunnerProcess, running_runner, runner_threads

COUNTING = ", ".join(str(i) for i in range(1, 11)) + ","
TRAINED = 8192


def long_text(words: int) -> str:
    return " ".join(f"word{i % 97}" for i in range(words))


@pytest.fixture(scope="module")
def runner(smollm2_path: Path) -> Iterator[RunnerProcess]:
    with running_runner(smollm2_path, "--engine", "native", "--ctx", "1024", "--kv-tokens", "6144",
                        "--threads", runner_threads()) as r:
        yield r


def final(client: httpx.Client, prompt: str, shift: bool = True, **options: Any) -> tuple[int, dict[str, Any]]:
    """A completion's status and final object (or error)."""
    body = {"prompt": prompt, "options": {"temperature": 0, **options}, "stream": False, "shift": shift}
    r = client.post("/completion", json=body)
    return r.status_code, r.json()


def test_a_smaller_num_ctx_ends_the_answer_at_that_context(runner: RunnerProcess) -> None:
    with runner.client() as client:
        status, done = final(client, COUNTING, shift=False, num_ctx=128, num_predict=400)
    assert status == 200, done
    # the KV holds at most 128 tokens; the last one was sampled from the 128th position's logits
    assert done["done_reason"] == "length" and len(done["context"]) == 129 and done["eval_count"] < 400


def test_a_smaller_num_ctx_cuts_the_prompt_to_it(runner: RunnerProcess) -> None:
    with runner.client() as client:
        status, done = final(client, long_text(400), num_ctx=256, num_predict=2)
    assert status == 200, done
    assert done["truncated"] is True and done["prompt_eval_count"] + done["cached_tokens"] <= 256


def test_a_larger_num_ctx_is_served_by_the_loaded_runner_uncut(runner: RunnerProcess) -> None:
    prompt = long_text(600)
    with runner.client() as client:
        n = len(client.post("/tokenize", json={"content": prompt, "prompt": True}).json()["tokens"])
        assert 1024 < n < 3000
        status, done = final(client, prompt, num_ctx=3000, num_predict=2)
        assert status == 200, done
        assert "truncated" not in done and done["prompt_eval_count"] + done["cached_tokens"] == n
        assert client.get("/health").json()["n_ctx"] == 1024  # the runner's own default is unchanged


@pytest.mark.parametrize("num_ctx,words", [(TRAINED + 1, ["8193", "8192", "trained"]),
                                          (7000, ["7000", "6144", "pool"])])
def test_a_num_ctx_the_runner_cannot_hold_is_a_400_naming_both_numbers(runner: RunnerProcess, num_ctx: int,
                                                                      words: list[str]) -> None:
    with runner.client() as client:
        status, answer = final(client, "Hello", num_ctx=num_ctx)
    assert status == 400 and all(w in answer["error"] for w in words), answer


# -- through the daemon -------------------------------------------------------------------------


def test_the_daemon_reloads_only_for_a_context_the_pool_cannot_hold(smollm2_path: Path, tmp_path: Path) -> None:
    """The pool holds 4 x 4,096 positions, or one context if longer: a two-layer SmolLM2 trained for 64k."""
    trained = 65536
    model = fewer_layers(smollm2_path, tmp_path / "long.gguf", layers=2, context_length=trained)
    daemon = Daemon(tmp_path / "daemon", LOCALLLM_ENGINE="native", LOCALLLM_NUM_THREADS=runner_threads()).start()
    try:
        daemon.create("ctx", f"FROM {model}")

        def generate(**options: Any) -> httpx.Response:
            body = {"model": "ctx", "prompt": "Say hi.", "stream": False, "options": {"num_predict": 2, **options}}
            return httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300)

        assert generate(num_ctx=1024).status_code == 200  # loads a pool of 4 x 4096
        first = daemon.runner_pids()
        assert generate(num_ctx=16384).status_code == 200 and daemon.runner_pids() == first  # the pool holds it
        assert generate(num_ctx=20000).status_code == 200  # it does not: loaded again, saying why
        assert daemon.runner_pids() != first
        assert "num_ctx 20000 is more than its KV pool holds (16384 positions)" in daemon.log()
        second = daemon.runner_pids()
        assert generate(num_ctx=2048).status_code == 200 and daemon.runner_pids() == second
        assert generate().status_code == 200 and daemon.runner_pids() == second  # no num_ctx: 20000 will do

        refused = generate(num_ctx=trained * 2)
        assert refused.status_code == 400 and all(str(n) in refused.json()["error"] for n in (trained * 2, trained))

        system = "You are a careful assistant. " * 60
        chat = {"model": "ctx", "stream": False, "options": {"num_ctx": 200},
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hi " * 100}]}
        refused = httpx.post(f"{daemon.url}/api/chat", json=chat, timeout=300)
        error = refused.json()["error"]
        assert refused.status_code == 400 and "num_ctx 200" in error and "system part" in error, error
        size = int(re.search(r"system part of (\d+) tokens", error).group(1))
        assert size > 200
        plain = {"model": "ctx", "stream": False, "system": system, "prompt": "Hi", "options": {"num_ctx": 200}}
        refused = httpx.post(f"{daemon.url}/api/generate", json=plain, timeout=300)
        assert refused.status_code == 400 and f"num_ctx 200 is smaller than the prompt's system part of {size} " \
            "tokens" in refused.json()["error"], refused.text  # counted as the chat's
        cut = httpx.post(f"{daemon.url}/api/generate", timeout=300, json={
            **plain, "system": "Be brief.", "prompt": "Hi " * 300, "options": {"num_ctx": 200, "num_predict": 1}})
        assert cut.status_code == 200 and cut.json()["truncated"] is True, cut.text  # a short system: the prompt is cut
    finally:
        daemon.stop()

