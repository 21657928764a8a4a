"""Gemma 4 through the real daemon on the native engine, as a user chats with it (the ``ollama`` client).

Two tiny Gemma 4s (the 26B-A4B shape with experts beside a dense FFN, the E4B shape with per-layer embeddings and
layers reading earlier layers' KV; SmolLM2's tokenizer and a ChatML template): ``/api/ps`` says the native engine
runs them and why, a three-turn chat resumes each turn from the cached prefix of the last (from the snapshot of its
sliding layers' window the last turn left: test_window_kv_chat.py), and the same chat asked again gives the same
greedy answers.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import ollama
import pytest

from localllm.backends.native import kernels
from localllm.server.engine_choice import MEASURED_ISAS

OPTIONS = {"temperature": 0, "num_predict": 8}
QUESTIONS = ["Tell me about the sea.", "And the rivers?", "Which one is colder?"]

pytestmark = pytest.mark.skipif(kernels.isa() not in MEASURED_ISAS, reason="the native engine is opt-in on this CPU")


def chat(client: ollama.Client, model: str) -> list[str]:
    messages, answers = [], []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        answer = client.chat(model=model, messages=messages, options=OPTIONS).message.content
        messages.append({"role": "assistant", "content": answer})
        answers.append(answer)
    return answers


def hit_ratio(daemon, model: str) -> float:
    metrics = httpx.get(f"{daemon.url}/metrics").text
    found = re.search(rf'localllm_prefix_cache_hit_ratio{{model="{model}[^"]*",engine="native"}} ([0-9.e+-]+)', metrics)
    assert found, metrics
    return float(found.group(1))


@pytest.mark.parametrize("fixture", ["gemma4_path", "gemma4_e_path"], ids=["26b-a4b-shape", "e4b-shape"])
def test_a_chat_runs_natively_and_resumes_from_the_cached_prefix(daemon, request, fixture: str) -> None:
    model = f"tiny-{fixture.replace('_path', '').replace('_', '-')}"
    daemon.create(model, f"FROM {request.getfixturevalue(fixture)}\n")
    client = ollama.Client(host=daemon.url)
    first = chat(client, model)
    assert all(first)
    entry = next(m for m in httpx.get(f"{daemon.url}/api/ps").json()["models"] if m["name"].startswith(model))
    assert entry["engine"] == "native" and "runs this model exactly" in entry["engine_reason"]
    assert hit_ratio(daemon, model) > 0  # turns 2 and 3 began where the turn before left off
    assert chat(client, model) == first
