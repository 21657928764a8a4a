"""Exact speculative decoding on the native engine: drafts change how fast, never what.

Every check compares speculation against plain decoding (``speculative:
off``) token for token and log-probability for log-probability, greedy and
seeded, on SmolLM2 (Q4_1), Gemma 3 (Q4_K_M) and a tiny qwen3moe (experts), one request at a time and
several at once, with prompt-lookup drafts, the model as its own draft and
a smaller model written here that shares SmolLM2's vocabulary.
"""

from __future__ import annotations

import json
from array import array
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.gguf_builders import fewer_layers, tiny_model
from localllm.runner.speculation import (MAX_DRAFT, PAUSE_TOKENS, ROW_COST_PRIOR, WARMUP_GUESSES, NgramIndex,
                                          Speculation, StepCosts)
from support.runner import chat_prompt, complete, running_runner, runner_threads

PARAGRAPH = (
    "The old lighthouse stood on the northern cliff for two hundred years. Its keeper, a quiet man named "
    "Tomas, climbed the spiral stairs every evening to light the lamp, and every morning he wrote the weather "
    "in a thick leather book. Ships passing in the night trusted the beam, and fishermen's wives watched it "
    "from the village below."
)
# grounded prompts: the answer repeats much of the prompt, so prompt lookup finds drafts that hold
PROMPTS = {
    "smollm2": chat_prompt(f"Rewrite this paragraph, keeping every sentence but changing the name Tomas to Peter:\n\n{PARAGRAPH}"),
    "gemma3": f"Text: {PARAGRAPH}\nThe same text again: {PARAGRAPH}\nThe same text once more:",
    "qwen3moe": chat_prompt(f"Repeat this paragraph:\n\n{PARAGRAPH}"),  # a tiny random model: what it says is noise
}
GREEDY = {"temperature": 0}
SEEDED = {"temperature": 0.8, "seed": 7}


