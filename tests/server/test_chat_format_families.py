"""Every family's chat format end to end: the real daemon, a real model given a template written
in the family's format and a grammar that makes it write the family's thinking and tool calls,
and the real ``ollama``, ``openai`` and ``anthropic`` clients.

Where a grammar writes the whole answer, what the model weighs plays no part: those tests run a
one-layer model with a byte vocabulary (seconds, not SmolLM2's minutes). Where the model chooses
what it writes (a forced ``tool_choice``'s arguments), they run SmolLM2.

What the clients must receive: thinking apart from the answer, tool calls as structured
calls with ids (two of them in order, streamed), a call cut off by the token limit or with
arguments that are not JSON, or to a tool that was not offered, as text and never as a call;
and a forced ``tool_choice`` answered in the family's own syntax.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import ollama
import openai
import pytest
from support.chat_formats import BY_NAME, FAMILIES, OSLO, PARIS, RENDERED, TOOLS, Family, grammar, modelfile

from localllm.server.conversation import Message, template_messages
from localllm.server.tools import ToolCall
from localllm.templates.prompt import build_prompt

THINKERS = [f for f in FAMILIES if f.think_answer]


def model_of(family: Family, smol: bool = False) -> str:
    """The family's model: on the tiny byte-vocabulary model, or on SmolLM2 (``smol``)."""
    return f"fmt-{family.name.replace('.', '')}{'-smol' if smol else ''}"


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> str:
    """A one-layer model of 64 dimensions with a byte vocabulary: a reply held to a grammar takes a moment (its
    token budgets count bytes, hence the larger ones here)."""
    from support.arch_models import byte_vocabulary
    from support.gguf_builders import tiny_model

    directory = tmp_path_factory.mktemp("tiny-base")
    return str(tiny_model(directory / "tiny.gguf", vocab_from=byte_vocabulary(directory / "bytes.gguf"),
                          context_length=8192))


