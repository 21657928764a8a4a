"""Built-in renderers (Modelfile ``RENDERER``): the prompts Ollama's renderers write, for the same conversation."""

from __future__ import annotations

import pytest

from localllm.templates.prompt import PromptError, build_prompt
from localllm.templates.renderers import QWEN_CALL_FORMAT

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {"unit": {
        "type": "string", "description": "The unit of temperature", "enum": ["celsius", "fahrenheit"]}},
        "required": ["unit"]}}}
RESULT = ('{"location": "San Francisco, CA", "temperature": 68, "condition": "partly cloudy", "humidity": 65, '
          '"wind_speed": 12}')
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant with access to tools."},
    {"role": "user", "content": "What is the weather like in San Francisco?"},
    {"role": "assistant", "content": "I'll check the weather in San Francisco for you.",
     "tool_calls": [{"function": {"name": "get_weather", "arguments": {"unit": "fahrenheit"}}}]},
    {"role": "tool", "content": RESULT, "tool_name": "get_weather"},
    {"role": "user", "content": "That sounds nice! What about New York?"},
]


def render(name: str, messages: list[dict], tools: list[dict] | None = None, think=None) -> str:
    return build_prompt(messages=messages, system=None, model_template="{{ .Prompt }}", gguf_chat_template=None,
                        bos_token="", eos_token="", tools=tools, think=think, renderer=name)