def generate(client: httpx.Client, prompt: str, n: int = 40, **options: Any) -> tuple[list[dict], dict]:
    """The tokens' log-probability entries (ids, logprobs, top alternatives) and the final object (with the text)."""
    body = {"prompt": prompt, "options": {"num_predict": n, "logprobs": True, "top_logprobs": 2, **options}}
    tokens, pieces, final = [], [], {}
    with client.stream("POST", "/completion", json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.strip():
                item = json.loads(line)
                tokens.extend(item.get("logprobs", []))
                pieces.append(item.get("content", ""))
                final = item
    assert final.get("done"), final
    return tokens, {**final, "content": "".join(pieces)}


def test_prompt_lookup_continues_the_latest_longest_match() -> None:
    index = NgramIndex()
    index.extend([1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3])
    assert index.draft(3) == [5, 6, 7]  # "1 2 3" last came before 5 (earlier, before 4)
    index = NgramIndex()
    index.extend([8, 1, 2, 3, 4, 1, 2, 3, 5, 8, 1, 2, 3])
    assert index.draft(3) == [4, 1, 2]  # "8 1 2 3" came only before 4: the longer match wins over "1 2 3"
    index.extend([4])
    assert index.draft(2) == [1, 2]
    index.extend([9, 2, 3])
    assert index.draft(4) == []  # "9 2 3" never occurred; "2 3" did, but two tokens are too short a match
    assert index.draft(0) == []


def test_prompt_lookup_matches_whole_tokens_only() -> None:
    """The tokens are searched as packed 32-bit integers: bytes that spell the suffix across token
    boundaries are no occurrence of it, and an aligned occurrence before them still is."""
    suffix = [0x11223344, 0x55667788, 0x0A0B0C0D]
    packed = array("i", suffix).tobytes()
    straddling = list(array("i", b"\x01" + packed + b"\x02\x03\x04"))  # the suffix's bytes, one byte off
    index = NgramIndex()
    index.extend(straddling + suffix)
    assert index.draft(4) == []
    index = NgramIndex()
    index.extend(suffix + [7, 8] + straddling + suffix)
    assert index.draft(2) == [7, 8]


def test_draft_length_adapts_and_auto_pauses_on_low_acceptance() -> None:
    spec = Speculation("auto")
    assert spec.wants(0, 1) and not spec.wants(0, 8)  # many streams decoding: auto stays off
    assert spec.length == 3
    spec.record(3, 3, 10)
    assert spec.length == 7 and spec.limit(3) == 3  # grown (with the pending token, 8 rows); cut to the room left
    for _ in range(6):
        spec.record(7, 7, 20)
    assert spec.length == MAX_DRAFT == 15
    spec.record(15, 2, 40)
    assert spec.length == 3
    for _ in range(5):
        spec.record(3, 0, 50)
    assert not spec.wants(50, 1) and spec.wants(50 + PAUSE_TOKENS, 1)
    forced = Speculation("on")
    for _ in range(5):
        forced.record(3, 0, 50)
    assert forced.wants(50, 8)
    assert (spec.drafted, spec.accepted) == (3 + 42 + 15 + 15, 3 + 42 + 2)


def test_a_guess_is_one_token_from_a_short_match_made_while_guesses_pay() -> None:
    spec = Speculation("auto")
    spec.index.extend([5, 6, 1, 2, 9, 3, 8, 1, 2])
    assert spec.draft(3, 0, 0.05) == [9] and spec.guessing  # "1 2" is too short a match for a draft, not a guess
    spec.record(1, 1, 1)
    assert spec.length == 3 and (spec.drafted, spec.accepted) == (1, 1)  # a guess leaves the draft length alone
    spec.index.extend([9, 3, 8])
    assert spec.draft(3, 0, 0.05) == [1, 2, 9] and not spec.guessing  # "9 3 8" matches: a draft again
    spec.record(3, 3, 4)
    spec.index.extend([8])  # "3 8 8", "8 8": no match; "8" alone: a guess

    def miss_until_paused(n_generated: int) -> int:
        misses = 0
        while spec.draft(3, n_generated, 0.05) == [8]:  # the guess, missed every time
            assert spec.guessing
            spec.record(1, 0, n_generated)
            misses += 1
        return misses

    assert miss_until_paused(4) >= WARMUP_GUESSES  # paused once guesses stopped paying
    assert spec.draft(3, 4 + PAUSE_TOKENS - 1, 0.05) == [] and spec.draft(3, 4 + PAUSE_TOKENS, 0.05) == [8]
    assert miss_until_paused(4 + PAUSE_TOKENS) > 0
    assert spec.draft(3, 4 + 3 * PAUSE_TOKENS - 1, 0.05) == []  # a second pause in a row lasts twice as long
    assert spec.draft(3, 4 + 3 * PAUSE_TOKENS, 0.05) == [8]

    cheap = Speculation("auto")
    cheap.index.extend([4, 7, 4])
    for i in range(12):  # guesses that hold one time in three pay where a second row costs a step 10%...
        assert cheap.draft(1, 0, 0.1) == [7]
        cheap.record(1, int(i % 3 == 0), 0)
    assert cheap.draft(1, 0, 0.3) == []  # ... and not where it costs 30% (kept twice as often as it costs: noise)
    forced = Speculation("on")
    forced.index.extend([4, 7, 4])
    for _ in range(12):
        assert forced.draft(1, 0, 0.9) == [7]
        forced.record(1, 0, 0)


def test_step_costs_price_a_second_row() -> None:
    costs = StepCosts()
    assert costs.extra_row() == ROW_COST_PRIOR
    costs.observe(1, 0.010)
    costs.observe(5, 0.030)
    assert costs.extra_row() == ROW_COST_PRIOR  # no two-row step timed yet
    costs.observe(2, 0.011)
    assert costs.extra_row() == pytest.approx(0.1)
    costs.observe(2, 0.009)  # a faster one (noise) moves the average, and the price is never below nothing
    costs.observe(2, 0.005)
    assert 0 <= costs.extra_row() < 0.1


@pytest.fixture(scope="module", params=["smollm2", "gemma3", "qwen3moe"])
def runner(request: pytest.FixtureRequest):
    path = request.getfixturevalue(f"{request.param}_path")
    with running_runner(path, "--engine", "native", "--ctx", "512", "--parallel", "4",
                        "--threads", runner_threads()) as r:
        r.model = request.param
        with r.client(timeout=600) as client:
            r.http = client
            yield r


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_drafted_tokens_are_plain_decodings_alone_and_batched(runner, sampling: dict) -> None:
    prompt = PROMPTS[runner.model]
    plain, plain_final = generate(runner.http, prompt, speculative="off", **sampling)
    alone, final = generate(runner.http, prompt, speculative="on", **sampling)
    assert [t["id"] for t in alone] == [t["id"] for t in plain]
    assert alone == plain  # logprobs and top alternatives too, bit for bit
    assert final["content"] == plain_final["content"] and final["eval_count"] == plain_final["eval_count"]
    assert "draft_count" not in plain_final
    assert 0 < final["draft_accepted_count"] <= final["draft_count"]

    other = chat_prompt("Name three colours.") if runner.model == "smollm2" else "One, two, three,"
    with ThreadPoolExecutor(3) as pool:  # continuous batching: drafts verified beside other sequences
        jobs = [pool.submit(generate, runner.http, p, speculative="on", **sampling) for p in (prompt, other, prompt)]
        batched = [job.result() for job in jobs]
    assert batched[0][0] == plain and batched[2][0] == plain
    other_plain, _ = generate(runner.http, other, speculative="off", **sampling)
    assert batched[1][0] == other_plain


def test_a_draft_stops_at_num_predict_and_at_the_context_end(smollm2_path: Path) -> None:
    """Drafts are cut to what the request may still generate and to the context left (here it shifts)."""
    prompt = chat_prompt("Repeat exactly: " + ", ".join(["the cat sat on the mat"] * 4) + ".")
    with running_runner(smollm2_path, "--engine", "native", "--ctx", "64", "--parallel", "2",
                        "--threads", runner_threads()) as r, r.client(timeout=600) as client:
        n_prompt = len(client.post("/tokenize", json={"content": prompt, "prompt": True}).json()["tokens"])
        assert n_prompt < 48
        for n in (3, 64 - n_prompt + 12):  # within num_predict; past the context end (a shift)
            plain, plain_final = generate(client, prompt, n, speculative="off", **GREEDY)
            drafted, final = generate(client, prompt, n, speculative="on", **GREEDY)
            assert drafted == plain and final["content"] == plain_final["content"]
            assert final["eval_count"] == plain_final["eval_count"] <= n
        assert final["draft_accepted_count"] > 0
        assert "context shift" in r.stderr


@pytest.fixture(scope="module")
def smollm2_runner(smollm2_path: Path):
    with running_runner(smollm2_path, "--engine", "native", "--ctx", "512", "--parallel", "4",
                        "--threads", runner_threads()) as r, r.client(timeout=600) as client:
        r.http = client
        yield r


def test_the_model_as_its_own_draft(smollm2_runner, smollm2_path: Path) -> None:
    """Greedy without penalties, a model drafts exactly what it then samples: nearly every draft token is kept."""
    prompt = chat_prompt("Write a short story about a cat who learns to sail.")
    options = {**GREEDY, "repeat_penalty": 1.0}
    plain, _ = generate(smollm2_runner.http, prompt, speculative="off", **options)
    drafted, final = generate(smollm2_runner.http, prompt, draft=str(smollm2_path), **options)
    assert drafted == plain
    assert final["draft_count"] >= 10 and final["draft_accepted_count"] >= 0.9 * final["draft_count"]


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_a_smaller_draft_model_with_the_same_vocabulary(smollm2_runner, smollm2_path: Path, tmp_path: Path,
                                                        sampling: dict) -> None:
    draft = fewer_layers(smollm2_path, tmp_path / "draft.gguf", layers=4)
    prompt = PROMPTS["smollm2"]
    plain, _ = generate(smollm2_runner.http, prompt, speculative="off", **sampling)
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(generate, smollm2_runner.http, prompt, draft=str(draft), speculative="on", **sampling)
                for _ in range(2)]
        results = [job.result() for job in jobs]
    for drafted, final in results:
        assert drafted == plain
        assert final["draft_count"] > 0


