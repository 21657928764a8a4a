"""Request limits (LOCALLLM_MAX_*), the queue limit with 503, and Prometheus metrics."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from support.daemon import Daemon

MODEL = "smollm2:135m"
ENDLESS = 'root ::= "la " root'  # no answer ends early: the burst's requests overlap however the model samples


@pytest.fixture(scope="module")
def limited(tmp_path_factory, smollm2_path):
    daemon = Daemon(tmp_path_factory.mktemp("limited"), LOCALLLM_MAX_MESSAGES="3", LOCALLLM_MAX_TOOLS="1",
                    LOCALLLM_MAX_PROMPT_CHARS="200", LOCALLLM_MAX_SCHEMA_BYTES="100", LOCALLLM_MAX_NUM_PREDICT="64",
                    LOCALLLM_MAX_NUM_CTX="8192", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_MAX_QUEUE="1").start()
    daemon.create(MODEL, f"FROM {smollm2_path}")
    yield daemon
    daemon.stop()


def _error(daemon, path, body):
    response = httpx.post(f"{daemon.url}{path}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    return error["message"] if isinstance(error, dict) else error


@pytest.mark.parametrize("path,body,variable", [
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}] * 4}, "LOCALLLM_MAX_MESSAGES"),
    ("/api/generate", {"prompt": "x" * 201}, "LOCALLLM_MAX_PROMPT_CHARS"),
    ("/api/generate", {"prompt": "hi", "options": {"num_predict": 65}}, "LOCALLLM_MAX_NUM_PREDICT"),
    ("/api/generate", {"prompt": "hi", "options": {"num_ctx": 9000}}, "LOCALLLM_MAX_NUM_CTX"),
    ("/api/generate", {"prompt": "hi", "grammar": "root ::= " + '"a" | ' * 30 + '"b"'}, "LOCALLLM_MAX_SCHEMA_BYTES"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(2)]},
     "LOCALLLM_MAX_TOOLS"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "y" * 300}]}, "LOCALLLM_MAX_PROMPT_CHARS"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 100}, "LOCALLLM_MAX_NUM_PREDICT"),
    ("/api/embed", {"input": ["a", "b", "c", "d"]}, "LOCALLLM_MAX_MESSAGES"),
    # every endpoint that takes options checks them the same way, before any work (no load, no 500)
    ("/api/embed", {"input": "hi", "options": {"num_ctx": 10**12}}, "LOCALLLM_MAX_NUM_CTX"),
    ("/api/embeddings", {"prompt": "hi", "options": {"num_ctx": 10**12}}, "LOCALLLM_MAX_NUM_CTX"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "options": {"num_ctx": 1e12}},
     "LOCALLLM_MAX_NUM_CTX"),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 65}, "LOCALLLM_MAX_NUM_PREDICT"),
])
def test_limits_name_the_variable(limited, path, body, variable):
    assert variable in _error(limited, path, {"model": MODEL, **body})


def test_queue_overflow_is_503_with_retry_after(limited):
    body = {"model": MODEL, "prompt": "Write a long story.", "stream": False, "grammar": ENDLESS,
            "options": {"num_predict": 60}}

    async def burst():
        async with httpx.AsyncClient(base_url=limited.url, timeout=300) as client:
            await client.post("/api/generate", json={**body, "options": {"num_predict": 1}})  # load first
            return await asyncio.gather(*(client.post("/api/generate", json=body) for _ in range(5)))

    responses = asyncio.run(burst())
    codes = sorted(r.status_code for r in responses)
    assert 200 in codes and 503 in codes, codes
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers["retry-after"] and "LOCALLLM_MAX_QUEUE" in refused.json()["error"]


def test_queue_limit_counts_requests_under_every_name_of_a_model(limited):
    """Requests under a copy wait for the same runner, so they count against the same queue."""
    httpx.post(f"{limited.url}/api/copy", json={"source": MODEL, "destination": "mine"}, timeout=30).raise_for_status()
    body = {"model": "mine", "prompt": "Write a long story.", "stream": False, "grammar": ENDLESS,
            "options": {"num_predict": 60}}

    async def burst():
        async with httpx.AsyncClient(base_url=limited.url, timeout=300) as client:
            await client.post("/api/generate", json={**body, "model": MODEL, "options": {"num_predict": 1}})
            return await asyncio.gather(*(client.post("/api/generate", json=body) for _ in range(5)))

    codes = sorted(r.status_code for r in asyncio.run(burst()))
    assert 200 in codes and 503 in codes, codes


def test_metrics_in_prometheus_format(daemon):
    httpx.post(f"{daemon.url}/api/generate", json={"model": MODEL, "prompt": "Hi", "stream": False,
                                                   "options": {"num_predict": 3}}, timeout=120)
    text = httpx.get(f"{daemon.url}/metrics").text
    assert "# TYPE localllm_requests_total counter" in text
    assert f'localllm_requests_total{{model="{MODEL}",outcome="ok"}}' in text
    assert f'localllm_time_to_first_token_seconds_bucket{{model="{MODEL}",le="+Inf"}}' in text
    generated = next(line for line in text.splitlines() if line.startswith("localllm_generated_tokens_total"))
    assert int(generated.split()[-1]) >= 3