def test_qwen3_coder_writes_ollamas_prompt():
    """Ollama's qwen3coder_test.go case "with tools and response", byte for byte."""
    expected = (
        "<|im_start|>system\nYou are a helpful assistant with access to tools.\n\n# Tools\n\nYou have access to the "
        "following functions:\n\n<tools>\n<function>\n<name>get_weather</name>\n<description>Get the current weather "
        "in a given location</description>\n<parameters>\n<parameter>\n<name>unit</name>\n<type>string</type>\n"
        "<description>The unit of temperature</description>\n<enum>[\"celsius\",\"fahrenheit\"]</enum>\n</parameter>\n"
        "<required>[\"unit\"]</required>\n</parameters>\n</function>\n</tools>\n\n" + QWEN_CALL_FORMAT +
        "<|im_end|>\n<|im_start|>user\nWhat is the weather like in San Francisco?<|im_end|>\n<|im_start|>assistant\n"
        "I'll check the weather in San Francisco for you.\n\n<tool_call>\n<function=get_weather>\n<parameter=unit>\n"
        "fahrenheit\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n" + RESULT +
        "\n</tool_response><|im_end|>\n<|im_start|>user\nThat sounds nice! What about New York?<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert render("qwen3-coder", CONVERSATION, [WEATHER]) == expected
    assert render("qwen3-coder", CONVERSATION[1:2]) == (
        "<|im_start|>user\nWhat is the weather like in San Francisco?<|im_end|>\n<|im_start|>assistant\n")


def test_qwen35_thinks_by_default_and_keeps_only_the_last_turns_reasoning():
    asked = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello.", "thinking": "Greet."},
             {"role": "user", "content": "Weather?"},
             {"role": "assistant", "content": "", "thinking": "Look it up.",
              "tool_calls": [{"function": {"name": "get_weather", "arguments": {"unit": "celsius"}}}]},
             {"role": "tool", "content": "Sunny"}]
    prompt = render("qwen3.5", asked, [WEATHER])
    assert prompt.startswith("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
                             '{"type": "function", "function": {"name": "get_weather"')
    assert "<|im_start|>assistant\nHello.<|im_end|>" in prompt  # an older turn's reasoning is left out
    assert ("<|im_start|>assistant\n<think>\nLook it up.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
            "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nSunny\n</tool_response><|im_end|>\n") in prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert render("qwen3.5", asked[:1], think=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render("qwen3.5", [{"role": "system", "content": " Be brief. "}, *asked[:1]]).startswith(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    """A tool as a client sends it (keys in JSON-schema order, not Go's)."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


def _call(name: str, **arguments) -> dict:
    return {"function": {"name": name, "arguments": arguments}}


def test_qwen3_vl_writes_ollamas_prompt():
    """Ollama's qwen3vl_*_test.go cases "basic", "With thinking, end assistant.", "Multiple thinking, multiple
    messages." (thinking) and "assistant with multiple tool calls and content", "consecutive tool responses grouped"
    (instruct), byte for byte."""
    assert render("qwen3-vl-thinking", [{"role": "system", "content": "You are a helpful assistant."},
                                        {"role": "user", "content": "Hello, how are you?"}]) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello, how are you?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n")
    story = {"role": "user", "content": "Tell me a story in two sentences."}
    poetry = "To make this story interesting, I will speak in poetry."
    assert render("qwen3-vl-thinking", [story, {"role": "assistant", "content": "abc", "thinking": poetry}]) == (
        "<|im_start|>user\nTell me a story in two sentences.<|im_end|>\n<|im_start|>assistant\n<think>\n" + poetry +
        "\n</think>\n\nabc")
    assert render("qwen3-vl-thinking", [
        story, {"role": "assistant", "content": "abc", "thinking": poetry},
        {"role": "user", "content": "What is the weather like in San Francisco?"},
        {"role": "assistant", "thinking": "Speak poetry after the first sentence.</think><think>Speak poetry after the "
                                          "second sentence."}]) == (
        "<|im_start|>user\nTell me a story in two sentences.<|im_end|>\n<|im_start|>assistant\nabc<|im_end|>\n"
        "<|im_start|>user\nWhat is the weather like in San Francisco?<|im_end|>\n<|im_start|>assistant\n<think>\n"
        "Speak poetry after the first sentence.</think><think>Speak poetry after the second sentence.")
    assert render("qwen3-vl-instruct", [{"role": "user", "content": "Hi"}, {
        "role": "assistant", "content": "before", "tool_calls": [_call("add", a=2, b=3), _call("mul", x=4, y=5)]}]) == (
        '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nbefore\n<tool_call>\n{"name": "add", "arguments": '
        '{"a": 2, "b": 3}}\n</tool_call>\n<tool_call>\n{"name": "mul", "arguments": {"x": 4, "y": 5}}\n</tool_call>')
    assert render("qwen3-vl-instruct", [
        {"role": "user", "content": "Compute results"},
        {"role": "assistant", "content": "ok", "tool_calls": [_call("job", n=1)]},
        {"role": "tool", "content": "5"}, {"role": "tool", "content": "6"}]) == (
        '<|im_start|>user\nCompute results<|im_end|>\n<|im_start|>assistant\nok\n<tool_call>\n{"name": "job", '
        '"arguments": {"n": 1}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n5\n</tool_response>\n'
        "<tool_response>\n6\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


DEEPSEEK_TOOL_FORMAT = (
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
    "tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\n"
    "Where:\n\n- `tool_call_name` must be an exact match to one of the available tools\n- `tool_call_arguments` must "
    "be valid JSON that strictly follows the tool's Parameters Schema\n- For multiple tool calls, chain them directly "
    "without separators or spaces\n")


def test_deepseek31_writes_ollamas_prompt():
    """Ollama's deepseek3_test.go cases "tools with thinking and full conversation", "thinking enabled" and
    "basic user message", byte for byte."""
    tools = [_tool("get_weather", "Get current weather information",
                   {"location": {"description": "City name", "type": "string"}}, ["location"])]
    conversation = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Check the weather in Tokyo"},
        {"role": "assistant", "thinking": "The user wants weather info for Tokyo. I should use the get_weather tool.",
         "content": "Let me check that for you.", "tool_calls": [_call("get_weather", location="Tokyo")]},
        {"role": "tool", "content": "Temperature: 18°C, Cloudy"},
        {"role": "assistant", "thinking": "The weather data shows it's cloudy and cool. I should present this clearly.",
         "content": "In Tokyo, it's currently 18°C and cloudy."},
        {"role": "user", "content": "What about London?"}]
    assert render("deepseek3.1", conversation, tools, think=True) == (
        "<｜begin▁of▁sentence｜>You are a helpful assistant.\n\n## Tools\nYou have access to the following tools:\n\n"
        "### get_weather\nDescription: Get current weather information\n\nParameters: "
        '{"type":"object","required":["location"],"properties":{"location":{"type":"string","description":"City name"}}}'
        "\n\n" + DEEPSEEK_TOOL_FORMAT +
        "<｜User｜>Check the weather in Tokyo<｜Assistant｜></think>Let me check that for you.<｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location":"Tokyo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
        "<｜end▁of▁sentence｜><｜tool▁output▁begin｜>Temperature: 18°C, Cloudy<｜tool▁output▁end｜>In Tokyo, it's "
        "currently 18°C and cloudy.<｜end▁of▁sentence｜><｜User｜>What about London?<｜Assistant｜><think>")
    hello = [{"role": "user", "content": "Hello, how are you?"}]
    assert render("deepseek3.1", hello, think=True) == (
        "<｜begin▁of▁sentence｜><｜User｜>Hello, how are you?<｜Assistant｜><think>")
    assert render("deepseek3.1", hello) == "<｜begin▁of▁sentence｜><｜User｜>Hello, how are you?<｜Assistant｜></think>"


COGITO = ("<｜begin▁of▁sentence｜>You are Cogito, an AI assistant created by Deep Cogito, which is an AI research lab "
          "based in San Francisco.")


def test_cogito_writes_ollamas_prompt():
    """Ollama's cogito_test.go cases "thinking enabled with system", "with tools" and "tool response", byte for byte."""
    assert render("cogito", [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": "Hello, how are you?"}], think=True) == (
        "<｜begin▁of▁sentence｜>Enable deep thinking subroutine.\n\n" + COGITO[len("<｜begin▁of▁sentence｜>"):] +
        "\n\nYou are a helpful assistant.\n\n<｜User｜>Hello, how are you?<｜Assistant｜><think>\n")
    tools = [_tool("get_weather", "Get current weather",
                   {"location": {"type": "string", "description": "City name"}}, ["location"])]
    assert render("cogito", [{"role": "user", "content": "What's the weather like?"}], tools, think=False) == (
        COGITO + '\nYou have the following functions available:\n```json\n{\n    "type": "function",\n    "function": {\n'
        '        "name": "get_weather",\n        "description": "Get current weather",\n        "parameters": {\n'
        '            "type": "object",\n            "required": [\n                "location"\n            ],\n'
        '            "properties": {\n                "location": {\n                    "type": "string",\n'
        '                    "description": "City name"\n                }\n            }\n        }\n    }\n}\n```\n'
        "<｜User｜>What's the weather like?<｜Assistant｜>")
    assert render("cogito", [{"role": "user", "content": "What's the weather in Paris?"},
                             {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", location="Paris")]},
                             {"role": "tool", "content": "Temperature: 22°C, Sunny"}], think=False) == (
        COGITO + "<｜User｜>What's the weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
        '<｜tool▁sep｜>get_weather\n```json\n{"location":"Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
        "<｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>Temperature: 22°C, Sunny<｜tool▁output▁end｜>"
        "<｜tool▁outputs▁end｜><｜Assistant｜>")


GLM_TOOLS = (
    "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", "
    "\"function\": {\"name\": \"get_weather\", \"description\": \"Get weather\", \"parameters\": {\"type\": \"object\", "
    "\"required\": [\"location\"], \"properties\": {\"location\": {\"type\": \"string\"}}}}}\n</tools>\n\nFor each "
    "function call, output the function name and arguments within the following XML format:\n<tool_call>"
    "{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key>"
    "<arg_value>{arg-value-2}</arg_value>...</tool_call>")


def test_glm47_writes_ollamas_prompt():
    """Ollama's glm47_test.go cases "tool call with content", "assistant with reasoning_content" and "thinking
    disabled", byte for byte."""
    tools = [_tool("get_weather", "Get weather", {"location": {"type": "string"}}, ["location"])]
    assert render("glm-4.7", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check", "tool_calls": [_call("get_weather", location="Tokyo")]},
        {"role": "tool", "content": '{"temperature":22}'},
        {"role": "assistant", "content": "It is 22C."}], tools) == (
        GLM_TOOLS + "<|user|>Weather?<|assistant|></think>Let me check<tool_call>get_weather<arg_key>location</arg_key>"
        '<arg_value>Tokyo</arg_value></tool_call><|observation|><tool_response>{"temperature":22}</tool_response>'
        "<|assistant|></think>It is 22C.<|assistant|><think>")
    assert render("glm-4.7", [{"role": "user", "content": "Answer with reasoning."},
                              {"role": "assistant", "thinking": "Plan.", "content": "Done."}]) == (
        "[gMASK]<sop><|user|>Answer with reasoning.<|assistant|><think>Plan.</think>Done.<|assistant|><think>")
    assert render("glm-4.7", [{"role": "user", "content": "Hello"}], think=False) == (
        "[gMASK]<sop><|user|>Hello<|assistant|></think>")


OLMO_WEATHER = _tool("get_weather", "Get the current weather",
                     {"location": {"type": "string", "description": "The city"}}, ["location"])
OLMO_FUNCTIONS = ('<functions>[{"type": "function", "function": {"name": "get_weather", "description": "Get the current '
                  'weather", "parameters": {"type": "object", "required": ["location"], "properties": {"location": '
                  '{"type": "string", "description": "The city"}}}}}]</functions>')


def test_olmo3_writes_ollamas_prompt():
    """Ollama's olmo3_test.go cases "default system with tools - includes function instruction" and "assistant with
    tool calls - function call syntax", byte for byte."""
    assert render("olmo3", [{"role": "user", "content": "What is the weather?"}], [OLMO_WEATHER]) == (
        "<|im_start|>system\nYou are a helpful function-calling AI assistant. You are provided with function signatures "
        "within <functions></functions> XML tags. You may call one or more functions to assist with the user query. "
        "Output any function calls within <function_calls></function_calls> XML tags. Do not make assumptions about "
        "what values to plug into functions." + OLMO_FUNCTIONS + "<|im_end|>\n<|im_start|>user\nWhat is the weather?"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert render("olmo3", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in SF?"},
        {"role": "assistant", "content": "Let me check the weather.",
         "tool_calls": [_call("get_weather", location="San Francisco")]},
        {"role": "tool", "content": '{"temperature": 68}'}], [OLMO_WEATHER]) == (
        "<|im_start|>system\nYou are a helpful assistant." + OLMO_FUNCTIONS + "<|im_end|>\n<|im_start|>user\nWhat is "
        "the weather in SF?<|im_end|>\n<|im_start|>assistant\nLet me check the weather.<function_calls>get_weather("
        'location="San Francisco")</function_calls><|im_end|>\n<|im_start|>environment\n{"temperature": 68}<|im_end|>\n'
        "<|im_start|>assistant\n")


def test_olmo3_think_writes_ollamas_prompt():
    """Ollama's olmo3_think_test.go cases "7b_tool_calls_and_tool_messages_ignored" and
    "32b_with_custom_system_gets_suffix", byte for byte."""
    assert render("olmo3-think", [
        {"role": "user", "content": "What is the weather in SF?"},
        {"role": "assistant", "content": "Let me check the weather.",
         "tool_calls": [_call("get_weather", location="San Francisco")]},
        {"role": "tool", "content": '{"temperature": 68}'}]) == (
        "<|im_start|>system\nYou are Olmo, a helpful AI assistant built by Ai2. Your date cutoff is December 2024, and "
        "your model weights are available at https://huggingface.co/allenai.<|im_end|>\n<|im_start|>user\nWhat is the "
        "weather in SF?<|im_end|>\n<|im_start|>assistant\nLet me check the weather.<|im_end|>\n<|im_start|>assistant\n"
        "<think>")
    assert render("olmo3-32b-think", [{"role": "system", "content": "You are a helpful assistant."},
                                      {"role": "user", "content": "Hello!"}]) == (
        "<|im_start|>system\nYou are a helpful assistant. You do not currently have access to any functions. "
        "<functions></functions><|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>")


def test_lfm2_writes_ollamas_prompt():
    """Ollama's lfm2_test.go cases "first_system_combined_with_tools", "assistant_tool_calls_with_content_preserves_both",
    "thinking_field_stripped_for_non_last_when_disabled" and "thinking_precedes_tool_calls", byte for byte."""
    bare = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
            for name in ("tool_a", "tool_b")]
    assert render("lfm2", [{"role": "system", "content": "Follow instructions."}, {"role": "user", "content": "Do work"}],
                  bare, think=False) == (
        '<|startoftext|><|im_start|>system\nFollow instructions.\nList of tools: <|tool_list_start|>[{"name": "tool_a", '
        '"parameters": {"type": "object", "properties": null}}, {"name": "tool_b", "parameters": {"type": "object", '
        '"properties": null}}]<|tool_list_end|><|im_end|>\n<|im_start|>user\nDo work<|im_end|>\n<|im_start|>assistant\n')
    assert render("lfm2", [{"role": "user", "content": "Call a tool"},
                           {"role": "assistant", "content": "Checking now.",
                            "tool_calls": [_call("get_weather", location="Paris")]}], think=False) == (
        "<|startoftext|><|im_start|>user\nCall a tool<|im_end|>\n<|im_start|>assistant\n<|tool_call_start|>"
        '[get_weather(location="Paris")]<|tool_call_end|>\nChecking now.')
    history = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1", "thinking": "reason1"},
               {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2", "thinking": "reason2"}]
    assert render("lfm2-thinking", history, think=False) == (
        "<|startoftext|><|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2"
        "<|im_end|>\n<|im_start|>assistant\n<think>reason2</think>A2")
    assert render("lfm2-thinking", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "thinking": "Let me check the weather.",
         "tool_calls": [_call("get_weather", location="Paris")]},
        {"role": "tool", "content": "22C"}], think=True) == (
        "<|startoftext|><|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>Let me check the weather."
        '</think><|tool_call_start|>[get_weather(location="Paris")]<|tool_call_end|><|im_end|>\n<|im_start|>tool\n'
        "<|tool_response_start|>22C<|tool_response_end|><|im_end|>\n<|im_start|>assistant\n")


Q = '<|"|>'
BASH = _tool("bash", "Run a command", {"command": {"type": "string", "description": "The command"}}, ["command"])
BASH_DECLARATION = (f"<|tool>declaration:bash{{description:{Q}Run a command{Q},parameters:{{properties:{{command:{{"
                    f"description:{Q}The command{Q},type:{Q}STRING{Q}}}}},required:[{Q}command{Q}],type:{Q}OBJECT{Q}}}}}"
                    "<tool|>")
LIST_FILES = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "List files"}]