@pytest.fixture(scope="module")
def url(daemon, tiny_base) -> str:
    for family in FAMILIES:
        daemon.create(model_of(family), modelfile(family, base=tiny_base))
        daemon.create(model_of(family, smol=True), modelfile(family))
    return daemon.url


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def user(text: str = "What is the weather in Paris?") -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("family", THINKERS, ids=lambda f: f.name)
def test_thinking_and_answer_stream_apart(url, family):
    client = ollama.Client(host=url)
    parts = list(client.chat(model=model_of(family), messages=user("Say hi."), think=True, stream=True,
                             options={"num_predict": 400, "grammar": grammar(family.think_answer)}))
    assert "".join(p.message.thinking or "" for p in parts) == "Plan it."
    assert "".join(p.message.content for p in parts) == "Hello there."
    generated = httpx.post(f"{url}/api/generate", json={
        "model": model_of(family), "prompt": "Say hi.", "think": True, "stream": False,
        "grammar": grammar(family.think_answer), "options": {"num_predict": 400}}, timeout=120).json()
    assert (generated["thinking"], generated["response"]) == ("Plan it.", "Hello there.")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_one_call_reaches_the_ollama_client(url, family):
    client = ollama.Client(host=url)
    answer = client.chat(model=model_of(family), messages=user(), tools=TOOLS, think=bool(family.think_answer),
                         options={"num_predict": 600, "grammar": grammar(family.one_call)})
    calls = answer.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [PARIS]
    assert (answer.message.thinking or "") == ("Plan it." if family.think_answer else "")
    assert answer.message.content == "" and answer.done_reason == "stop"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_two_calls_stream_to_the_openai_client(url, family):
    chunks = list(oai(url).chat.completions.create(
        model=model_of(family), messages=user(), tools=TOOLS, stream=True, max_tokens=600,
        extra_body={"grammar": grammar(family.two_calls)}))
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert [(c.index, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        (0, *PARIS), (1, *OSLO)]
    assert len({c.id for c in calls}) == 2 and all(c.id for c in calls)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = httpx.post(f"{url}/api/chat", json={
        "model": model_of(family), "messages": user(), "tools": TOOLS, "stream": False,
        "grammar": grammar(family.two_calls), "options": {"num_predict": 600}}, timeout=120).json()
    assert usage["eval_count"] > 10  # the calls came in many pieces, and were put together


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_call_cut_off_by_the_token_limit_is_text(url, family):
    body = {"model": model_of(family), "messages": user(), "tools": TOOLS, "grammar": grammar(family.two_calls),
            "options": {"num_predict": 12}}
    with httpx.stream("POST", f"{url}/api/chat", json=body, timeout=120) as response:
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert not any(line["message"].get("tool_calls") for line in lines)
    content = "".join(line["message"]["content"] for line in lines)
    assert lines[-1]["done_reason"] == "length" and content
    assert content in family.two_calls.replace("<｜tool▁calls▁begin｜>", "")


def test_a_cut_off_call_reads_as_length_in_openai(url):
    family = BY_NAME["qwen3.5"]
    answer = oai(url).chat.completions.create(model=model_of(family), messages=user(), tools=TOOLS, max_tokens=12,
                                              extra_body={"grammar": grammar(family.two_calls)})
    choice = answer.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content.startswith("<tool_call>")


@pytest.mark.parametrize(("family", "text"), [
    ("ministral", '[TOOL_CALLS]get_weather[ARGS]{"city": Paris}'),  # arguments that are not JSON
    ("qwen3.5", "<tool_call>\n<function=delete_files>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>"),
    ("harmony", "<|channel|>commentary to=functions.delete_files <|constrain|>json<|message|>{}"),
], ids=["invalid-json", "unknown-tool-xml", "unknown-tool-harmony"])
def test_invalid_calls_are_text_and_the_next_request_works(url, family, text):
    model = model_of(BY_NAME[family])
    answer = ollama.Client(host=url).chat(model=model, messages=user(), tools=TOOLS,
                                          options={"num_predict": 600, "grammar": grammar(text)})
    assert not answer.message.tool_calls and answer.done_reason == "stop"
    assert answer.message.content == text
    again = ollama.Client(host=url).chat(model=model, messages=user(), tools=TOOLS,
                                         options={"num_predict": 600, "grammar": grammar(BY_NAME[family].two_calls)})
    assert [c.function.name for c in again.message.tool_calls] == ["get_weather", "get_time"]


@pytest.mark.parametrize("name", ["harmony", "gemma4"])
def test_anthropic_client_gets_thinking_and_tool_use_blocks(url, name):
    family = BY_NAME[name]
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    request = dict(model=model_of(family), max_tokens=600, messages=user(), thinking={"type": "enabled",
                   "budget_tokens": 1024}, tools=[{"name": t["function"]["name"], "input_schema": t["function"][
                       "parameters"]} for t in TOOLS], extra_body={"grammar": grammar(family.one_call)})
    message = client.messages.create(**request)
    assert [block.type for block in message.content] == ["thinking", "tool_use"]
    assert message.content[0].thinking == "Plan it."
    assert (message.content[1].name, message.content[1].input) == PARIS and message.content[1].id
    assert message.stop_reason == "tool_use"
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert [block.type for block in streamed.content] == ["thinking", "tool_use"]
    assert streamed.content[1].input == PARIS[1]


def test_responses_client_gets_function_calls(url):
    family = BY_NAME["deepseek3"]
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in TOOLS]
    response = oai(url).responses.create(model=model_of(family), input="Weather in Paris, time in Oslo?",
                                         tools=tools, max_output_tokens=600,
                                         extra_body={"grammar": grammar(family.two_calls)})
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [PARIS, OSLO], response.output
    assert all(c.call_id for c in calls)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_forced_tool_choice_writes_the_family_syntax(url, family):
    """No request grammar: ``tool_choice`` alone makes the model write a valid call in the family's syntax
    (with thinking asked for, where the family thinks: the call still comes first)."""
    thinking = {"reasoning_effort": "low"} if family.think_answer else {}
    answer = oai(url).chat.completions.create(
        model=model_of(family, smol=True), messages=user("What time is it in Oslo?"), tools=TOOLS, max_tokens=150,
        tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=0, **thinking)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
    assert isinstance(json.loads(choice.message.tool_calls[0].function.arguments)["city"], str)


