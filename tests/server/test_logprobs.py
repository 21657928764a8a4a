"""Log-probabilities in Ollama's and OpenAI's shapes, from the distribution actually sampled from."""

from __future__ import annotations

import math

import httpx
import openai
import pytest

MODEL = "smollm2:135m"


@pytest.fixture(scope="module")
def oai(daemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)


def test_openai_chat_logprobs(oai):
    answer = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi."}],
                                         max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens
    assert "".join(t.token for t in content) == answer.choices[0].message.content
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        # greedy: the chosen token is the likeliest one
        assert entry.top_logprobs[0].token == entry.token
        assert math.isclose(entry.top_logprobs[0].logprob, entry.logprob, abs_tol=1e-6)
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob


def test_openai_streamed_logprobs(oai):
    chunks = list(oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi."}],
                                              max_tokens=6, temperature=0, logprobs=True, stream=True))
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert tokens and "".join(t.token for t in tokens) == text


def test_openai_completion_logprobs(oai):
    answer = oai.completions.create(model=MODEL, prompt="The sky is", max_tokens=4, temperature=0, logprobs=2)
    logprobs = answer.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 4
    assert all(len(alts) == 2 for alts in logprobs.top_logprobs)
    assert logprobs.text_offset == sorted(logprobs.text_offset)


def test_sampled_distribution_is_truncated_by_top_k(daemon):
    body = {"model": MODEL, "prompt": "Once upon a time", "raw": True, "stream": False, "logprobs": True,
            "top_logprobs": 5, "options": {"top_k": 2, "temperature": 1.0, "seed": 1, "num_predict": 5}}
    answer = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=120).json()
    for entry in answer["logprobs"]:
        alternatives = entry["top_logprobs"]
        assert len(alternatives) <= 2  # the sampler only kept two candidates
        assert math.isclose(sum(math.exp(a["logprob"]) for a in alternatives), 1.0, rel_tol=1e-4)


def test_ollama_chat_logprobs_stream(daemon):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "logprobs": True,
            "options": {"num_predict": 5, "temperature": 0}}
    with httpx.stream("POST", f"{daemon.url}/api/chat", json=body, timeout=120) as response:
        import json

        chunks = [json.loads(line) for line in response.iter_lines() if line]
    entries = [e for c in chunks for e in c.get("logprobs", [])]
    assert entries and all(set(e) == {"token", "logprob", "bytes", "top_logprobs"} for e in entries)


@pytest.mark.parametrize("value", [-1, 21])
def test_top_logprobs_out_of_range_is_400(daemon, value):
    response = httpx.post(f"{daemon.url}/api/generate", json={
        "model": MODEL, "prompt": "hi", "logprobs": True, "top_logprobs": value})
    assert response.status_code == 400
    assert "top_logprobs" in response.json()["error"]


def test_openai_top_logprobs_out_of_range_is_400(oai):
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], logprobs=True,
                                    top_logprobs=50)
