"""Models as Ollama's library ships them, chatting in their family's format end to end: a tiny gpt-oss in
Ollama's layout (architecture ``gptoss``) speaking Harmony, and a tiny Qwen 3.5 hybrid in Ollama's layout
calling tools in Qwen's XML, each translated for llama.cpp at load and forced by a grammar to write its
family's thinking, answer and tool call. The ``ollama`` and ``openai`` clients must get thinking apart from
the answer and structured calls, never the raw text."""

from __future__ import annotations

import json

import ollama
import openai
import pytest
from support import arch_models
from support.chat_formats import BY_NAME, PARIS, TOOLS, grammar, modelfile

MODELS = {"oss-harmony": "harmony", "qwen35-xml": "qwen3.5"}
#: The formats' markers as tokens of their own, as in the real vocabularies, so a forced reply is short
MARKERS = ["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>", "<|constrain|>", "analysis", "final",
           "assistant", "commentary", " to=functions.", "get_weather", "<tool_call>", "</tool_call>", "<function=",
           "</function>", "<parameter=", "</parameter>", "</think>", "Paris", "Plan it.", "Hello there."]


@pytest.fixture(scope="module")
def url(daemon, tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("families")
    vocabulary = arch_models.byte_vocabulary(directory / "vocabulary.gguf", MARKERS)
    files = {"oss-harmony": arch_models.gpt_oss(directory / "oss.gguf", vocabulary, "ollama", context=2048),
             "qwen35-xml": arch_models.qwen_hybrid(directory / "qwen35.gguf", vocabulary, "qwen35", "ollama",
                                                   context=2048)}
    for name, family in MODELS.items():
        daemon.create(name, modelfile(BY_NAME[family], base=str(files[name])))
    return daemon.url


@pytest.mark.parametrize("model", MODELS)
def test_thinking_and_answer_reach_both_clients_apart(url, model):
    family = BY_NAME[MODELS[model]]
    options = {"num_predict": 200, "grammar": grammar(family.think_answer)}
    said = ollama.Client(host=url).chat(model=model, messages=[{"role": "user", "content": "Say hi."}], think=True,
                                        options=options)
    assert (said.message.thinking, said.message.content) == ("Plan it.", "Hello there.")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi."}],
                                            max_tokens=200, reasoning_effort="medium",
                                            extra_body={"grammar": grammar(family.think_answer)})
    message = answer.choices[0].message
    assert (message.model_extra["reasoning_content"], message.content) == ("Plan it.", "Hello there.")


@pytest.mark.parametrize("model", MODELS)
def test_a_tool_call_reaches_both_clients_as_a_call(url, model):
    family = BY_NAME[MODELS[model]]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    said = ollama.Client(host=url).chat(model=model, messages=ask, tools=TOOLS, think=True,
                                        options={"num_predict": 200, "grammar": grammar(family.one_call)})
    assert [(c.function.name, dict(c.function.arguments)) for c in said.message.tool_calls or []] == [PARIS]
    assert (said.message.thinking, said.message.content) == ("Plan it.", "")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(model=model, messages=ask, tools=TOOLS, stream=True, max_tokens=200,
                                                 reasoning_effort="medium",
                                                 extra_body={"grammar": grammar(family.one_call)}))
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [PARIS] and calls[0].id
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_a_second_chat_with_a_hybrid_model_answers(url):
    """The runner reuses a recurrent model's state only from a saved one (a 500 before: its state was cut back)."""
    client = ollama.Client(host=url)
    for question in ("Say hi.", "Say bye."):
        answer = client.chat(model="qwen35-xml", messages=[{"role": "user", "content": question}],
                             options={"num_predict": 4})
        assert answer.done_reason == "length"
