"""Each family's chat format through the one streaming parser: thinking, answer and tool calls
come out the same whether the text arrives whole, a character at a time or in odd pieces;
calls that are not valid stay text."""

from __future__ import annotations

import random

import pytest

from localllm.server.conversation import Content, Thinking, ToolCallDelta
from localllm.server.output_parser import OutputParser, ParserSetup
from localllm.server.tool_grammar import forced_grammar, lazy_grammar
from localllm.server.tools import decode_calls
from localllm.templates.families import FORMATS, UnknownFormat, detect_format, format_named

TOOLS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"]},
    "get_time": {"type": "object", "properties": {}},
}
TOOL_LIST = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in TOOLS.items()]
PARIS = ("get_weather", {"city": "Paris", "days": 3})

# (format, does the prompt open the thinking block, the model's text, thinking, content, calls)
SAMPLES = [
    ("harmony", False,
     "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.",
     "The user greets.", "Hi there.", []),
    ("harmony", False,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>',
     "Need weather.", "", [PARIS]),
    ("harmony", False,  # the recipient in the role header
     '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "days": 3}',
     "", "", [PARIS]),
    ("qwen3.5", True,
     "Let me look.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
     "</function>\n</tool_call>",
     "Let me look.", "", [PARIS, ("get_time", {})]),
    ("qwen3-coder", False,
     "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n</function>\n</tool_call>",
     "", "Sure.\n", [("get_weather", {"city": "New\nYork"})]),
    ("gemma4", False,
     '<|channel>thought\nThey want weather.<channel|>Checking.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,'
     'days:3}<tool_call|>',
     "They want weather.", "Checking.", [PARIS]),
    ("ministral", False,
     '[THINK]Two calls.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[ARGS]{}',
     "Two calls.", "", [PARIS, ("get_time", {})]),
    ("mistral", False, 'Sure. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
     "", "Sure. ", [PARIS]),
    ("deepseek3", True,
     'Plan it.</think>On it.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", '
     '"days": 3}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     "Plan it.", "On it.", [PARIS, ("get_time", {})]),
    ("deepseek3", True,  # R1's form: a function type, the name, and the arguments in a fenced block
     "Plan it.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
     '{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     "Plan it.", "", [PARIS]),
    ("glm-4.7", False,
     "<think>Weather.</think><tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
     "Weather.", "", [PARIS]),
    ("lfm2", False, '<|tool_call_start|>[get_weather(city="Paris", days=3), get_time()]<|tool_call_end|>Checking.',
     "", "Checking.", [PARIS, ("get_time", {})]),
    ("functiongemma", False,
     'Sure.<start_function_call>call:get_weather{city:<escape>Paris, France<escape>,days:3}<end_function_call>',
     "", "Sure.", [("get_weather", {"city": "Paris, France", "days": 3})]),
    ("olmo3", False, 'Checking.<function_calls>get_weather(city="Paris", days=3)\nget_time()</function_calls>',
     "", "Checking.", [PARIS, ("get_time", {})]),
    ("granite", False, '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
     "", "", [PARIS]),
    ("hermes", False, 'Ok.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
     "", "Ok.\n", [PARIS]),
]


def parse(fmt: str, pieces: list[str], opened: bool = False, tools: dict | None = None) -> tuple[str, str, list]:
    chat_format = FORMATS[fmt]
    setup = ParserSetup(format=chat_format, thinking_tags=chat_format.thinking, starts_thinking=opened,
                        continues_header=bool(chat_format.answer_start), tools=TOOLS if tools is None else tools)
    parser = OutputParser(setup)
    deltas = [d for piece in pieces for d in parser.feed(piece)] + parser.finish()
    thinking = "".join(d.text for d in deltas if isinstance(d, Thinking))
    content = "".join(d.text for d in deltas if isinstance(d, Content))
    calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert [c.index for c in calls] == list(range(len(calls)))
    assert len({c.call.id for c in calls}) == len(calls)
    return thinking, content, [(c.call.name, c.call.arguments) for c in calls]


def chunkings(text: str) -> list[list[str]]:
    rng = random.Random(len(text))
    odd, i = [], 0
    while i < len(text):
        step = rng.randint(1, 9)
        odd.append(text[i:i + step])
        i += step
    return [[text], list(text), odd]


@pytest.mark.parametrize(("fmt", "opened", "text", "thinking", "content", "calls"), SAMPLES,
                         ids=[f"{s[0]}-{i}" for i, s in enumerate(SAMPLES)])
def test_each_family_parses_the_same_whole_or_streamed(fmt, opened, text, thinking, content, calls):
    for pieces in chunkings(text):
        assert parse(fmt, pieces, opened) == (thinking, content, calls), pieces[:3]


def test_content_streams_before_a_call_completes():
    chat_format = FORMATS["qwen3-coder"]
    parser = OutputParser(ParserSetup(format=chat_format, tools=TOOLS))
    assert parser.feed("Looking it up. ") == [Content("Looking it up. ")]
    assert parser.feed("<tool_call>\n<function=get_time>\n") == []
    found = parser.feed("</function>\n</tool_call>")
    assert [d.call.name for d in found] == ["get_time"]  # at its closing tag, not at the end


BAD_CALLS = [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'),  # cut off by the token limit
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call>'),  # not JSON
    ("hermes", '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'),  # not offered
    ("harmony", '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": '),
    ("harmony", '<|channel|>commentary to=functions.delete_all <|constrain|>json<|message|>{}<|call|>'),
    ("qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n"
                    "</tool_call>"),  # an integer that is not one
    ("qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"),
    ("gemma4", '<|tool_call>call:get_weather{city:<|"|>Par'),
    ("ministral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"'),
    ("deepseek3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{oops}<｜tool▁call▁end｜>"),
    ("glm-4.7", "<tool_call>nope<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"),
    ("lfm2", "<|tool_call_start|>[get_weather(city=open('x'))]<|tool_call_end|>"),
]


@pytest.mark.parametrize(("fmt", "text"), BAD_CALLS)
def test_an_invalid_call_is_no_call_and_its_text_is_kept(fmt, text):
    for pieces in chunkings(text):
        thinking, content, calls = parse(fmt, pieces)
        assert calls == []
        assert content == text.replace("<｜tool▁calls▁begin｜>", "")  # the group's marker is dropped


def test_a_call_cut_off_by_the_token_limit_is_text_even_where_its_start_would_decode():
    chat_format = FORMATS["glm-4.7"]
    text = "<tool_call>get_time"  # a call to get_time without arguments, had the answer ended here
    for cut_off, expected in ((False, [("get_time", {})]), (True, [])):
        parser = OutputParser(ParserSetup(format=chat_format, tools=TOOLS))
        deltas = parser.feed(text) + parser.finish(cut_off=cut_off)
        assert [(d.call.name, d.call.arguments) for d in deltas if isinstance(d, ToolCallDelta)] == expected
        assert "".join(d.text for d in deltas if isinstance(d, Content)) == ("" if expected else text)


def test_calls_are_not_parsed_when_no_tools_are_offered():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert parse("hermes", [text], tools={}) == ("", text, [])


def test_gemma4_label_split_across_pieces_is_dropped():
    assert parse("gemma4", ["<|chan", "nel>tho", "ught", "\nHmm.<chan", "nel|>Yes."]) == ("Hmm.", "Yes.", [])


@pytest.mark.parametrize(("syntax", "text"), [
    ("qwen-xml", "<function=get_weather>\n<parameter=city>\n 42 \n</parameter>\n</function>"),
    ("glm", "get_weather<arg_key>city</arg_key><arg_value> 42 </arg_value>"),
])
def test_string_parameters_stay_raw_text(syntax, text):
    syntax_of = {"qwen-xml": "qwen3-coder", "glm": "glm-4.7"}[syntax]
    [call] = decode_calls(FORMATS[syntax_of].calls, text, TOOLS)
    assert call.arguments == {"city": " 42 "}


def test_formats_are_found_from_architecture_and_template():
    assert detect_format("gpt-oss", "").name == "harmony"
    assert detect_format("gptoss", "").name == "harmony"
    assert detect_format("qwen3moe", "<tool_call>\n<function=x>\n<parameter=y>").name == "qwen3-coder"
    assert detect_format("qwen35", "<think>\n<function=x><parameter=y>").name == "qwen3.5"
    assert detect_format("gemma4", "<|turn>user\n<|tool_call>").name == "gemma4"
    assert detect_format("mistral3", "[SYSTEM_PROMPT][TOOL_CALLS]{{ name }}[ARGS]").name == "ministral"
    assert detect_format("llama", "[TOOL_CALLS] [").name == "mistral"
    assert detect_format("deepseek2", "<｜tool▁calls▁begin｜>").name == "deepseek3"
    assert detect_format("glm4moe", "<arg_key>").name == "glm-4.7"
    assert detect_format("lfm2", "<|tool_call_start|>").name == "lfm2"
    assert detect_format("granite", "<|tool_call|>").name == "granite"
    assert detect_format("llama", "<|python_tag|>").name == "llama3"
    assert detect_format("qwen2", "<tool_call>").name == "hermes"


def test_unknown_names_are_refused_with_the_known_ones():
    assert format_named("qwen3-coder").name == "qwen3-coder"
    assert format_named("deepseek3.1", "RENDERER").name == "deepseek3"
    with pytest.raises(UnknownFormat, match="unknown PARSER 'qwen9'.*harmony"):
        format_named("qwen9")


@pytest.mark.parametrize("fmt", sorted(f for f in FORMATS if FORMATS[f].calls))
def test_grammars_are_written_for_every_call_syntax(fmt):
    syntax = FORMATS[fmt].calls
    forced = forced_grammar(syntax, TOOL_LIST, "get_weather")
    assert forced.startswith("root ::=") and "get_time" not in forced
    grammar, triggers = lazy_grammar(syntax, TOOL_LIST)
    assert triggers == (syntax.opening[0],)