def test_unfit_draft_models_and_modes_are_refused(smollm2_runner, smollm2_path: Path, tmp_path: Path) -> None:
    other_vocab = tiny_model(tmp_path / "tiny.gguf")
    larger_ctx = fewer_layers(smollm2_path, tmp_path / "long.gguf", layers=2, context_length=16384)
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF but not really")
    cases = [
        ({"draft": str(other_vocab)}, "vocabulary has 32 tokens"),
        ({"draft": str(larger_ctx)}, "context (16384) is larger than the model's (8192)"),
        ({"draft": str(garbage)}, "cannot be loaded"),
        ({"draft": str(tmp_path / "absent.gguf")}, "does not exist"),
        ({"speculative": "sometimes"}, "option 'speculative' must be one of auto, on, off, got 'sometimes'"),
        ({"speculative": 1}, "option 'speculative' must be a string"),
    ]
    for options, message in cases:
        r = smollm2_runner.http.post("/completion", json={"prompt": "Hi", "options": options})
        assert r.status_code == 400 and message in r.json()["error"], (options, r.text)
        if "draft" in options:
            assert "option 'draft'" in r.json()["error"]
    _, final = complete(smollm2_runner.http, "Hi", temperature=0, num_predict=2)  # still serving
    assert final["done"]


def test_llama_cpp_refuses_to_speculate_but_auto_runs(smollm2_path: Path) -> None:
    with running_runner(smollm2_path, "--ctx", "256", "--parallel", "1", "--threads", runner_threads()) as r:
        with r.client(timeout=600) as client:
            for options in ({"speculative": "on"}, {"draft": str(smollm2_path)}):
                answer = client.post("/completion", json={"prompt": "Hi", "options": options})
                assert answer.status_code == 400 and "needs the native engine" in answer.json()["error"]
            _, final = complete(client, "Hi", temperature=0, num_predict=2, speculative="auto")
            assert final["done"] and "draft_count" not in final


