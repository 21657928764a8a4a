"""The runner process end to end: a real SmolLM2 runner on a unix socket, driven over HTTP."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localllm.server.tool_grammar import ToolUse
from localllm.templates.families import FORMATS

from support.runner import RunnerProcess, chat_prompt, complete, parse_stream, running_runner, runner_threads

PARALLEL = 4
GREEDY = {"temperature": 0}
PROMPTS = [
    chat_prompt("Why is the sky blue?"),
    chat_prompt("Write a short poem about cats."),
    chat_prompt("List three colors."),
    chat_prompt("What is 2+2?"),
    chat_prompt("Name a famous scientist."),
    chat_prompt("Give me a tip for learning Python."),
]


@pytest.fixture(scope="module")
def runner(smollm2_path: Path) -> Iterator[RunnerProcess]:
    with running_runner(
        smollm2_path, "--ctx", "1024", "--parallel", str(PARALLEL), "--threads", runner_threads()
    ) as r:
        yield r


@pytest.fixture(scope="module")
def small_runner(smollm2_path: Path) -> Iterator[RunnerProcess]:
    """A runner whose context (128 tokens) is easy to exceed, and that prefills in chunks of 16."""
    args = ("--ctx", "128", "--parallel", "2", "--batch", "16", "--threads", runner_threads())
    with running_runner(smollm2_path, *args) as r:
        yield r


@pytest.fixture
def client(runner: RunnerProcess) -> Iterator[httpx.Client]:
    with runner.client() as c:
        yield c


def wait_idle(client: httpx.Client, timeout: float = 60.0) -> dict:
    """/health once no sequence runs: every KV cell in use is an idle prefix-cache entry."""
    deadline = time.monotonic() + timeout
    while True:
        health = client.get("/health").json()
        if health["kv_used_cells"] == health["cache_tokens"] or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def test_health_describes_the_model(client: httpx.Client) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok"
    assert health["n_ctx"] == 1024 and health["n_parallel"] == PARALLEL
    assert health["n_ctx_train"] == 8192 and health["n_vocab"] == 49152
    assert health["bos"] == "<|im_start|>" and health["eos"] == "<|im_end|>"
    assert health["model_size"] > 50_000_000
    assert health["kv_used_cells"] == 0


def test_tokenize_detokenize_round_trip(client: httpx.Client) -> None:
    text = "Hello, world! Ünïcödé and emoji 🚀 too."
    tokens = client.post("/tokenize", json={"content": text}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert client.post("/detokenize", json={"tokens": tokens}).json()["content"] == text
    special = client.post("/tokenize", json={"content": "<|im_start|>user"}).json()["tokens"]
    literal = client.post("/tokenize", json={"content": "<|im_start|>user", "parse_special": False}).json()["tokens"]
    assert special[0] == 1 and len(literal) > len(special)


def test_greedy_completion_is_deterministic(client: httpx.Client) -> None:
    first, done = complete(client, PROMPTS[0], num_predict=24, **GREEDY)
    second, _ = complete(client, PROMPTS[0], num_predict=24, **GREEDY)
    assert "".join(first) == "".join(second) and "".join(first).strip()
    assert done["done"] is True and done["prompt_eval_count"] > 0
    assert done["context"][: done["prompt_eval_count"]] == client.post(
        "/tokenize", json={"content": PROMPTS[0]}
    ).json()["tokens"]


def test_same_seed_same_text_other_seed_differs(client: httpx.Client) -> None:
    opts = {"temperature": 1.0, "top_k": 100, "top_p": 1.0, "num_predict": 24}
    a, _ = complete(client, PROMPTS[1], seed=42, **opts)
    b, _ = complete(client, PROMPTS[1], seed=42, **opts)
    assert "".join(a) == "".join(b)
    others = {"".join(complete(client, PROMPTS[1], seed=s, **opts)[0]) for s in (1, 2, 3)}
    assert len(others | {"".join(a)}) > 1


def test_every_sampler_option_is_accepted(client: httpx.Client) -> None:
    variants = [
        {"mirostat": 1, "seed": 3},
        {"mirostat": 2, "seed": 3},
        {"typical_p": 0.8, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": 0.5, "seed": 3},
        {"repeat_last_n": -1, "repeat_penalty": 1.3, "seed": 3},
    ]
    for options in variants:
        pieces, done = complete(client, PROMPTS[2], num_predict=8, **options)
        assert done["done"] is True and done["eval_count"] > 0, options


def test_stop_string_is_honoured_and_never_leaks(client: httpx.Client) -> None:
    prompt = chat_prompt("List three fruits as a numbered list.")
    full = "".join(complete(client, prompt, num_predict=80, **GREEDY)[0])
    assert "3." in full, full
    pieces, done = complete(client, prompt, num_predict=80, stop=["3."], **GREEDY)
    text = "".join(pieces)
    assert done["done_reason"] == "stop"
    assert text == full[: full.index("3.")]
    assert not any("3." in p for p in pieces)
    assert not text.endswith("3")  # the held-back start of the stop string was not sent


def test_stream_never_splits_utf8_characters(client: httpx.Client) -> None:
    prompt = chat_prompt("Write the French word café, the German word Straße and three emoji about coffee.")
    # the grammar forces non-ASCII output (emoji are several byte-level tokens each) and an end
    grammar = 'root ::= "café " emoji " Straße " emoji emoji\nemoji ::= "☕" | "🚀" | "😊"'
    pieces, done = complete(client, prompt, grammar=grammar, num_predict=60, **GREEDY)
    assert done["done_reason"] == "stop"
    text = "".join(pieces)
    assert any(ord(ch) > 0xFFFF for ch in text), text
    assert all("\ufffd" not in p for p in pieces)
    generated = done["context"][done["prompt_eval_count"] :]
    assert len(generated) == done["eval_count"]
    assert client.post("/detokenize", json={"tokens": generated}).json()["content"] == text
    alone = [client.post("/detokenize", json={"tokens": [t]}).json()["content"] for t in generated]
    assert any("\ufffd" in a for a in alone), "no token ended inside a character: the test proves nothing"


def test_num_predict_ends_with_length(client: httpx.Client) -> None:
    _, done = complete(client, PROMPTS[0], num_predict=7, **GREEDY)
    assert done["done_reason"] == "length" and done["eval_count"] == 7
    assert done["eval_duration"] > 0 and done["prompt_eval_duration"] > 0


def test_stream_false_returns_one_object(client: httpx.Client) -> None:
    r = client.post("/completion", json={"prompt": PROMPTS[3], "options": {**GREEDY, "num_predict": 10}, "stream": False})
    body = r.json()
    streamed = "".join(complete(client, PROMPTS[3], num_predict=10, **GREEDY)[0])
    assert r.status_code == 200 and body["done"] is True and body["content"] == streamed


def test_prompt_as_token_ids(client: httpx.Client) -> None:
    tokens = client.post("/tokenize", json={"content": PROMPTS[3]}).json()["tokens"]
    by_ids = complete(client, tokens, num_predict=12, **GREEDY)[0]
    by_text = complete(client, PROMPTS[3], num_predict=12, **GREEDY)[0]
    assert by_ids == by_text


def test_context_goes_before_the_prompt(client: httpx.Client) -> None:
    _, first = complete(client, PROMPTS[3], num_predict=8, **GREEDY)
    follow_up = chat_prompt("And 3+3?")
    _, second = complete(client, follow_up, context=first["context"], num_predict=8, **GREEDY)
    added = client.post("/tokenize", json={"content": follow_up, "add_special": False}).json()["tokens"]
    assert second["context"][: len(first["context"]) + len(added)] == first["context"] + added
    # the first exchange is still cached: at least all of it but its last token (never decoded) is reused
    assert second["cached_tokens"] >= len(first["context"]) - 1
    assert second["prompt_eval_count"] + second["cached_tokens"] == len(first["context"]) + len(added)


def test_gemma3_k_quants_and_no_doubled_bos(gemma3_path: Path) -> None:
    with running_runner(gemma3_path, "--ctx", "256", "--parallel", "1", "--threads", runner_threads()) as r, r.client() as c:
        health = c.get("/health").json()
        assert health["bos"] == "<bos>"
        bos = c.post("/tokenize", json={"content": "<bos>", "add_special": False}).json()["tokens"][0]
        pieces, done = complete(c, "<bos>The capital of France is", num_predict=6, **GREEDY)
        # count_tokens' tokenization: the very tokens /completion evaluated
        as_prompt = c.post("/tokenize", json={"content": "<bos>The capital of France is", "prompt": True}).json()
    assert done["context"][0] == bos and done["context"][1] != bos
    assert as_prompt["tokens"] == done["context"][:done["prompt_eval_count"]]
    assert done["eval_count"] == 6 and "".join(pieces).strip()


async def _complete_async(client: httpx.AsyncClient, prompt: str, n: int) -> tuple[str, dict]:
    body = {"prompt": prompt, "options": {**GREEDY, "num_predict": n}}
    async with client.stream("POST", "/completion", json=body) as r:
        assert r.status_code == 200
        pieces, done = parse_stream([line async for line in r.aiter_lines()])
    return "".join(pieces), done


def test_batched_requests_all_complete(runner: RunnerProcess, client: httpx.Client) -> None:
    """More requests than slots all finish. (Their text may differ from a solo run's on llama.cpp,
    whose kernels round differently per batch shape on some CPUs; that the text does not is the
    native engine's promise, tested in test_paged_kv.py.)"""
    n = 40

    async def together() -> list[tuple[str, dict]]:
        async with runner.async_client() as ac:
            # twice the prompts: more requests than slots, so some wait and join mid-flight
            return await asyncio.gather(*(_complete_async(ac, p, n) for p in PROMPTS + PROMPTS))

    batched = asyncio.run(together())
    assert len(batched) == 2 * len(PROMPTS) and all(done["done"] and text for text, done in batched)
    health = wait_idle(client)
    assert health["kv_used_cells"] == health["cache_tokens"]


def test_client_disconnect_frees_the_slot(runner: RunnerProcess, client: httpx.Client) -> None:
    body = {"prompt": PROMPTS[1], "options": {**GREEDY, "num_predict": 2000, "stop": ["\u0000never"]}}
    for _ in range(PARALLEL):  # fill every slot, then hang up after the first piece
        with runner.client() as c, c.stream("POST", "/completion", json=body) as r:
            next(r.iter_lines())
    health = wait_idle(client)
    assert health["kv_used_cells"] == health["cache_tokens"]

    async def after() -> list[tuple[str, dict]]:
        async with runner.async_client(timeout=60) as ac:
            return await asyncio.gather(*(_complete_async(ac, p, 6) for p in PROMPTS[: PARALLEL + 2]))

    results = asyncio.run(after())
    assert all(done.get("done") and done["eval_count"] == 6 for _, done in results)


def test_chunked_prefill_gives_the_same_tokens(client: httpx.Client, small_runner: RunnerProcess) -> None:
    prompt = chat_prompt(
        "My cat purrs when I stroke her, when she eats, and sometimes when she is alone in the sun. "
        "Explain in one sentence why cats purr, please, and keep it short."
    )
    whole = complete(client, prompt, num_predict=24, **GREEDY)
    with small_runner.client() as c:
        assert len(c.post("/tokenize", json={"content": prompt}).json()["tokens"]) > 2 * 16
        chunked = complete(c, prompt, num_predict=24, **GREEDY)
    assert chunked[0] == whole[0]
    assert chunked[1]["context"] == whole[1]["context"]


def test_prompt_longer_than_context_is_truncated(small_runner: RunnerProcess) -> None:
    long_text = " ".join(f"item{i}" for i in range(200))
    prompt = chat_prompt(f"Here is a list: {long_text}. What was the last item?")
    with small_runner.client() as c:
        n_prompt = len(c.post("/tokenize", json={"content": prompt}).json()["tokens"])
        assert n_prompt > 128
        pieces, done = complete(c, prompt, num_predict=10, **GREEDY)
    assert done["done"] is True and done["eval_count"] > 0
    assert done["prompt_eval_count"] <= 128
    assert "truncating input prompt" in small_runner.stderr


def test_generation_past_the_context_shifts(small_runner: RunnerProcess) -> None:
    prompt = chat_prompt("Count from 1 to 100, separated by commas.")
    grammar = 'root ::= [0-9]+ ", " root'  # never complete: the model cannot end it
    with small_runner.client() as c:
        pieces, done = complete(c, prompt, grammar=grammar, num_predict=200, num_keep=5, **GREEDY)
        health = wait_idle(c)
        assert health["kv_used_cells"] == health["cache_tokens"]
    assert done["done_reason"] == "length" and done["eval_count"] == 200
    assert done["prompt_eval_count"] + done["eval_count"] > 128
    assert "context shift" in small_runner.stderr


def test_num_predict_minus_two_fills_the_context(small_runner: RunnerProcess) -> None:
    grammar = 'root ::= ("a" | "b" | " ") root'
    with small_runner.client() as c:
        _, done = complete(c, chat_prompt("Say ab."), grammar=grammar, num_predict=-2, **GREEDY)
    assert done["done_reason"] == "length"
    assert done["prompt_eval_count"] + done["eval_count"] == 128


def test_grammar_constrains_output(client: httpx.Client) -> None:
    prompt = chat_prompt("Is the sky blue? Answer yes or no.")
    for options in (GREEDY, {"temperature": 1.5, "seed": 7}):
        pieces, done = complete(client, prompt, grammar='root ::= "yes" | "no"', **options)
        assert "".join(pieces) in ("yes", "no")
        assert done["done_reason"] == "stop"


def test_lazy_grammar_leaves_output_free_until_its_trigger(client: httpx.Client) -> None:
    prompt = chat_prompt("Name three colours.")
    free, _ = complete(client, prompt, num_predict=24, **GREEDY)
    lazy, _ = complete(client, prompt, grammar='root ::= "<tool_call>" [0-9]+', grammar_triggers=["<tool_call>"],
                       num_predict=24, **GREEDY)
    assert "".join(lazy) == "".join(free)  # the trigger never came: nothing was constrained


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("syntax", sorted({f.calls.name: f for f in FORMATS.values() if f.calls}))
def test_lazy_tool_call_grammars_compile(client: httpx.Client, syntax: str, parallel: bool) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    calls = next(f.calls for f in FORMATS.values() if f.calls and f.calls.name == syntax)
    grammar, triggers = ToolUse([tool], calls).lazy_grammar(parallel)
    pieces, done = complete(client, chat_prompt("hi"), grammar=grammar, grammar_triggers=list(triggers),
                            num_predict=4, **GREEDY)
    assert done["eval_count"] >= 1


def test_preserved_control_tokens_are_spelled_out(client: httpx.Client) -> None:
    """A chat format's markers may be control tokens (gpt-oss's ``<|channel|>``), which carry no text
    unless the request names them: SmolLM2's ``<|im_start|>`` stands in for one here."""
    body = {"prompt": chat_prompt("hi"), "options": {**GREEDY, "num_predict": 8}, "grammar": 'root ::= <|im_start|> "ok"'}
    plain = client.post("/completion", json={**body, "stream": False}).json()
    shown = client.post("/completion", json={**body, "stream": False,
                                             "preserved_tokens": ["<|im_start|>", "not one token"]}).json()
    assert (plain["content"], shown["content"]) == ("ok", "<|im_start|>ok")
    refused = client.post("/completion", json={**body, "preserved_tokens": "<|im_start|>"})
    assert refused.status_code == 400 and "preserved_tokens" in refused.json()["error"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"prompt": "hi", "grammar": 'root ::= "yes'}, "grammar"),
        ({"prompt": "hi", "grammar_triggers": ["<tool_call>"]}, "needs a 'grammar'"),
        ({"prompt": "hi", "grammar": 'root ::= "x"', "grammar_triggers": "<tool_call>"}, "grammar_triggers"),
        ({"prompt": "hi", "grammar": 'root ::= "x"', "grammar_triggers": [""]}, "grammar_triggers"),
        ({"prompt": "hi", "grammar": "root ::= bar"}, "Undefined rule identifier 'bar'"),
        ({"prompt": "hi", "grammar": 'foo ::= "x"'}, "'root' symbol"),
        ({"prompt": "hi", "options": {"temperature": "hot"}}, "temperature"),
        ({"prompt": "hi", "options": {"stop": "x", "num_predict": 1.5}}, "num_predict"),
        ({"prompt": "hi", "options": {"mirostat": 3}}, "mirostat"),
        ({"prompt": [1, 2, 999999]}, "999999"),
        ({"prompt": "hi", "context": "not tokens"}, "context"),
        ({"prompt": ""}, "empty"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": "hi", "stream": "yes"}, "stream"),
    ],
)
def test_bad_completion_requests_get_400(client: httpx.Client, body: dict, needle: str) -> None:
    r = client.post("/completion", json=body)
    assert r.status_code == 400
    assert needle in r.json()["error"]