def test_capabilities_and_think_refusals_follow_the_format(url):
    for family in FAMILIES:
        shown = httpx.post(f"{url}/api/show", json={"model": model_of(family)}).json()
        assert "tools" in shown["capabilities"], family.name
        assert ("thinking" in shown["capabilities"]) == bool(family.think_answer), family.name
    response = httpx.post(f"{url}/api/chat", json={"model": model_of(BY_NAME["lfm2"]), "messages": user(),
                                                    "think": True})
    assert response.status_code == 400 and "does not support thinking" in response.json()["error"]


@pytest.mark.parametrize("level", ["low", "high"])
def test_a_think_level_turns_thinking_on_where_the_model_has_no_levels(url, level):
    """As in Ollama: a level on a thinking model that reads none means thinking on."""
    family = BY_NAME["qwen3.5"]
    answer = ollama.Client(host=url).chat(model=model_of(family), messages=user("Say hi."), think=level,
                                          options={"num_predict": 400, "grammar": grammar(family.think_answer)})
    assert (answer.message.thinking, answer.message.content) == ("Plan it.", "Hello there.")
    refused = httpx.post(f"{url}/api/chat", json={"model": model_of(BY_NAME["granite"]), "messages": user(),
                                                   "think": level})
    assert refused.status_code == 400 and "does not support thinking" in refused.json()["error"]