def test_gemma4_writes_ollamas_prompt():
    """Ollama's gemma4_reference_test.go cases "thinking_system", "tool_call_response", "tool_call_pending_response",
    "full_round_trip" (one tool) and the nested and enum declarations, byte for byte."""
    assert render("gemma4", LIST_FILES[:1] + [{"role": "user", "content": "Hi"}], think=True) == (
        "<bos><|turn>system\n<|think|>\nYou are helpful.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n")
    assert render("gemma4", [{"role": "user", "content": "Hello"}]) == "<bos><|turn>user\nHello<turn|>\n<|turn>model\n"
    call = {"role": "assistant", "content": "", "tool_calls": [_call("bash", command="ls")]}
    result = {"role": "tool", "tool_name": "bash", "content": "file1.txt\nfile2.txt"}
    head = (f"<bos><|turn>system\nYou are helpful.{BASH_DECLARATION}<turn|>\n<|turn>user\nList files<turn|>\n"
            f"<|turn>model\n<|tool_call>call:bash{{command:{Q}ls{Q}}}<tool_call|>")
    answered = f"<|tool_response>response:bash{{value:{Q}file1.txt\nfile2.txt{Q}}}<tool_response|>"
    assert render("gemma4", LIST_FILES + [call, result], [BASH]) == head + answered
    assert render("gemma4", LIST_FILES + [{**call, "content": "Let me check."}], [BASH]) == (
        head + "Let me check.<|tool_response>")
    assert render("gemma4", LIST_FILES + [call, result, {"role": "assistant", "content": "Here are the files."},
                                          {"role": "user", "content": "Read file1.txt"}], [BASH]) == (
        head + answered + "Here are the files.<turn|>\n<|turn>user\nRead file1.txt<turn|>\n<|turn>model\n")
    nested = _tool("create", "Create item", {"name": {"type": "string", "description": "Name"}, "config": {
        "type": "object", "description": "Config", "properties": {"enabled": {"type": "boolean", "description": "On/off"}}}},
        [])
    mode = _tool("set_mode", "Set mode", {"mode": {"type": "string", "description": "The mode", "enum": ["fast", "slow"]}},
                 [])
    prompt = render("gemma4", [{"role": "user", "content": "Hi"}], [nested, mode])
    assert (f"<|tool>declaration:create{{description:{Q}Create item{Q},parameters:{{properties:{{config:{{description:"
            f"{Q}Config{Q},properties:{{enabled:{{description:{Q}On/off{Q},type:{Q}BOOLEAN{Q}}}}},type:{Q}OBJECT{Q}}},"
            f"name:{{description:{Q}Name{Q},type:{Q}STRING{Q}}}}},type:{Q}OBJECT{Q}}}}}<tool|>"
            f"<|tool>declaration:set_mode{{description:{Q}Set mode{Q},parameters:{{properties:{{mode:{{description:"
            f"{Q}The mode{Q},enum:[{Q}fast{Q},{Q}slow{Q}],type:{Q}STRING{Q}}}}},type:{Q}OBJECT{Q}}}}}<tool|>") in prompt