def test_bad_bodies_get_400(client: httpx.Client) -> None:
    r = client.post("/tokenize", content=b"{not json")
    assert r.status_code == 400 and "JSON" in r.json()["error"]
    assert client.post("/tokenize", json={"content": 3}).status_code == 400
    assert client.post("/detokenize", json={"tokens": ["a"]}).status_code == 400
    r = client.post("/embedding", json={"content": ["x"]})
    assert r.status_code == 400 and "--embedding" in r.json()["error"]


def test_embeddings(smollm2_path: Path) -> None:
    with running_runner(smollm2_path, "--embedding", "--ctx", "64", "--threads", runner_threads()) as r, r.client() as c:
        body = c.post("/embedding", json={"content": ["the cat sat", "the cat sat", "quantum physics"]}).json()
        a, b, other = body["embeddings"]
        assert len(a) == 576 and body["prompt_eval_count"] > 0
        assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-4)
        assert a == b and a != other
        long_text = "word " * 200
        assert len(c.post("/embedding", json={"content": [long_text]}).json()["embeddings"]) == 1
        r400 = c.post("/embedding", json={"content": [long_text], "truncate": False})
        assert r400.status_code == 400 and "context length" in r400.json()["error"]
        assert c.post("/completion", json={"prompt": "hi"}).status_code == 400
        refused = c.post("/rerank", json={"query": "cats", "documents": ["the cat sat"]})
        assert refused.status_code == 400 and "cannot rerank" in refused.json()["error"]


def test_bad_model_file_exits_with_a_message(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    runner = RunnerProcess(bogus, "--threads", "1")
    try:
        with pytest.raises(RuntimeError, match="cannot load model"):
            runner.wait_ready(timeout=30)
        assert runner.proc.returncode == 2
    finally:
        runner.cleanup()


def test_sigterm_exits_cleanly(smollm2_path: Path) -> None:
    runner = RunnerProcess(smollm2_path, "--ctx", "256", "--parallel", "1", "--threads", "1")
    try:
        runner.wait_ready()
        assert runner.stop() == 0
        assert not runner.socket.exists()
        assert "stopped" in runner.stderr
    finally:
        runner.cleanup()