def test_a_second_turn_sends_the_calls_back(url):
    """The assistant's calls and thinking and the tool's result go back in; the model answers."""
    family = BY_NAME["harmony"]
    client = ollama.Client(host=url)
    first = client.chat(model=model_of(family), messages=user(), tools=TOOLS, think=True,
                        options={"num_predict": 600, "grammar": grammar(family.one_call)})
    messages = user() + [first.message, {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 21 C"}]
    final = client.chat(model=model_of(family), messages=messages, tools=TOOLS, think=True, options={
        "num_predict": 400, "grammar": grammar("<|channel|>analysis<|message|>Got it.<|end|><|start|>assistant"
                                              "<|channel|>final<|message|>Sunny in Paris.")})
    assert (final.message.thinking, final.message.content) == ("Got it.", "Sunny in Paris.")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_templates_get_calls_thinking_and_results_as_structured_messages(family):
    """What the handler gives templates: arguments as an object, the thinking, and the result's
    function name even when the client sent only the call's id (OpenAI's tool messages)."""
    messages = [Message("user", "Weather?"),
                Message("assistant", thinking="Plan it.", tool_calls=[ToolCall(*PARIS, id="call_1")]),
                Message("tool", "Sunny", tool_call_id="call_1")]
    shaped = template_messages(messages)
    assert shaped[1]["tool_calls"][0] == {"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}
    assert shaped[2]["name"] == shaped[2]["tool_name"] == "get_weather"
    prompt = build_prompt(messages=shaped, system=None, model_template=family.template, gguf_chat_template=None,
                          bos_token="", eos_token="", tools=TOOLS, think=True)
    assert "get_weather" in prompt and "Paris" in prompt and "Sunny" in prompt
    if "{{ .Thinking }}" in family.template:  # DeepSeek's leaves old thinking out, as its template does
        assert "Plan it." in prompt
    if family.name == "harmony":
        assert "<|start|>functions.get_weather to=assistant" in prompt


def test_harmony_reads_the_effort_in_its_system_message():
    template = BY_NAME["harmony"].template
    for think, effort in (("low", "low"), ("high", "high"), (True, "medium")):
        prompt = build_prompt(messages=user("hi"), system=None, model_template=template, gguf_chat_template=None,
                              bos_token="", eos_token="", think=think)
        assert f"Reasoning: {effort}\n" in prompt


def test_parser_and_renderer_lines_choose_the_format(daemon, tiny_base):
    hermes_template = BY_NAME["qwen3.5"].template.replace("<think>", "<thinking>")  # hides the Qwen 3.5 look
    daemon.create("fmt-by-parser", f'FROM {tiny_base}\nTEMPLATE """{hermes_template}"""\nPARSER qwen3-coder\n'
                                   "RENDERER qwen3-coder\n")
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "fmt-by-parser"}).json()
    assert (shown["parser"], shown["renderer"]) == ("qwen3-coder", "qwen3-coder")
    assert "tools" in shown["capabilities"] and "thinking" not in shown["capabilities"]
    assert "PARSER qwen3-coder" in shown["modelfile"]
    answer = ollama.Client(host=daemon.url).chat(model="fmt-by-parser", messages=user(), tools=TOOLS, options={
        "num_predict": 600, "grammar": grammar(BY_NAME["qwen3.5"].two_calls)})
    assert [c.function.name for c in answer.message.tool_calls] == ["get_weather", "get_time"]
    # a model built on it keeps the format, as in Ollama
    daemon.create("fmt-by-parser-child", "FROM fmt-by-parser\nSYSTEM Be brief.\n")
    assert httpx.post(f"{daemon.url}/api/show", json={"model": "fmt-by-parser-child"}).json()["parser"] == "qwen3-coder"


@pytest.mark.parametrize("modelfile_text,needle", [
    ("FROM smollm2:135m\nPARSER qwen9\n", "unknown PARSER 'qwen9'"),
    ("FROM smollm2:135m\nRENDERER nope\n", "unknown RENDERER 'nope'"),
])
def test_unknown_parser_names_are_refused_at_create(daemon, modelfile_text, needle):
    response = httpx.post(f"{daemon.url}/api/create", json={"model": "fmt-bad", "modelfile": modelfile_text,
                                                            "stream": False}, timeout=60)
    assert response.status_code == 400 and needle in response.json()["error"] and "harmony" in response.json()["error"]
    structured = httpx.post(f"{daemon.url}/api/create", json={"model": "fmt-bad", "from": "smollm2:135m",
                                                              "parser": "qwen9", "stream": False}, timeout=60)
    assert structured.status_code == 400 and "unknown PARSER 'qwen9'" in structured.json()["error"]
    assert httpx.post(f"{daemon.url}/api/show", json={"model": "fmt-bad"}).status_code == 404
    daemon.create("fmt-good", "FROM smollm2:135m\nPARSER harmony\n")  # the next create works


#: Ollama's PARSER names beyond the first set, each with whether its format reads tool calls and thinking.
MORE_OLLAMA_PARSERS = {
    "qwen3-vl-instruct": (True, False), "qwen3-vl-thinking": (True, True), "cogito": (True, True),
    "nemotron-3-nano": (True, True), "glm-ocr": (True, False), "olmo3": (True, False),
    "olmo3-think": (False, True), "functiongemma": (True, False), "ornith": (True, True),
    "nemotron-3.5-nano": (True, True), "laguna": (True, True), "poolside-v1": (True, True), "cohere": (True, True),
    "glimmer": (True, True),
}


def test_every_ollama_parser_and_renderer_name_is_created_and_shown(daemon):
    renderers = {"olmo3.1": "olmo3", "olmo3-32b-think": "olmo3-think", "qwen3.8": "ornith"}  # (Qwen 3.5's format)
    for name, (tools, thinking) in {**MORE_OLLAMA_PARSERS, **{r: MORE_OLLAMA_PARSERS[p] for r, p in renderers.items()}}.items():
        line = f"RENDERER {name}" if name in renderers else f"PARSER {name}\nRENDERER {name}"
        daemon.create("fmt-named", f"FROM smollm2:135m\n{line}\n")
        shown = httpx.post(f"{daemon.url}/api/show", json={"model": "fmt-named"}).json()
        assert shown["renderer"] == name and shown.get("parser", "") == ("" if name in renderers else name), shown
        assert line in shown["modelfile"]
        assert ("tools" in shown["capabilities"], "thinking" in shown["capabilities"]) == (tools, thinking), name
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "fmt-named"})


