"""Loads of different models at once under the daemon's limits: LOCALLLM_MAX_LOADED_MODELS and LOCALLLM_MEMORY_LIMIT
hold while runners start (a load takes its slot and memory when admitted), every request is answered (served in
turn, or a 503 that says why), and LOCALLLM_MAX_QUEUE counts the requests waiting for a model's load.

The models are tiny random llamas (distinct files, so distinct runners) that load in a moment.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from localllm.gguf import read_gguf
from localllm.server.memory import footprint, gpu_devices

from support.daemon import Daemon
from support.gguf_builders import F16, tiny_model

N_MODELS = 4


@pytest.fixture(scope="module")
def tiny_paths(tmp_path_factory, smollm2_path) -> list[Path]:
    """Random weights, SmolLM2's tokenizer (any prompt text tokenizes)."""
    root = tmp_path_factory.mktemp("tiny")
    return [tiny_model(root / f"tiny{i}.gguf", file_type=F16, vocab_from=smollm2_path, seed=i)
            for i in range(N_MODELS)]


def _daemon(root: Path, paths: list[Path], **env: str) -> Daemon:
    daemon = Daemon(root, LOCALLLM_NUM_PARALLEL="1", **env).start()
    for i, path in enumerate(paths):
        daemon.create(f"tiny{i}", f"FROM {path}")
    return daemon


def _generate(name: str) -> dict:
    return {"model": name, "prompt": "Hello there", "raw": True, "stream": False,
            "options": {"num_predict": 4, "temperature": 0}}


async def _burst(daemon: Daemon, bodies: list[dict]) -> tuple[list[httpx.Response], list[list[dict]]]:
    """Send ``bodies`` to /api/generate at once; the answers, and what /api/ps listed (every 50 ms) meanwhile."""
    seen: list[list[dict]] = []
    async with httpx.AsyncClient(base_url=daemon.url, timeout=300) as client:
        answers = asyncio.gather(*(client.post("/api/generate", json=body) for body in bodies))
        while not answers.done():
            seen.append((await client.get("/api/ps")).json()["models"])
            await asyncio.wait({answers}, timeout=0.05)
        seen.append((await client.get("/api/ps")).json()["models"])
        return await answers, seen


def _one_footprint(path: Path) -> int:
    """Bytes the scheduler counts for one runner of a tiny model (llama.cpp, default context, one sequence)."""
    return footprint(read_gguf(path), 4096, 1).total


@pytest.mark.parametrize("limit", ["slots", "memory"])
def test_loads_at_once_never_pass_the_limit_and_are_served_in_turn(tmp_path, tiny_paths, limit):
    one = _one_footprint(tiny_paths[0])
    env = ({"LOCALLLM_MAX_LOADED_MODELS": "1"} if limit == "slots"
           else {"LOCALLLM_MEMORY_LIMIT": str(one * 3 // 2), "LOCALLLM_ENGINE": "llama.cpp"})
    daemon = _daemon(tmp_path, tiny_paths, **env)
    try:
        answers, seen = asyncio.run(_burst(daemon, [_generate(f"tiny{i}") for i in range(N_MODELS)]))
        assert [a.status_code for a in answers] == [200] * N_MODELS, [a.text for a in answers]
        assert all(a.json()["done"] for a in answers)
        most = max(len(models) for models in seen)
        assert most == 1, [[m["name"] for m in models] for models in seen if len(models) > 1]
        if limit == "memory":
            assert max(sum(m["size"] for m in models) for models in seen) <= one * 3 // 2
        [last] = seen[-1]
        assert last["name"] in {f"tiny{i}:latest" for i in range(N_MODELS)} and last["runner"] == "generate"
    finally:
        daemon.stop()


def test_loads_that_cannot_get_room_in_time_are_a_clear_503(tmp_path, tiny_paths):
    """One model stays busy (its client holds an endless stream): the others, asked for at once, wait
    LOCALLLM_LOAD_TIMEOUT and are refused saying why; none of them is loaded beside it."""
    daemon = _daemon(tmp_path, tiny_paths, LOCALLLM_MAX_LOADED_MODELS="1", LOCALLLM_LOAD_TIMEOUT="2s")
    endless = {**_generate("tiny0"), "stream": True, "grammar": 'root ::= "la " root',
               "options": {"num_predict": 100_000}}
    try:
        with httpx.stream("POST", f"{daemon.url}/api/generate", json=endless, timeout=120) as busy:
            assert busy.status_code == 200, busy.read()
            lines = busy.iter_lines()  # held: a dropped iterator closes the stream, and the daemon stops generating
            assert json.loads(next(lines))["done"] is False  # generating: busy before the others ask for room
            answers, seen = asyncio.run(_burst(daemon, [_generate(f"tiny{i}") for i in range(1, N_MODELS)]))
        for answer in answers:
            error = answer.json()["error"]
            assert answer.status_code == 503, error
            assert "LOCALLLM_MAX_LOADED_MODELS" in error and "LOCALLLM_LOAD_TIMEOUT" in error, error
        assert all([m["name"] for m in models] == ["tiny0:latest"] for models in seen), seen
    finally:
        daemon.stop()


def test_requests_waiting_for_a_load_count_in_the_queue_limit(tmp_path, tiny_paths):
    """LOCALLLM_MAX_QUEUE=1 with one sequence a runner: a burst at a model that is not loaded yet gets two
    answers (one running, one waiting) and 503s for the rest, as it would once loaded."""
    daemon = _daemon(tmp_path, tiny_paths[:1], LOCALLLM_MAX_QUEUE="1")
    try:
        answers, _ = asyncio.run(_burst(daemon, [_generate("tiny0")] * 6))
        codes = [a.status_code for a in answers]
        assert set(codes) == {200, 503} and codes.count(200) >= 2, codes
        refused = next(a for a in answers if a.status_code == 503)
        assert refused.headers["retry-after"] and "LOCALLLM_MAX_QUEUE" in refused.json()["error"]
    finally:
        daemon.stop()


def test_unset_model_limit_is_three_per_gpu(tmp_path, tiny_paths):
    """LOCALLLM_MAX_LOADED_MODELS unset (0): 3 runners per GPU, 3 without one, as Ollama."""
    gpus = [device for device in gpu_devices() if not device.on_request_only]
    expected = 3 * max(1, len(gpus))
    if expected >= N_MODELS:
        pytest.skip(f"{len(gpus)} GPUs: room for {expected} models, more than the {N_MODELS} made here")
    daemon = _daemon(tmp_path, tiny_paths)
    try:
        for i in range(N_MODELS):
            answer = httpx.post(f"{daemon.url}/api/generate", json=_generate(f"tiny{i}"), timeout=120)
            assert answer.status_code == 200, answer.text
        loaded = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
        assert len(loaded) == expected and "tiny0:latest" not in [m["name"] for m in loaded]
    finally:
        daemon.stop()
