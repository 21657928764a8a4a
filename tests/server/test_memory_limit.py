"""LOCALLLM_MEMORY_LIMIT and the model slots through the real daemon: a load that does not fit evicts idle
models, waits for busy ones up to LOCALLLM_LOAD_TIMEOUT, then refuses saying why.

A model's generating and embedding runners are separate loads of the same size,
so one model gives the two loads these tests need.
"""

from __future__ import annotations

import contextlib
import re
import os
import signal
import time

import httpx
import pytest

from support.daemon import Daemon
from support.faults import wait_for
from localllm.gguf import read_gguf
from localllm.server.memory import footprint

MODEL = "smollm2:135m"
GENERATE = {"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 1}}
EMBED = {"model": MODEL, "input": "Hi"}


def _daemon(root, smollm2_path, limit: int, **env: str) -> Daemon:
    # llama.cpp's one stream a sequence: the footprint below is what a load takes (the native pool holds 4 contexts)
    daemon = Daemon(root, LOCALLLM_MEMORY_LIMIT=str(limit), LOCALLLM_NUM_PARALLEL="1", LOCALLLM_ENGINE="llama.cpp",
                    **env).start()
    daemon.create(MODEL, f"FROM {smollm2_path}")
    return daemon


@pytest.fixture(scope="module")
def one_model(smollm2_path) -> int:
    """Bytes one runner of the fixture model is estimated to take (default context, one slot)."""
    return footprint(read_gguf(smollm2_path), 4096, 1).total


def _loaded(daemon) -> list[dict]:
    return httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]


def test_an_idle_model_is_evicted_to_make_room(tmp_path, smollm2_path, one_model):
    daemon = _daemon(tmp_path, smollm2_path, one_model * 3 // 2)
    try:
        assert httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120).status_code == 200
        assert len(_loaded(daemon)) == 1
        embedded = httpx.post(f"{daemon.url}/api/embed", json=EMBED, timeout=120)
        assert embedded.status_code == 200, embedded.text
        assert len(_loaded(daemon)) == 1 and len(daemon.runner_pids()) == 1  # the generating runner went
    finally:
        daemon.stop()


def _in_flight(daemon) -> int:
    metrics = httpx.get(f"{daemon.url}/metrics", timeout=30).text
    prefix = f'localllm_requests_in_flight{{model="{MODEL}"}} '
    return sum(int(line[len(prefix):]) for line in metrics.splitlines() if line.startswith(prefix))


def test_a_busy_model_is_waited_for_then_the_load_is_refused(tmp_path, smollm2_path, one_model):
    daemon = _daemon(tmp_path, smollm2_path, one_model * 3 // 2, LOCALLLM_LOAD_TIMEOUT="1s")
    # busy until its client leaves: a grammar that never lets the answer end (a sampled story could end early)
    endless = {**GENERATE, "stream": True, "grammar": 'root ::= "la " root', "options": {"num_predict": 100000}}
    try:
        assert httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120).status_code == 200
        with httpx.stream("POST", f"{daemon.url}/api/generate", json=endless, timeout=120) as busy:
            assert busy.status_code == 200
            lines = busy.iter_lines()  # held: a dropped iterator closes the stream, and the daemon stops generating
            assert '"done": false' in next(lines)  # generating: busy before the embedding runner asks for room
            refused = httpx.post(f"{daemon.url}/api/embed", json=EMBED, timeout=120)
            error = refused.json()["error"]
            assert refused.status_code == 503, error  # the machine's shortfall, not the request's
            assert "needs about" in error and "LOCALLLM_MEMORY_LIMIT" in error and "LOCALLLM_LOAD_TIMEOUT" in error
        deadline = time.monotonic() + 60  # its client left: the model goes idle
        while _in_flight(daemon) and time.monotonic() < deadline:
            time.sleep(0.1)
        embedded = httpx.post(f"{daemon.url}/api/embed", json=EMBED, timeout=120)  # idle now: evicted for it
        assert embedded.status_code == 200, embedded.text
    finally:
        daemon.stop()