def test_a_call_nested_too_deep_to_parse_stays_text_in_the_stream(url):
    """JSON nested past Python's recursion limit is no call: the answer streams it as text, never a 500."""
    deep = '<|tool_call|>[{"name": "get_weather", "arguments": {"city": ' + "[" * 1100 + "]" * 1100 + "}}]"
    chunks = list(oai(url).chat.completions.create(
        model=model_of(BY_NAME["granite"]), messages=user(), tools=TOOLS, stream=True, max_tokens=2500,
        extra_body={"grammar": grammar(deep)}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == deep
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_harmony_names_tools_as_identifiers_and_maps_calls_back():
    """Ollama's renaming for Harmony: identifier characters only, a dedupe suffix, built-ins untouched; a turn's
    tools, forced function, earlier calls and tool results all get the prompt names."""
    from localllm.server.conversation import ChatTurn
    from localllm.server.harmony_names import HarmonyNames

    offered = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
               for n in ("get-weather", "get.weather", "9lives", "python", "héllo wörld!", "???", "ok_name")]
    names = HarmonyNames.of(offered)
    assert names.to_harmony == {"get-weather": "get_weather", "get.weather": "get_weather_2", "9lives": "_9lives",
                                "python": "python", "héllo wörld!": "héllo_wörld", "???": "unnamed",
                                "ok_name": "ok_name"}
    assert all(names.to_user[h] == u for u, h in names.to_harmony.items())
    turn = names.apply(ChatTurn("m", [Message("assistant", tool_calls=[ToolCall("get-weather", {}, id="c1")]),
                                      Message("tool", "Sunny", tool_call_id="c1", tool_name="get-weather")],
                                tools=offered, tool_choice="9lives"))
    assert [t["function"]["name"] for t in turn.tools][:3] == ["get_weather", "get_weather_2", "_9lives"]
    assert turn.tool_choice == "_9lives" and offered[0]["function"]["name"] == "get-weather"  # the request's kept
    assert turn.messages[0].tool_calls[0].name == turn.messages[1].tool_name == "get_weather"


def test_harmony_calls_a_dashed_tool_under_its_prompt_name_and_returns_the_clients(url):
    """A tool named ``get-weather``: the forced call is written to ``functions.get_weather`` (what gpt-oss can
    write), the client gets ``get-weather``; a call the model writes to the prompt name maps back too."""
    family = BY_NAME["harmony"]
    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "get-weather"}}]
    forced = oai(url).chat.completions.create(
        model=model_of(family, smol=True), messages=user(), tools=tools, max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get-weather"}})
    assert [c.function.name for c in forced.choices[0].message.tool_calls] == ["get-weather"]
    written = ollama.Client(host=url).chat(
        model=model_of(family), messages=user(), tools=tools, options={"num_predict": 600, "grammar": grammar(
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')})
    assert [(c.function.name, dict(c.function.arguments)) for c in written.message.tool_calls] == [
        ("get-weather", {"city": "Paris"})]
    history = user() + [written.message, {"role": "tool", "tool_name": "get-weather", "content": "Sunny"}]
    final = ollama.Client(host=url).chat(model=model_of(family), messages=history, tools=tools, options={
        "num_predict": 400, "grammar": grammar("<|channel|>final<|message|>Sunny.")})
    assert final.message.content == "Sunny."


def test_a_built_in_renderer_writes_the_prompt_a_template_cannot(daemon, smollm2_path):
    """``RENDERER qwen3.5`` on a model whose template only echoes the prompt: the prompt is Ollama's Qwen 3.5
    one (tools in the system turn, an open ``<think>`` block, an empty one with think off, the calls and the tool
    result written back), so the model thinks, answers and calls tools."""
    import llama_cpp

    daemon.create("rnd-qwen35", 'FROM smollm2:135m\nTEMPLATE """{{ .Prompt }}"""\nRENDERER qwen3.5\n')
    client = ollama.Client(host=daemon.url)
    thought = client.chat(model="rnd-qwen35", messages=user("Say hi."), options={
        "num_predict": 60, "grammar": grammar("Plan it.</think>\n\nHello there.")})
    assert (thought.message.thinking, thought.message.content) == ("Plan it.", "Hello there.")
    system = httpx.post(f"{daemon.url}/api/show", json={"model": "rnd-qwen35"}).json().get("system")
    prompt = build_prompt(messages=user("Say hi."), system=system, model_template=None, gguf_chat_template=None,
                          bos_token="", eos_token="", think=None, renderer="qwen3.5")
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    vocab = llama_cpp.Llama(str(smollm2_path), vocab_only=True, verbose=False)
    assert thought.prompt_eval_count == len(vocab.tokenize(prompt.encode(), add_bos=False, special=True))
    plain = client.chat(model="rnd-qwen35", messages=user("Say hi."), think=False, options={
        "num_predict": 60, "grammar": grammar("Hello there.")})
    assert (plain.message.thinking or "", plain.message.content) == ("", "Hello there.")
    call = client.chat(model="rnd-qwen35", messages=user(), tools=TOOLS, options={"num_predict": 200, "grammar": grammar(
        "Plan it.</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")})
    assert [(c.function.name, dict(c.function.arguments)) for c in call.message.tool_calls] == [PARIS]
    history = user() + [call.message, {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 21 C"}]
    final = client.chat(model="rnd-qwen35", messages=history, tools=TOOLS, options={
        "num_predict": 60, "grammar": grammar("Got it.</think>\n\nSunny in Paris.")})
    assert (final.message.thinking, final.message.content) == ("Got it.", "Sunny in Paris.")
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "rnd-qwen35"})


@pytest.mark.parametrize("tool", [{"type": "function", "function": "get-weather"}, {"type": "function", "function": None}])
def test_harmony_refuses_a_tool_whose_function_is_not_an_object(url, tool):
    """The renaming reads the offered tools before they are checked: a malformed one is still the request's 400."""
    reply = httpx.post(f"{url}/api/chat", json={"model": model_of(BY_NAME["harmony"]), "messages": user(),
                                                "tools": [tool], "stream": False}, timeout=120)
    assert reply.status_code == 400 and "tools[0]" in reply.json()["error"]


def test_tool_properties_that_are_not_an_object_are_a_400(daemon):
    """``parameters.properties`` a list: a 400 naming it, not a 500 from the call grammar (seen through a
    built-in renderer's model, which takes tools whatever its template)."""
    daemon.create("rnd-bad-props", 'FROM smollm2:135m\nTEMPLATE """{{ .Prompt }}"""\nRENDERER qwen3.5\n')
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": ["x"]}}}
    reply = httpx.post(f"{daemon.url}/api/chat", json={"model": "rnd-bad-props", "messages": user(),
                                                       "tools": [tool], "stream": False}, timeout=120)
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "rnd-bad-props"})
    assert reply.status_code == 400 and "properties" in reply.json()["error"], reply.text


@pytest.fixture(scope="module")
def rendered_url(daemon, tiny_base) -> str:
    """Each built-in renderer's model on the tiny model (``rnd-<name>``) and on SmolLM2 (``rnd-<name>-smol``)."""
    for family in RENDERED:
        for suffix, base in (("", tiny_base), ("-smol", "smollm2:135m")):
            daemon.create(f"rnd-{family.renderer.replace('.', '')}{suffix}", f'FROM {base}\nTEMPLATE """{{{{ .Prompt }}}}"""\n'
                                                                            f"RENDERER {family.renderer}\nPARSER {family.parser}\n")
    return daemon.url


@pytest.mark.parametrize("family", RENDERED, ids=lambda f: f.renderer)
def test_a_built_in_renderers_model_thinks_calls_and_reads_its_results(rendered_url, family):
    """Each of Ollama's later built-in formats through the daemon (the prompt its renderer's, the model's output
    forced into the format): thinking apart from the answer (ollama, streamed), two calls with ids (openai,
    streamed), the calls and their results written back for the next turn, and a forced ``tool_choice`` answered
    in the family's syntax."""
    model = f"rnd-{family.renderer.replace('.', '')}"
    client = ollama.Client(host=rendered_url)
    parts = list(client.chat(model=model, messages=user("Say hi."), think=True, stream=True,
                             options={"num_predict": 400, "grammar": grammar(family.think_answer())}))
    assert "".join(p.message.thinking or "" for p in parts) == "Plan it."
    assert "".join(p.message.content for p in parts) == "Hello there."
    chunks = list(oai(rendered_url).chat.completions.create(
        model=model, messages=user(), tools=TOOLS, stream=True, max_tokens=600, reasoning_effort="medium",
        extra_body={"grammar": grammar(family.two_calls)}))
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert [(c.index, c.function.name, json.loads(c.function.arguments)) for c in calls] == [(0, *PARIS), (1, *OSLO)]
    assert len({c.id for c in calls}) == 2
    history = user() + [{"role": "assistant", "content": "", "thinking": "Plan it.", "tool_calls": [
        {"function": {"name": n, "arguments": a}} for n, a in (PARIS, OSLO)]},
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 21 C"},
        {"role": "tool", "tool_name": "get_time", "content": "10:00"}]
    final = client.chat(model=model, messages=history, tools=TOOLS, think=True, options={
        "num_predict": 400, "grammar": grammar(family.think_answer("Got it.", "Sunny in Paris."))})
    assert (final.message.thinking, final.message.content) == ("Got it.", "Sunny in Paris.")
    prompt = build_prompt(messages=history, system=None, model_template=None, gguf_chat_template=None, bos_token="",
                          eos_token="", tools=TOOLS, think=True, renderer=family.renderer)
    assert all(text in prompt for text in ("Paris", "Oslo", "Sunny, 21 C", "10:00", "get_time"))
    forced = oai(rendered_url).chat.completions.create(  # the model writes the arguments: SmolLM2
        model=f"{model}-smol", messages=user("What time is it in Oslo?"), tools=TOOLS, max_tokens=150, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert forced.choices[0].finish_reason == "tool_calls", forced.choices[0].message.content
    assert [c.function.name for c in forced.choices[0].message.tool_calls] == ["get_time"]


def test_a_forced_call_goes_on_the_role_header_the_prompt_ends_with(rendered_url):
    """Glimmer's prompt ends with its role header (``<|start|>assistant``): a forced call goes on from it, not
    writing the header a second time. On the byte-vocabulary model a token is a byte (but for its one merge,
    " t"), and here the grammar fixes every byte of the call, so the tokens written count the call's text."""
    city = {"type": "object", "properties": {"city": {"enum": ["Oslo"]}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get_time", "parameters": city}}
    forced = oai(rendered_url).chat.completions.create(
        model="rnd-glimmer", messages=user("What time is it in Oslo?"), tools=[tool], max_tokens=400,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [(c.function.name, json.loads(c.function.arguments)) for c in forced.choices[0].message.tool_calls] == [
        ("get_time", {"city": "Oslo"})]
    call = (' to=get_time<|message|><atem:function_calls>\n<atem:invoke name="get_time">\n'
            '<atem:parameter name="city">"Oslo"</atem:parameter>\n</atem:invoke>\n</atem:function_calls>')
    assert len(call) - 1 <= forced.usage.completion_tokens <= len(call)  # with the header again: 18 more
