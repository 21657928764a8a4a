"""What happens at the context's edges, through the real daemon, runner and clients, on both engines:
no dialect but Ollama's slides the context (an answer without a token limit ends when the context is
full), long chats leave out their oldest turns instead of losing the front of the prompt, and a client
that leaves ends its generation.

The model is one layer of 64 dimensions under SmolLM2's tokenizer (SmolLM2's tokens, in a fraction of its
time: a grammar writes the endless answers, and what the model weighs plays no part in what is checked) with
``PARAMETER num_ctx 512``, so clients that cannot send options (OpenAI, Anthropic) get the small context too.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from support.daemon import Daemon

MODEL = "tiny-ctx"
N_CTX = 512
ENDLESS = 'root ::= "la " root'  # a grammar that never lets the answer end
GREEDY = {"temperature": 0, "top_k": 1}
#: A question that takes most of the context, so an endless answer fills the rest soon.
LONG_QUESTION = "Read these words, then sing: " + " ".join(f"word{i}" for i in range(110))
SYSTEM = "You are Captain Quill, a pirate librarian of the Seven Seas who answers every question in rhyme."


@pytest.fixture(scope="module")
def tiny_smollm2(tmp_path_factory, smollm2_path) -> Path:
    """One layer of 64 dimensions under SmolLM2's tokenizer."""
    from support.gguf_builders import tiny_model

    return tiny_model(tmp_path_factory.mktemp("ctx-model") / "tiny.gguf", vocab_from=smollm2_path,
                      context_length=2048)


@pytest.fixture(scope="module", params=["native", "llama.cpp"])
def engine_daemon(request, tmp_path_factory, tiny_smollm2):
    """A daemon whose models run on one engine (``request.param``), with :data:`MODEL` created."""
    daemon = Daemon(tmp_path_factory.mktemp(f"ctx-{request.param}"), LOCALLLM_ENGINE=request.param).start()
    try:
        daemon.create(MODEL, f"FROM {tiny_smollm2}\nPARAMETER num_ctx {N_CTX}")
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def native_daemon(engine_daemon):
    """:func:`engine_daemon` on the native engine only: for what does not depend on the engine."""
    if engine_daemon.env["LOCALLLM_ENGINE"] != "native":
        pytest.skip("engine-independent: run on the native engine")
    return engine_daemon


def _post(daemon: Daemon, path: str, body: dict, timeout: float = 300) -> httpx.Response:
    return httpx.post(f"{daemon.url}{path}", json=dict(body, model=MODEL), timeout=timeout)


def _runner_health(daemon: Daemon) -> dict:
    """The generating runner's own /health, read over its socket (named on its command line)."""
    for pid in daemon.runner_pids():
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        if "--embedding" in args:
            continue
        socket_path = args[args.index("--socket") + 1]
        with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), base_url="http://runner") as client:
            return client.get("/health", timeout=10).json()
    raise AssertionError("no generating runner")


def _generating(daemon: Daemon) -> bool:
    """Whether the runner holds a running sequence (native: blocks in use; llama.cpp: cells beyond the cache)."""
    health = _runner_health(daemon)
    blocks = health["kv_blocks"]
    holding = blocks["in_use"] > 0 if blocks else health["kv_used_cells"] > health["cache_tokens"]
    return holding or health["queue_depth"] > 0


def _wait_until(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


# --- no runaway generation ----------------------------------------------------------------


@pytest.mark.slow  # on llama.cpp: its grammar weighs each of SmolLM2's 49,152 tokens at each of ~140 steps
def test_ollama_without_shift_stops_at_the_context_end(engine_daemon):
    answer = _post(engine_daemon, "/api/chat", {
        "messages": [{"role": "user", "content": LONG_QUESTION}], "grammar": ENDLESS, "shift": False,
        "stream": False, "options": GREEDY})
    body = answer.json()
    assert answer.status_code == 200, body
    assert body["done_reason"] == "length" and body["message"]["content"].startswith("la la")
    assert "truncated" not in body  # the question fits whole: only the answer reaches the context's end
    assert N_CTX - 2 <= body["prompt_eval_count"] + body["eval_count"] <= N_CTX + 1


def test_openai_never_shifts(native_daemon):
    client = openai.OpenAI(base_url=f"{native_daemon.url}/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": LONG_QUESTION}],
                                            temperature=0, extra_body={"grammar": ENDLESS}, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    usage = chunks[-1].usage
    assert usage.prompt_tokens > N_CTX // 2
    assert N_CTX - 2 <= usage.prompt_tokens + usage.completion_tokens <= N_CTX + 1


def test_anthropic_never_shifts(native_daemon):
    client = anthropic.Anthropic(base_url=native_daemon.url, api_key="unused", max_retries=0)
    with client.messages.stream(model=MODEL, max_tokens=100_000, messages=[{"role": "user", "content": LONG_QUESTION}],
                                extra_body={"grammar": ENDLESS, "temperature": 0}) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    used = message.usage.input_tokens + message.usage.cache_read_input_tokens + message.usage.output_tokens
    assert N_CTX - 2 <= used <= N_CTX + 1


# --- long chats keep their shape ----------------------------------------------------------