def test_draft_parameter_and_counts_through_the_daemon(daemon, smollm2_path: Path, tmp_path: Path) -> None:
    """``PARAMETER draft`` names a stored model; /api/chat's final object and /metrics count the drafts."""
    import ollama

    draft = fewer_layers(smollm2_path, tmp_path / "draft.gguf", layers=4)
    daemon.create("spec-draft", f"FROM {draft}\nPARAMETER engine native\n")
    daemon.create("spec-smollm2", f"FROM {smollm2_path}\nPARAMETER engine native\nPARAMETER draft spec-draft\n")
    messages = [{"role": "user", "content": f"Rewrite this paragraph, keeping every sentence but changing the name Tomas to Peter:\n\n{PARAGRAPH}"}]

    def chat(**options: Any) -> dict:
        body = {"model": "spec-smollm2", "messages": messages, "stream": False,
                "options": {"temperature": 0, "num_predict": 30, **options}}
        r = httpx.post(f"{daemon.url}/api/chat", json=body, timeout=600)
        assert r.status_code == 200, r.text
        return r.json()

    plain, final = chat(speculative="off"), chat()
    assert final["message"]["content"] == plain["message"]["content"]
    assert "draft_count" not in plain
    assert final["draft_count"] > 0 and 0 <= final["draft_accepted_count"] <= final["draft_count"]
    metrics = httpx.get(f"{daemon.url}/metrics", timeout=30).text
    drafted = next(line for line in metrics.splitlines() if line.startswith('localllm_draft_tokens_total{model="spec-smollm2'))
    assert int(drafted.rsplit(" ", 1)[1]) >= final["draft_count"]
    assert "localllm_draft_accepted_tokens_total" in metrics

    client = ollama.Client(host=daemon.url, timeout=600)
    for options, message in (({"draft": "no-such-model"}, "option 'draft'"),
                             ({"speculative": "turbo"}, "option 'speculative' must be one of auto, on, off")):
        with pytest.raises(ollama.ResponseError) as err:
            client.chat("spec-smollm2", messages, options=options)
        assert err.value.status_code == 400 and message in err.value.error
