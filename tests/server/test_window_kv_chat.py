"""gpt-oss and Gemma 4 through the daemon with their sliding layers keeping only their window.

The runner's pool holds the layers that do not slide; each sequence's sliding layers live in a ring of blocks
of a fixed length (``/api/ps`` ``kv_blocks.window_blocks``), and the prefix cache resumes a prompt only where it
kept a snapshot of that window (as for a recurrent state). Every answer here must equal the answer of a runner
that caches nothing (a fresh runner per request: ``keep_alive: 0`` on a daemon without the disk tier), over
conversations many windows long: a chat's turns, a long shared prompt asked again, ``n`` > 1 choices,
speculative decoding (prompt-lookup drafts cut back, and the same file as a draft model), and a restarted daemon
resuming from the window snapshots on disk. Tiny gpt-oss (a
16-position window) and Gemma 4 E4B-style (8) models with SmolLM2's tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from localllm.runner.kv_disk import STATE_SUFFIX
from support.daemon import Daemon, native_daemon

BS = 16
GREEDY = {"temperature": 0, "num_predict": 24}
SYSTEM = "You are a careful guide to the old cities of Europe and their rivers. " * 40  # some 600 tokens
PARALLEL = 2
SEQUENCES = {"LOCALLLM_NUM_PARALLEL": str(PARALLEL)}  # two sequences a runner


@pytest.fixture(scope="module", params=["gpt_oss_path", "gemma4_e_path"], ids=["gpt-oss", "gemma4-e"])
def model(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def fresh(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ollama.Client]:
    with native_daemon(tmp_path_factory.mktemp("fresh"), model, "w", LOCALLLM_KV_DISK="0", **SEQUENCES) as daemon:
        yield ollama.Client(host=daemon.url, timeout=300)


@pytest.fixture(scope="module")
def warm(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with native_daemon(tmp_path_factory.mktemp("warm"), model, "w", **SEQUENCES) as daemon:
        yield daemon


def fresh_chat(fresh: ollama.Client, messages: list[dict[str, str]], **options) -> ollama.ChatResponse:
    return fresh.chat("w", messages=messages, options={**GREEDY, **options}, keep_alive=0)


def kv_blocks(daemon: Daemon) -> dict[str, int]:
    return httpx.get(f"{daemon.url}/api/ps").json()["models"][0]["kv_blocks"]


def test_a_long_chat_holds_a_fixed_window_and_answers_as_a_fresh_runner(warm: Daemon, fresh) -> None:
    client = openai.OpenAI(base_url=f"{warm.url}/v1", api_key="unused", timeout=300)
    messages = [{"role": "system", "content": "Chat: " + SYSTEM}]
    rings, previous_prompt = set(), 0
    for turn in range(4):
        messages.append({"role": "user", "content": f"Question {turn}: which river runs through city {turn}?"})
        got = client.chat.completions.create(model="w", messages=messages, temperature=0, max_tokens=24, seed=1)
        want = fresh_chat(fresh, messages)
        answer = got.choices[0].message.content
        assert answer == want.message.content, f"turn {turn}"
        cached = got.usage.prompt_tokens_details.cached_tokens
        if turn:  # the last turn's end (a snapshot of its window) at least, as far as its last block boundary
            assert cached >= previous_prompt // BS * BS - BS, (turn, cached, previous_prompt)
        previous_prompt = got.usage.prompt_tokens
        messages.append({"role": "assistant", "content": answer})
        rings.add(kv_blocks(warm)["window_blocks"])
    # the sliding layers' memory: the same rings however long the chat grew, shorter than the chat itself
    assert len(rings) == 1, rings
    (ring_blocks,) = rings
    assert 0 < ring_blocks // PARALLEL * BS < previous_prompt


def test_a_long_shared_prompt_asked_again_resumes_from_its_window(warm: Daemon, fresh) -> None:
    client = ollama.Client(host=warm.url, timeout=300)
    system = "Shared: " + SYSTEM
    asked = [[{"role": "system", "content": system}, {"role": "user", "content": q}]
             for q in ("Name a bridge.", "Name a tower.")]
    got = [client.chat("w", messages=m, options=GREEDY) for m in asked]
    wants = [fresh_chat(fresh, m) for m in asked]
    assert [g.message.content for g in got] == [w.message.content for w in wants]
    # the second computed only what follows the snapshot the first left where their prompts part
    assert got[1].prompt_eval_count <= wants[1].prompt_eval_count - len(SYSTEM) // 8, (got[1], wants[1])
    assert kv_blocks(warm)["snapshots"] > 0


def test_n_choices_fork_from_the_window_of_their_shared_prompt(warm: Daemon, fresh) -> None:
    client = openai.OpenAI(base_url=f"{warm.url}/v1", api_key="unused", timeout=300)
    messages = [{"role": "system", "content": "Forks: " + SYSTEM}, {"role": "user", "content": "Name a square."}]
    got = client.chat.completions.create(model="w", messages=messages, temperature=0, max_tokens=24, n=3)
    want = fresh_chat(fresh, messages)
    assert [c.message.content for c in got.choices] == [want.message.content] * 3
    assert got.usage.prompt_tokens_details.cached_tokens >= got.usage.prompt_tokens - BS - 1, got.usage


def test_speculation_cuts_drafts_back_to_the_accepted_tokens_exactly(warm: Daemon, fresh, model: Path) -> None:
    prompt = "The cat sat on the mat. " * 10
    options = {"temperature": 0, "num_predict": 120}
    plain = fresh.generate("w", prompt, raw=True, options=options, keep_alive=0)
    body = {"model": "w", "prompt": prompt, "raw": True, "stream": False, "options": {**options, "speculative": "on"}}
    drafted = httpx.post(f"{warm.url}/api/generate", json=body, timeout=300).json()
    assert drafted["response"] == plain.response
    assert drafted["draft_count"] > drafted["draft_accepted_count"], drafted  # drafts were cut back
    body["options"]["draft"] = "w"  # the same file as a draft model: its own context keeps every position
    with_model = httpx.post(f"{warm.url}/api/generate", json=body, timeout=300)
    assert with_model.status_code == 200, with_model.text
    assert with_model.json()["response"] == plain.response


@pytest.mark.slow  # two daemon starts
def test_a_restarted_daemon_resumes_from_the_window_snapshots_on_disk(model: Path, fresh, tmp_path: Path) -> None:
    prompt = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nName a river.<|im_end|>\n"
              "<|im_start|>assistant\n")
    body = {"model": "w", "prompt": prompt, "raw": True, "stream": False, "options": GREEDY}
    want = fresh.generate("w", prompt, raw=True, options=GREEDY, keep_alive=0)
    with native_daemon(tmp_path, model, "w", **SEQUENCES) as daemon:
        cold = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        assert cold["response"] == want.response and cold["prompt_eval_count"] == want.prompt_eval_count
        daemon.stop()  # the runner writes its blocks and the snapshots of their windows
        assert sorted((tmp_path / "state" / "kv-cache").glob(f"*/*/*{STATE_SUFFIX}"))
        daemon.start()
        warm = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        assert warm["response"] == want.response
        assert warm["prompt_eval_count"] <= BS, warm  # from the snapshot before the prompt's last token