def _long_chat(n: int) -> list[dict]:
    messages = [{"role": "system", "content": SYSTEM}]
    for i in range(1, n):
        if i % 2:
            messages.append({"role": "user", "content": f"Question {i}: what is {i} plus {i}?"})
        else:
            messages.append({"role": "assistant", "content": f"{i - 1} plus {i - 1} is {2 * (i - 1)}."})
    messages[-1] = {"role": "user", "content": "Last question: what is the capital of France?"}
    return messages


def _prompt_tokens(daemon: Daemon, messages: list[dict]) -> int:
    counted = _post(daemon, "/v1/messages/count_tokens", {"system": messages[0]["content"], "messages": messages[1:]})
    assert counted.status_code == 200, counted.text
    return counted.json()["input_tokens"]


def test_a_long_chat_keeps_its_system_prompt_and_last_message(native_daemon):
    messages = _long_chat(200)
    assert _prompt_tokens(native_daemon, messages) > 4 * N_CTX
    options = dict(GREEDY, num_predict=12)
    whole = _post(native_daemon, "/api/chat", {"messages": messages, "stream": False, "options": options}).json()
    assert whole["done_reason"] in ("stop", "length") and "truncated" not in whole
    fitted = _post(native_daemon, "/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0})
    used = fitted.json()["usage"]["prompt_tokens"]
    assert used <= N_CTX - 12 and fitted.headers.get("x-localllm-prompt-truncated") is None
    # The prompt the daemon fitted is the system prompt and the newest whole turns, down to the last question:
    start = next(i for i in range(len(messages) - 1, 0, -2) if _prompt_tokens(native_daemon, [messages[0], *messages[i:]]) >= used)
    kept = [messages[0], *messages[start:]]
    assert _prompt_tokens(native_daemon, kept) == used and messages[start]["role"] == "user" and len(kept) > 3
    alone = _post(native_daemon, "/api/chat", {"messages": kept, "stream": False, "options": options}).json()
    assert alone["message"]["content"] == whole["message"]["content"]


def test_truncate_false_refuses_a_chat_over_the_context_naming_both_lengths(native_daemon):
    messages = _long_chat(200)
    refused = _post(native_daemon, "/api/chat", {"messages": messages, "truncate": False, "stream": False})
    error = refused.json()["error"]
    assert refused.status_code == 400, error
    assert f"{_prompt_tokens(native_daemon, messages)} tokens" in error and f"{N_CTX} tokens" in error
    generate = _post(native_daemon, "/api/generate", {"prompt": "word " * 2000, "truncate": False, "stream": False})
    assert generate.status_code == 400 and f"{N_CTX} tokens" in generate.json()["error"]


def test_one_message_longer_than_the_context_is_cut_and_the_answer_says_so(native_daemon):
    long_message = " ".join(f"w{i}" for i in range(1500)) + " Which word came last?"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": long_message}]
    ollama = _post(native_daemon, "/api/chat", {"messages": messages, "stream": False,
                                                "options": dict(GREEDY, num_predict=4)}).json()
    assert ollama["truncated"] is True and ollama["prompt_eval_count"] <= N_CTX
    fitted = _post(native_daemon, "/v1/chat/completions", {"messages": messages, "max_tokens": 4, "temperature": 0})
    assert fitted.status_code == 200 and fitted.headers["x-localllm-prompt-truncated"] == "true"
    anthropic_body = {"model": MODEL, "max_tokens": 4, "system": SYSTEM, "messages": messages[1:], "stream": True}
    with httpx.stream("POST", f"{native_daemon.url}/v1/messages", json=anthropic_body, timeout=300) as streamed:
        assert streamed.headers["x-localllm-prompt-truncated"] == "true"
        assert "message_stop" in streamed.read().decode()


def test_responses_truncation_is_openais(native_daemon):
    client = openai.OpenAI(base_url=f"{native_daemon.url}/v1", api_key="unused", max_retries=0)
    chat = [{"role": m["role"], "content": m["content"]} for m in _long_chat(200)[1:]]
    with pytest.raises(openai.BadRequestError, match=f"more than the context length of {N_CTX} tokens"):
        client.responses.create(model=MODEL, instructions=SYSTEM, input=chat, max_output_tokens=16)
    fitted = client.responses.create(model=MODEL, instructions=SYSTEM, input=chat, max_output_tokens=16,
                                     truncation="auto", temperature=0)
    assert fitted.truncation == "auto" and fitted.usage.input_tokens <= N_CTX - 16


# --- a client that leaves -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_leaves_ends_its_generation(engine_daemon, stream):
    """Streamed or whole (nothing is written until the end), the client's leaving frees the runner."""
    _post(engine_daemon, "/api/generate", {"prompt": "hi", "stream": False, "options": {"num_predict": 1}})
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Sing."}], "grammar": ENDLESS,
                       "stream": stream, "options": {"num_predict": 100_000}})  # would shift for minutes
    request = (f"POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
    with socket.create_connection(("127.0.0.1", engine_daemon.port), timeout=60) as client:
        client.sendall(request)
        if stream:
            received = b""
            while b'"content": "l' not in received:  # the answer is streaming
                received += client.recv(4096)
        else:
            _wait_until(lambda: _generating(engine_daemon), "the generation never started")
    # the client has left: the connection is closed
    _wait_until(lambda: not _generating(engine_daemon), "the runner kept generating after its client left", 30)