NEMOTRON_TOOL = {"type": "function", "function": {"name": "search_docs", "description": "Search docs", "parameters": {
    "type": "object", "$defs": {"shared": {"type": "string"}}, "required": ["query"], "properties": {
        "query": {"type": "string", "description": "Search query", "enum": ["api", "cli"]},
        "mode": {"type": ["string", "null"], "description": "Mode", "anyOf": [{"type": "string"}, {"type": "number"}]},
        "payload": {"type": "object", "description": "Payload", "properties": {"enabled": {"type": "boolean"}},
                    "required": ["enabled"]},
        "tags": {"type": "array", "description": "Tags", "items": {"type": "string"}}}}}}


def test_nemotron3_nano_writes_ollamas_prompt():
    """Ollama's nemotron3nano_reference_test.go cases "system with tools", "assistant tool call with content" and
    "assistant tool call with structured arguments", byte for byte; ``/no_think`` in a message turns thinking off."""
    assert render("nemotron-3-nano", [{"role": "system", "content": "Follow policy."},
                                      {"role": "user", "content": "Use a tool"}], [NEMOTRON_TOOL], think=True) == (
        "<|im_start|>system\nFollow policy.\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
        "<function>\n<name>search_docs</name>\n<description>Search docs</description>\n<parameters>\n<parameter>\n"
        "<name>query</name>\n<type>string</type>\n<description>Search query</description>\n<enum>[\"api\", \"cli\"]"
        "</enum>\n</parameter>\n<parameter>\n<name>mode</name>\n<type>['string', 'null']</type>\n<description>Mode"
        "</description>\n<anyOf>[{\"type\": \"string\"}, {\"type\": \"number\"}]</anyOf>\n</parameter>\n<parameter>\n"
        "<name>payload</name>\n<type>object</type>\n<description>Payload</description>\n<properties>{\"enabled\": "
        "{\"type\": \"boolean\"}}</properties>\n<required>[\"enabled\"]</required>\n</parameter>\n<parameter>\n<name>"
        "tags</name>\n<type>array</type>\n<description>Tags</description>\n<items>{\"type\": \"string\"}</items>\n"
        "</parameter>\n<$defs>{\"shared\": {\"type\": \"string\"}}</$defs>\n<required>[\"query\"]</required>\n"
        "</parameters>\n</function>\n</tools>\n\n" + QWEN_CALL_FORMAT + "<|im_end|>\n<|im_start|>user\nUse a tool"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("nemotron-3-nano", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking now.", "tool_calls": [_call("get_weather", city="Paris")]}],
        think=True) == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think></think>"
        "Checking now.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
        "</tool_call>\n<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("nemotron-3-nano", [
        {"role": "user", "content": "Create data"},
        {"role": "assistant", "content": "", "tool_calls": [
            _call("create", payload={"count": 42, "nested": {"value": "ok"}}, tags=["a", "b"])]}], think=True) == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nCreate data<|im_end|>\n<|im_start|>assistant\n"
        "<think></think>\n<tool_call>\n<function=create>\n<parameter=payload>\n{\"count\": 42, \"nested\": {\"value\": "
        "\"ok\"}}\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n</function>\n</tool_call>\n<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n")
    assert render("nemotron-3-nano", [{"role": "user", "content": "Hi /no_think"}]) == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think></think>")
    # "assistant tool call truncated with reasoning": an earlier turn's reasoning is dropped
    assert render("nemotron-3-nano", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking now.", "thinking": "Need weather",
         "tool_calls": [_call("get_weather", city="Paris")]},
        {"role": "user", "content": "And tomorrow?"}], think=True) == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think></think>"
        "Checking now.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
        "</tool_call>\n<|im_end|>\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n<think>\n")


