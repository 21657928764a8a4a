"""The native engine's prefix cache on hybrid models (Gated DeltaNet + attention), through the daemon.

A recurrent state cannot be cut back, so the KV pool keeps snapshots of it at block boundaries
(localllm/runner/kv_blocks.py, paged_engine.py). Every answer here must equal the answer a runner that
caches nothing gives (a fresh runner per request: ``keep_alive: 0`` on a daemon without the disk tier),
while the cache serves what these tests count: the turns of a chat, a system prompt shared by eight
conversations, snapshots a restarted daemon reads from disk (and drops when damaged), and drafts cut back
by speculative decoding. Tiny qwen35 and qwen35moe models with SmolLM2's tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest

from localllm.runner.kv_disk import STATE_SUFFIX
from support.arch_models import qwen_hybrid
from support.daemon import Daemon, native_daemon

BS = 16  # the runner's KV block: a snapshot ends one
GREEDY = {"temperature": 0, "num_predict": 8}
SYSTEM = "You are a careful guide to the old cities of Europe and their rivers. " * 40  # some 600 tokens


@pytest.fixture(scope="module", params=["qwen35", "qwen35moe"])
def model(request: pytest.FixtureRequest, smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen_hybrid(tmp_path_factory.mktemp("hybrid") / f"{request.param}.gguf", smollm2_path, request.param,
                       context=4096)


@pytest.fixture(scope="module")
def fresh(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ollama.Client]:
    """A daemon whose every answer comes from a runner started for it (no disk tier to read from)."""
    with native_daemon(tmp_path_factory.mktemp("fresh"), model, "hy", LOCALLLM_KV_DISK="0") as daemon:
        yield ollama.Client(host=daemon.url, timeout=300)


@pytest.fixture(scope="module")
def warm(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with native_daemon(tmp_path_factory.mktemp("warm"), model, "hy") as daemon:
        yield daemon


def fresh_chat(fresh: ollama.Client, messages: list[dict[str, str]]) -> ollama.ChatResponse:
    answer = fresh.chat("hy", messages=messages, options=GREEDY, keep_alive=0)
    assert answer.done_reason in ("stop", "length")
    return answer


def fresh_generate(fresh: ollama.Client, prompt: str, **options: Any) -> ollama.GenerateResponse:
    return fresh.generate("hy", prompt, raw=True, options={**GREEDY, **options}, keep_alive=0)


@pytest.mark.slow  # a fresh runner for every turn
def test_every_turn_of_a_chat_reuses_the_last_and_answers_as_a_fresh_runner(warm: Daemon, fresh) -> None:
    client = openai.OpenAI(base_url=f"{warm.url}/v1", api_key="unused", timeout=300)
    messages = [{"role": "system", "content": "You answer briefly."}]
    previous_prompt, reused = 0, 0
    for turn in range(10):
        messages.append({"role": "user", "content": f"Question {turn}: what is {turn} and {turn + 1}?"})
        got = client.chat.completions.create(model="hy", messages=messages, temperature=0, max_tokens=8, seed=1)
        want = fresh_chat(fresh, messages)
        answer = got.choices[0].message.content
        assert answer == want.message.content, f"turn {turn}"
        usage = got.usage
        assert usage.prompt_tokens == want.prompt_eval_count  # the same prompt, computed whole there
        cached = usage.prompt_tokens_details.cached_tokens
        if turn:  # the last turn's prompt at least, as far as its last block boundary
            assert cached >= previous_prompt // BS * BS - BS, (turn, cached, previous_prompt)
        reused += cached
        previous_prompt = usage.prompt_tokens
        messages.append({"role": "assistant", "content": answer})
    assert reused > 9 * 40


def test_eight_conversations_sharing_a_system_prompt_compute_it_once(warm: Daemon, fresh) -> None:
    client = ollama.Client(host=warm.url, timeout=300)
    system = "Eight: " + SYSTEM
    questions = [f"Tell me about city number {i}." for i in range(8)]

    def ask(question: str) -> ollama.ChatResponse:
        return client.chat("hy", messages=[{"role": "system", "content": system},
                                           {"role": "user", "content": question}], options=GREEDY)

    with ThreadPoolExecutor(8) as pool:  # all at once: the first computes the prompt, the others wait for it
        answers = list(pool.map(ask, questions))
    sequential = ask("And one more city, please.")  # after them: from the snapshot they left
    wants = [fresh_chat(fresh, [{"role": "system", "content": system}, {"role": "user", "content": q}])
             for q in questions + ["And one more city, please."]]
    assert [a.message.content for a in answers + [sequential]] == [w.message.content for w in wants]
    shared = min(w.prompt_eval_count for w in wants) - 20  # the system prompt's tokens, less the user turn's
    computed = [a.prompt_eval_count for a in answers + [sequential]]
    total = [w.prompt_eval_count for w in wants]
    # one conversation computed the system prompt; the others only what follows its last block boundary
    assert sum(computed) - max(computed) <= sum(t - shared // BS * BS + BS for t in total[1:]), (computed, total)
    assert max(computed) >= shared


def test_a_new_conversation_computes_only_what_follows_the_system_prompt_another_sent(warm: Daemon, fresh) -> None:
    head = (f"<|im_start|>system\nTail: {SYSTEM}<|im_end|>\n<|im_start|>user\n")
    first = head + ("Tell me, in as few words as you can, which of the old cities of Europe stands on the widest "
                    "river, and which bridge there is the oldest one still standing.<|im_end|>\n<|im_start|>assistant\n")
    second = head + "Name a river.<|im_end|>\n<|im_start|>assistant\n"
    client = ollama.Client(host=warm.url, timeout=300)
    client.generate("hy", first, raw=True, options=GREEDY)
    got = client.generate("hy", second, raw=True, options=GREEDY)
    want = fresh_generate(fresh, second)
    assert got.response == want.response
    shared = fresh_generate(fresh, head, num_predict=1).prompt_eval_count  # the tokens the prompts share
    # resumed from a snapshot the first prompt left a block or two before the point where the two part
    assert want.prompt_eval_count - got.prompt_eval_count >= shared - 2 * BS, (got.prompt_eval_count, shared)


def test_n_choices_fork_from_the_snapshot_of_their_shared_prompt(warm: Daemon, fresh) -> None:
    client = openai.OpenAI(base_url=f"{warm.url}/v1", api_key="unused", timeout=300)
    messages = [{"role": "system", "content": "Forks: " + SYSTEM}, {"role": "user", "content": "Name a bridge."}]
    got = client.chat.completions.create(model="hy", messages=messages, temperature=0, max_tokens=8, n=3)
    want = fresh_chat(fresh, messages)
    assert [c.message.content for c in got.choices] == [want.message.content] * 3
    # the first choice computed the prompt; the others resumed from its snapshot before the last token
    assert got.usage.prompt_tokens_details.cached_tokens >= got.usage.prompt_tokens - BS - 1, got.usage
    ps = httpx.get(f"{warm.url}/api/ps").json()["models"][0]
    assert ps["kv_blocks"]["snapshots"] > 0, ps


@pytest.mark.slow  # three daemon starts
def test_a_restarted_daemon_answers_from_the_snapshots_on_disk_and_drops_damaged_ones(model: Path, fresh,
                                                                                     tmp_path: Path) -> None:
    prompt = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nName a river.<|im_end|>\n"
              "<|im_start|>assistant\n")
    body = {"model": "hy", "prompt": prompt, "raw": True, "stream": False, "options": GREEDY}
    want = fresh_generate(fresh, prompt)
    snapshots = lambda: sorted((tmp_path / "state" / "kv-cache").glob(f"*/*/*{STATE_SUFFIX}"))  # noqa: E731
    with native_daemon(tmp_path, model, "hy") as daemon:
        cold = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        assert cold["prompt_eval_count"] == want.prompt_eval_count and cold["response"] == want.response
        daemon.stop()  # the runner writes its blocks and snapshots
        assert snapshots()
        daemon.start()
        warm = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        assert warm["response"] == want.response
        assert warm["prompt_eval_count"] <= BS, warm  # resumed from the snapshot before the prompt's last token
        daemon.stop()

        for path in snapshots():  # one cut short, the others with a flipped byte: none is usable
            data = bytearray(path.read_bytes())
            if path == snapshots()[0]:
                del data[len(data) // 2 :]
            else:
                data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        daemon.start()
        again = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300).json()
        assert again["response"] == want.response
        assert again["prompt_eval_count"] == want.prompt_eval_count  # no snapshot to resume from: all again
        assert "dropping unusable state snapshot file" in daemon.log_path.read_text()
        daemon.stop()
        assert snapshots()  # written again when the runner stopped


def test_speculation_cuts_drafts_back_to_the_accepted_tokens_exactly(warm: Daemon, fresh) -> None:
    prompt = "The cat sat on the mat. " * 10
    options = {"temperature": 0, "num_predict": 150}
    plain = fresh_generate(fresh, prompt, **options)
    body = {"model": "hy", "prompt": prompt, "raw": True, "stream": False, "options": {**options, "speculative": "on"}}
    drafted = httpx.post(f"{warm.url}/api/generate", json=body, timeout=300).json()
    assert drafted["response"] == plain.response
    assert drafted["draft_count"] > drafted["draft_accepted_count"], drafted  # drafts were cut back
    body["options"]["draft"] = "hy"  # a draft model is cut back to where it agrees: it cannot keep a state
    refused = httpx.post(f"{warm.url}/api/generate", json=body, timeout=300)
    assert refused.status_code == 400 and "recurrent state" in refused.text, refused.text
