"""Built-in renderers (Modelfile ``RENDERER``): the prompts Ollama's renderers write, for the same conversation."""

from __future__ import annotations

from localllm.templates.prompt import build_prompt
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