FUNCTIONGEMMA_HEAD = (
    "<bos><start_of_turn>developer\nYou can do function calling with the following functions:<start_function_declaration>"
    "declaration:get_weather{description:<escape>Get weather<escape>,parameters:{properties:{city:{description:<escape>"
    "City<escape>,type:<escape>STRING<escape>}},type:<escape>OBJECT<escape>}}<end_function_declaration><end_of_turn>\n"
    "<start_of_turn>user\nWeather?<end_of_turn>\n<start_of_turn>model\n")
FUNCTIONGEMMA_CALLED = ("<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>"
                        "<start_function_response>response:get_weather{<escape>Sunny<escape>}<end_function_response>")


def test_functiongemma_writes_ollamas_prompt():
    """Ollama's functiongemma_test.go cases "assistant_content_with_tool_call", "user_after_tool_response" and
    "with_system_message", byte for byte."""
    weather = [{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "description": "City"}}}}}]
    asked = [{"role": "user", "content": "Weather?"},
             {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", city="Paris")]},
             {"role": "tool", "content": "Sunny"}]
    assert render("functiongemma", [asked[0], {**asked[1], "content": "Let me check."}, asked[2]], weather) == (
        FUNCTIONGEMMA_HEAD + "Let me check." + FUNCTIONGEMMA_CALLED)
    assert render("functiongemma", asked + [{"role": "user", "content": "Thanks! What about London?"}], weather) == (
        FUNCTIONGEMMA_HEAD + FUNCTIONGEMMA_CALLED + "Thanks! What about London?<end_of_turn>\n<start_of_turn>model\n")
    assert render("functiongemma", [{"role": "system", "content": "You are helpful."},
                                    {"role": "user", "content": "Hello!"}]) == (
        "<bos><start_of_turn>developer\nYou are helpful.<end_of_turn>\n<start_of_turn>user\nHello!<end_of_turn>\n"
        "<start_of_turn>model\n")


def test_glm_ocr_writes_ollamas_prompt():
    """Ollama's glmocr_test.go cases "no_images_content_unchanged" and "multi_turn_increments_image_offset" (its
    text, without the images), byte for byte; think off adds ``/nothink`` and an empty block as the Go code does."""
    assert render("glm-ocr", [{"role": "user", "content": "Text only message."}]) == (
        "[gMASK]<sop><|user|>\nText only message.<|assistant|>\n")
    assert render("glm-ocr", [{"role": "user", "content": "First image"},
                              {"role": "assistant", "content": "Processed."},
                              {"role": "user", "content": "Second image"}]) == (
        "[gMASK]<sop><|user|>\nFirst image<|assistant|>\n<think></think>\nProcessed.\n<|user|>\nSecond image"
        "<|assistant|>\n")
    assert render("glm-ocr", [{"role": "user", "content": "Read it"}], think=False) == (
        "[gMASK]<sop><|user|>\nRead it/nothink<|assistant|>\n<think></think>\n")


QWEN38_XHIGH = ("Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, "
                "consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final "
                "answer.")
QWEN38_TOOLS = [_tool("get_weather", "Get weather", {"city": {"type": "string"}}, ["city"]),
                _tool("get_uv", "Get UV index", {"city": {"type": "string"}}, ["city"])]
QWEN38_TOOL_HEADER = (
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {"type": '
    '"object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}\n'
    '{"type": "function", "function": {"name": "get_uv", "description": "Get UV index", "parameters": {"type": '
    '"object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}\n</tools>\n\n' + QWEN_CALL_FORMAT
    + "<|im_end|>\n")


def test_qwen38_writes_ollamas_prompt():
    """Ollama's qwen38_test.go flows "default xhigh injects system guidance", "request system after base
    conversation merges with base policy", "boolean true uses API medium effort", "low effort injects concise
    guidance", "preserves reasoning metadata without extracting content tags" and "tool call result and next
    generation prompt", byte for byte; a conversation with no user query is refused."""
    hello = [{"role": "user", "content": "Hello"}]
    assert render("qwen3.8", hello) == (
        f"<|im_start|>system\n{QWEN38_XHIGH}<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("qwen3.8", [{"role": "system", "content": "Base policy."}, {"role": "user", "content": "Base question"},
                              {"role": "assistant", "content": "Base answer"},
                              {"role": "system", "content": "Request policy."},
                              {"role": "user", "content": "Current question"}]) == (
        f"<|im_start|>system\n{QWEN38_XHIGH}\n\nBase policy.\n\nRequest policy.<|im_end|>\n<|im_start|>user\n"
        "Base question<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nBase answer<|im_end|>\n"
        "<|im_start|>user\nCurrent question<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("qwen3.8", [{"role": "system", "content": " Be concise. \n"}, *hello], think=True) == (
        "<|im_start|>system\nBe concise.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("qwen3.8", hello, think="low").startswith(
        "<|im_start|>system\nReasoning effort is set to low. Keep your thinking brief")
    assert render("qwen3.8", hello, think=False) == (
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render("qwen3.8", [{"role": "user", "content": "First"},
                              {"role": "assistant", "thinking": "Plan", "content": "<think>literal</think>\nAnswer"},
                              {"role": "user", "content": "Next"}]) == (
        f"<|im_start|>system\n{QWEN38_XHIGH}<|im_end|>\n<|im_start|>user\nFirst<|im_end|>\n<|im_start|>assistant\n"
        "<think>\nPlan\n</think>\n\n<think>literal</think>\nAnswer<|im_end|>\n<|im_start|>user\nNext<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n")
    called = [{"role": "user", "content": "Weather?"},
              {"role": "assistant", "thinking": "Need current data.", "content": "I'll check.",
               "tool_calls": [_call("get_weather", city="Montréal")]},
              {"role": "tool", "content": '{"temp": 18}'}]
    assert render("qwen3.8", called, QWEN38_TOOLS, think=True) == QWEN38_TOOL_HEADER + (
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nNeed current data.\n</think>\n\n"
        "I'll check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nMontréal\n</parameter>\n</function>\n"
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 18}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n")
    with pytest.raises(PromptError, match="no user query"):
        render("qwen3.8", [{"role": "tool", "content": "x"}])


def test_ornith_writes_every_assistant_turns_think_block():
    """Ollama's ornith_test.go, byte for byte: Qwen 3.5's prompt with each assistant turn's block kept, also with
    thinking off."""
    turns = [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello."},
             {"role": "user", "content": "Now say bye."}]
    assert render("ornith", turns) == (
        "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n"
        "<|im_start|>user\nNow say bye.<|im_end|>\n<|im_start|>assistant\n<think>\n")
    turns[1]["thinking"] = "Keep it short."
    assert render("ornith", turns, think=False) == (
        "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n<think>\nKeep it short.\n</think>\n\n"
        "Hello.<|im_end|>\n<|im_start|>user\nNow say bye.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_nemotron35_nano_writes_ollamas_prompt():
    """Ollama's nemotron35_reference_test.go cases "medium effort", "user no think toggle", "system think toggle
    overrides false", "assistant reasoning content" and "assistant tool call with content", byte for byte."""
    hello = [{"role": "user", "content": "Hello"}]
    empty = "<|im_start|>system\n<|im_end|>\n"
    assert render("nemotron-3.5-nano", hello, think="medium") == (
        empty + "<|im_start|>user\nHello\n\n{reasoning effort: efficient}<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("nemotron-3.5-nano", [{"role": "user", "content": "Hello /no_think"}]) == (
        empty + "<|im_start|>user\nHello /no_think<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("nemotron-3.5-nano", [{"role": "system", "content": "Policy /think"}, *hello], think=False) == (
        "<|im_start|>system\nPolicy /think<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        "<think></think>")
    assert render("nemotron-3.5-nano", [{"role": "user", "content": "Hi"},
                                        {"role": "assistant", "thinking": "Need to think", "content": "Answer"}]) == (
        empty + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nNeed to think</think>Answer"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert render("nemotron-3.5-nano", [{"role": "user", "content": "Weather?"},
                                        {"role": "assistant", "content": "Checking now.",
                                         "tool_calls": [_call("get_weather", city="Paris")]}]) == (
        empty + "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think></think>Checking now.\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n")


LAGUNA_SYSTEM = ("You are a helpful, conversationally-fluent assistant made by Poolside. You are here to be helpful "
                 "to users through natural language conversations.")
LAGUNA_TOOL = [_tool("get_weather", "Get weather", {"location": {"type": "string", "description": "City"}},
                     ["location"])]
LAGUNA_TOOL_JSON = ('{"type": "function", "function": {"name": "get_weather", "description": "Get weather", '
                    '"parameters": {"type": "object", "required": ["location"], "properties": {"location": {"type": '
                    '"string", "description": "City"}}}}}')
LAGUNA_HISTORY = [{"role": "user", "content": "Add these."},
                  {"role": "assistant", "content": "\nCalling the tool.\n", "thinking": "Need addition.",
                   "tool_calls": [_call("add", a=2, b=3)]},
                  {"role": "tool", "content": "5"}, {"role": "user", "content": "Thanks"}]


def test_laguna_writes_ollamas_prompt():
    """Ollama's laguna_test.go (v2 template) cases "tools_in_header", "assistant_history",
    "assistant_extracts_thinking_from_content" and "assistant_multiple_tool_calls_mixed_args", byte for byte."""
    assert render("laguna", [{"role": "system", "content": "Stay concise."}, {"role": "user", "content": "Weather?"}],
                  LAGUNA_TOOL, think=True) == (
        "〈|EOS|〉<system>\n\nStay concise.\n\n### Tools\n\nYou may call functions to assist with the user query.\n"
        "All available function signatures are listed below:\n<available_tools>\n" + LAGUNA_TOOL_JSON
        + "\n</available_tools>\n\nWrap your thinking in '<think>', '</think>' tags, followed by a function call. For "
        "each function call, return an unescaped XML-like object with function name and arguments within "
        "'<tool_call>' and '</tool_call>' tags, like here:\n<think> your thoughts here </think>\n<tool_call>"
        "function-name\n<arg_key>argument-key</arg_key>\n<arg_value>value-of-argument-key</arg_value>\n</tool_call>"
        "\n</system>\n<user>\nWeather?\n</user>\n<assistant>\n<think>")
    header = f"〈|EOS|〉<system>\n\n{LAGUNA_SYSTEM}\n</system>\n"
    assert render("laguna", LAGUNA_HISTORY, think=True) == header + (
        "<user>\nAdd these.\n</user>\n<assistant>\n<think>\nNeed addition.\n</think>\nCalling the tool.\n<tool_call>add\n"
        "<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n"
        "</assistant>\n<tool_response>\n5\n</tool_response>\n<user>\nThanks\n</user>\n<assistant>\n<think>")
    assert render("laguna", [{"role": "user", "content": "Explain"},
                             {"role": "assistant", "content": "<think>\nPlan\n</think>\nAnswer\n\n"},
                             {"role": "user", "content": "Next"}], think=True) == header + (
        "<user>\nExplain\n</user>\n<assistant>\n<think>\nPlan\n</think>\nAnswer\n</assistant>\n<user>\nNext\n</user>\n"
        "<assistant>\n<think>")
    assert render("laguna", [{"role": "user", "content": "Do calls"},
                             {"role": "assistant", "content": "", "tool_calls": [
                                 _call("echo", text="hello", count=2),
                                 _call("configure", flag=True, options={"mode": "fast"})]},
                             {"role": "user", "content": "Done?"}]) == header + (
        "<user>\nDo calls\n</user>\n<assistant>\n</think>\n<tool_call>echo\n<arg_key>text</arg_key>\n"
        "<arg_value>hello</arg_value>\n<arg_key>count</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n"
        "<tool_call>configure\n<arg_key>flag</arg_key>\n<arg_value>true</arg_value>\n<arg_key>options</arg_key>\n"
        '<arg_value>{"mode": "fast"}</arg_value>\n</tool_call>\n</assistant>\n<user>\nDone?\n</user>\n<assistant>\n'
        "</think>")


def test_poolside_v1_writes_ollamas_prompt():
    """Ollama's laguna_test.go (v8 template, ``poolside-v1``) cases "tools_in_header", "assistant_history" and
    "final_assistant_closes_then_generation_prompt", byte for byte."""
    assert render("poolside-v1", [{"role": "system", "content": "Stay concise."}, {"role": "user", "content": "Weather?"}],
                  LAGUNA_TOOL, think=True) == (
        "〈|EOS|〉<system>Stay concise.\n\n### Tools\n\nYou may call functions to assist with the user query.\n"
        "All available function signatures are listed below:\n<available_tools>\n" + LAGUNA_TOOL_JSON
        + "\n</available_tools></system>\n<user>Weather?</user>\n<assistant><think>")
    header = f"〈|EOS|〉<system>{LAGUNA_SYSTEM}</system>\n"
    assert render("poolside-v1", LAGUNA_HISTORY, think=True) == header + (
        "<user>Add these.</user>\n<assistant><think>Need addition.</think>\nCalling the tool.\n<tool_call>add"
        "<arg_key>a</arg_key><arg_value>2</arg_value><arg_key>b</arg_key><arg_value>3</arg_value></tool_call>"
        "</assistant>\n<tool_response>5</tool_response>\n<user>Thanks</user>\n<assistant><think>")
    assert render("poolside-v1", [{"role": "user", "content": "Complete this"},
                                  {"role": "assistant", "content": "Partial"}]) == header + (
        "<user>Complete this</user>\n<assistant></think>Partial</assistant>\n<assistant></think>")


COHERE_NO_TOOLS = ("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|># Available Tools\n```json\n[\n\n\n\n]\n```"
                   "<|END_TEXT|><|END_OF_TURN_TOKEN|>")


def test_cohere_writes_ollamas_prompt():
    """Ollama's cohere_test.go (user only, system with history and thinking, reasoning off, the tool flow, two
    calls and their results, prefill), byte for byte: call ids renumbered across the conversation."""
    assert render("cohere", [{"role": "user", "content": "USERMSG"}]) == COHERE_NO_TOOLS + (
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|><|START_TEXT|>USERMSG<|END_TEXT|><|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>")
    assert render("cohere", [{"role": "system", "content": "DEVPREAMBLE"}, {"role": "user", "content": "Q1"},
                             {"role": "assistant", "content": "A1", "thinking": "THINK1"},
                             {"role": "user", "content": "Q2"}]) == (
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>DEVPREAMBLE\n\n\n\n# Available Tools\n```json\n[\n\n\n\n]\n"
        "```<|END_TEXT|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|><|START_TEXT|>Q1<|END_TEXT|>"
        "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>THINK1<|END_THINKING|>"
        "<|START_TEXT|>A1<|END_TEXT|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|><|START_TEXT|>Q2"
        "<|END_TEXT|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>")
    assert render("cohere", [{"role": "user", "content": "Q"}], think=False).endswith(
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>")
    tools = [_tool("get_weather", "Get weather", {"city": {"type": "string"}}, ["city"])]
    flow = render("cohere", [{"role": "user", "content": "weather in Paris?"},
                             {"role": "assistant", "content": "", "thinking": "I should call the tool",
                              "tool_calls": [{**_call("get_weather", city="Paris"), "id": "call_x"}]},
                             {"role": "tool", "tool_call_id": "call_x", "content": "15C sunny"},
                             {"role": "user", "content": "thanks"}], tools)
    assert ('# Available Tools\n```json\n[\n\n    {"name": "get_weather", "description": "Get weather", "parameters": '
            '{"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}, "responses": null}'
            '\n\n\n]\n```') in flow
    assert ("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>\n            \n                <|START_THINKING|>I should call "
            'the tool<|END_THINKING|><|START_ACTION|>[\n\n    {"tool_call_id": "0", "tool_name": "get_weather", '
            '"parameters": {"city": "Paris"}}\n\n]<|END_ACTION|><|END_OF_TURN_TOKEN|>') in flow
    assert ('<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[\n    {\n        "tool_call_id": "0",\n'
            '        "results": {\n\n            \n            "0": {"content": "15C sunny"}\n\n        },\n'
            '        "is_error": null\n    }\n\n]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>') in flow
    two = render("cohere", [{"role": "user", "content": "go"},
                            {"role": "assistant", "content": "", "tool_calls": [
                                {**_call("t1"), "id": "a"}, {**_call("t2", x=1), "id": "b"}]},
                            {"role": "tool", "tool_call_id": "a", "content": "r1"},
                            {"role": "tool", "tool_call_id": "b", "content": "r2"}])
    assert ('<|START_ACTION|>[\n\n    {"tool_call_id": "0", "tool_name": "t1", "parameters": {}},\n\n    '
            '{"tool_call_id": "1", "tool_name": "t2", "parameters": {"x": 1}}\n\n]<|END_ACTION|>') in two
    assert ('<|START_TOOL_RESULT|>[\n    {\n        "tool_call_id": "0",\n        "results": {\n\n            \n'
            '            "0": {"content": "r1"}\n\n        },\n        "is_error": null\n    },\n    {\n        '
            '"tool_call_id": "1",\n        "results": {\n\n            \n            "0": {"content": "r2"}\n\n        },\n'
            '        "is_error": null\n    }\n\n]<|END_TOOL_RESULT|>') in two
    assert render("cohere", [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "partial"}]).endswith(
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_TEXT|>partial")


def test_glimmer_writes_ollamas_prompt():
    """Ollama's glimmer_reference_test.go cases "tool call and result", "adjacent assistant tool calls use message
    boundary" and "explicit reasoning level" (today's date where its test fixes one), and glimmer_test.go's ATEM
    values and tool result names, byte for byte."""
    import datetime

    weather = [_tool("get_weather", "Get the weather", {"city": {"type": "string"}, "units": {"type": "string"}},
                     ["city"])]
    args = {"city": "SF", "units": "fahrenheit"}
    called = ('<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">SF</atem:parameter>\n'
              '<atem:parameter name="units">fahrenheit</atem:parameter>\n</atem:invoke>\n</atem:function_calls>')
    system = (f"You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04.\nCurrent date: "
              f"{datetime.date.today().isoformat()}.\n\nReasoning strength: high.")
    definitions = (
        "In this environment you have access to a set of tools you can use to answer the user's question.\n\n"
        'You can invoke a function by writing a "<atem:function_calls>" block like the following:\n'
        '<atem:function_calls>\n<atem:invoke name="$FUNCTION_NAME">\n<atem:parameter name="$PARAMETER_NAME">'
        "$PARAMETER_VALUE</atem:parameter>\n...\n</atem:invoke>\n</atem:function_calls>\n\nString and scalar "
        "parameters should be specified as is, while lists and objects should use JSON format. Note that spaces for "
        "string values are not stripped. The output is not expected to be valid XML and is parsed with regular "
        "expressions.\nHere are the functions available in JSONSchema format:\n// Tool metadata\n"
        '{"name": "get_weather", "description": ""}\n// Function schemas\n{"name": "get_weather", "description": '
        '"Get the weather", "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": '
        '"string"}, "units": {"type": "string"}}}}\n\nHere\'s an example of how to call a function in the tool set:\n'
        "(If the tool namespace is not specified, invoke the function directly as `example_function_name` rather than "
        "`example_tool_name.example_function_name`)\n\nto=example_tool_name.example_function_name\n\n"
        '<atem:function_calls>\n<atem:invoke name="example_tool_name.example_function_name">\n'
        '<atem:parameter name="example_parameter_1">value_1</atem:parameter>\n<atem:parameter '
        'name="example_parameter_2">This is the value for the second parameter\nthat can span\n"multiple" lines\n'
        "</atem:parameter>\n</atem:invoke>\n</atem:function_calls>")
    assert render("glimmer", [{"role": "user", "content": "Weather?"},
                              {"role": "assistant", "content": "", "thinking": "Need current data.",
                               "tool_calls": [{**_call("get_weather", **args), "id": "call_weather"}]},
                              {"role": "tool", "tool_call_id": "call_weather", "content": '{"temp":65}'},
                              {"role": "assistant", "content": "It is 65F."}], weather) == (
        f"<|begin_of_text|><|start|>system<|message|>{system}\n\n{definitions}\n\n"
        '# Valid recipients: "self", "get_weather.*", "user".<|eot|><|start|>user<|message|>Weather?<|eot|>'
        "<|start|>assistant to=self<|message|>Need current data.<|eom|><|start|>assistant to=get_weather<|message|>"
        + called + '<|eot|><|start|>tool get_weather<|message|><tool_output name="get_weather">\n{"temp":65}\n'
        "</tool_output><|eot|><|start|>assistant to=user<|message|>It is 65F.<|eot|><|start|>assistant")
    default = f'<|begin_of_text|><|start|>system<|message|>{system}\n\n# Valid recipients: "self", "user".<|eot|>'
    twice = {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", **args)]}
    assert render("glimmer", [{"role": "user", "content": "Run twice."}, twice, twice,
                              {"role": "user", "content": "Continue."}]) == default + (
        "<|start|>user<|message|>Run twice.<|eot|><|start|>assistant to=get_weather<|message|>" + called
        + "<|eom|><|start|>assistant to=get_weather<|message|>" + called + "<|eot|><|start|>user<|message|>Continue."
        "<|eot|><|start|>assistant")
    assert render("glimmer", [{"role": "user", "content": "Solve."}], think="low") == default.replace(
        "high", "low", 1) + "<|start|>user<|message|>Solve.<|eot|><|start|>assistant"
    assert "Reasoning strength: none." in render("glimmer", [{"role": "user", "content": "Hi"}], think=False)
    values = render("glimmer", [{"role": "user", "content": "Run it."}, {"role": "assistant", "content": "", "tool_calls": [
        _call("tools.run", text="keep  spaces", count=3, enabled=True, fallback=None, items=["one", "two"],
              config={"mode": "fast"})]}])
    assert ('<atem:invoke name="tools.run">\n<atem:parameter name="text">keep  spaces</atem:parameter>\n'
            '<atem:parameter name="count">3</atem:parameter>\n<atem:parameter name="enabled">true</atem:parameter>\n'
            '<atem:parameter name="fallback">null</atem:parameter>\n<atem:parameter name="items">["one", "two"]'
            '</atem:parameter>\n<atem:parameter name="config">{"mode": "fast"}</atem:parameter>\n</atem:invoke>') in values
    results = render("glimmer", [{"role": "assistant", "content": "", "tool_calls": [
        {**_call("get_weather"), "id": "call_1"}]}, {"role": "tool", "tool_call_id": "call_1", "content": '{"temp":65}'},
        {"role": "tool", "tool_call_id": "missing", "content": "not found"}])
    assert ('<|start|>tool get_weather<|message|><tool_output name="get_weather">\n{"temp":65}\n</tool_output><|eot|>'
            '<|start|>tool missing<|message|><tool_output name="missing">\nnot found\n</tool_output><|eot|>') in results