def _state(pid: int) -> str | None:
    """A process's state letter (``T``: stopped), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return None if state in ("Z", "X") else state


def test_a_runner_slow_to_stop_does_not_hold_up_the_next_load(tmp_path, smollm2_path):
    """An evicted runner writes its KV to the disk tier on its way out; the load that evicted it goes on meanwhile.

    The evicted runner is frozen (SIGSTOP) so that its stop cannot end before it is let go: the embedding load
    must have answered while it was still there, its memory counted until it exited.
    """
    daemon = Daemon(tmp_path, LOCALLLM_MAX_LOADED_MODELS="1").start()
    try:
        daemon.create(MODEL, f"FROM {smollm2_path}")
        assert httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120).status_code == 200
        [frozen] = daemon.runner_pids()
        os.kill(frozen, signal.SIGSTOP)
        try:
            embedded = httpx.post(f"{daemon.url}/api/embed", json=EMBED, timeout=120)
            assert embedded.status_code == 200, embedded.text
            assert _state(frozen) == "T", "the embedding load waited for the evicted runner to stop"
            assert [m["name"] for m in _loaded(daemon)] == [MODEL] and len(daemon.runner_pids()) == 2
        finally:
            with contextlib.suppress(ProcessLookupError):  # killed: its stop was waited for, up to its timeout
                os.kill(frozen, signal.SIGCONT)
        wait_for(lambda: frozen not in daemon.runner_pids(), 60, "the evicted runner to exit")
        answered = httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120)  # it takes the slot back
        assert answered.status_code == 200, answered.text
    finally:
        daemon.stop()


def test_a_model_larger_than_the_limit_is_refused_at_once(tmp_path, smollm2_path, one_model):
    daemon = _daemon(tmp_path, smollm2_path, one_model // 2)
    try:
        refused = httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120)
        assert refused.status_code == 503  # the machine's limit, not the request, is why
        error = refused.json()["error"]
        assert f"needs about {one_model / (1 << 20):.0f} MiB" in error and "LOCALLLM_MEMORY_LIMIT" in error, error
        assert _loaded(daemon) == [] and daemon.runner_pids() == []
    finally:
        daemon.stop()


@pytest.mark.parametrize("path,body", [("/api/generate", GENERATE), ("/api/embed", EMBED)])
def test_a_context_too_large_for_the_memory_is_the_requests_400(tmp_path, smollm2_path, one_model, path, body):
    daemon = _daemon(tmp_path, smollm2_path, one_model * 6 // 5)  # the trained context (8192) takes 1.25 x
    try:
        refused = httpx.post(f"{daemon.url}{path}", json=dict(body, options={"num_ctx": 8192}), timeout=120)
        error = refused.json()["error"]
        assert refused.status_code == 400, error
        assert "num_ctx 8192" in error and "needs about" in error and "LOCALLLM_MEMORY_LIMIT" in error
        assert _loaded(daemon) == [] and daemon.runner_pids() == []
    finally:
        daemon.stop()


def test_a_memory_limit_that_is_not_a_size_stops_the_daemon_with_a_message(tmp_path):
    with pytest.raises(RuntimeError, match="daemon exited.*LOCALLLM_MEMORY_LIMIT must be a size"):
        Daemon(tmp_path, LOCALLLM_MEMORY_LIMIT="lots").start(timeout=60)


@pytest.mark.parametrize("fixture", ["qwen3moe_path", "gpt_oss_path", "gemma4_path"])
def test_a_moe_or_sliding_window_model_that_cannot_fit_is_refused_before_loading_with_the_figures(
        request, tmp_path, fixture):
    """A mixture-of-experts model (qwen3moe; gpt-oss and Gemma 4 26B-A4B with sliding-window layers too) on the
    native engine: every expert counted, refused before any runner starts, saying what it needs and the limit."""
    path = request.getfixturevalue(fixture)
    weights = sum(t.nbytes for t in read_gguf(path).tensors)
    limit = weights // 2
    daemon = Daemon(tmp_path, LOCALLLM_MEMORY_LIMIT=str(limit), LOCALLLM_ENGINE="native").start()
    try:
        daemon.create("m", f"FROM {path}")
        refused = httpx.post(f"{daemon.url}/api/generate", json={"model": "m", "prompt": "Hi", "stream": False},
                             timeout=120)
        error = refused.json()["error"]
        assert refused.status_code == 503, error
        needed = re.search(r"model m\S* needs about (\d+) MiB of memory, more than all of "
                           r"LOCALLLM_MEMORY_LIMIT=(\d+) MiB", error)
        assert needed, error
        assert int(needed.group(1)) >= weights >> 20 and int(needed.group(2)) == round(limit / (1 << 20))
        assert _loaded(daemon) == [] and daemon.runner_pids() == []
    finally:
        daemon.stop()
