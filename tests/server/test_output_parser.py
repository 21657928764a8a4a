"""The incremental output parser: thinking and tool calls split out while text streams."""

from __future__ import annotations

import pytest

from localllm.server.conversation import Content, Thinking, ToolCallDelta
from localllm.server.output_parser import OutputParser, ParserSetup
from localllm.templates.families import FORMATS
from localllm.templates.thinking import ThinkingTags

THINK = ThinkingTags("<think>", "</think>")


def tools_of(fmt: str, *names: str, **setup) -> ParserSetup:
    """A setup for format ``fmt`` offering tools ``names`` (with no parameters)."""
    return ParserSetup(format=FORMATS[fmt], tools={n: {"type": "object"} for n in names}, **setup)


def run(setup: ParserSetup, pieces: list[str]) -> list[list]:
    """The deltas after each piece, then those of finish()."""
    parser = OutputParser(setup)
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def joined(steps: list[list], kind: type) -> str:
    return "".join(d.text for step in steps for d in step if isinstance(d, kind))


def calls(steps: list[list]) -> list[ToolCallDelta]:
    return [d for step in steps for d in step if isinstance(d, ToolCallDelta)]


def test_plain_text_passes_through_at_once():
    steps = run(ParserSetup(), ["Hello", " <world>", " and <tool"])
    assert [joined([s], Content) for s in steps] == ["Hello", " <world>", " and <tool", ""]


def test_hermes_call_splits_from_streamed_content():
    setup = tools_of("hermes", "weather")
    steps = run(setup, ["Let me check", ". <tool", '_call>\n{"name": "weather", ',
                        '"arguments": {"city": "Paris"}}\n</tool_call>', "\nDone."])
    assert joined(steps[:1], Content) == "Let me check"  # streamed before the call is complete
    assert joined(steps[1:2], Content) == ". "  # "<tool" is held: it may be the marker
    found = calls(steps)
    assert len(found) == 1 and found[0].call.name == "weather" and found[0].call.arguments == {"city": "Paris"}
    assert found[0].index == 0 and found[0].call.id.startswith("call_")
    assert calls(steps[3:4]) == found  # passed on as soon as its closing tag arrived
    assert joined(steps, Content) == "Let me check. Done."


def test_two_hermes_calls_get_indexes_and_distinct_ids():
    setup = tools_of("hermes", "a", "b")
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>'
    found = calls(run(setup, [text[i:i + 7] for i in range(0, len(text), 7)]))
    assert [(c.index, c.call.name) for c in found] == [(0, "a"), (1, "b")]
    assert found[0].call.id != found[1].call.id


def test_text_after_a_marker_that_holds_no_call_is_kept():
    setup = tools_of("hermes", "weather")
    steps = run(setup, ["Try <tool_call>not json at all"])
    assert calls(steps) == []
    assert joined(steps, Content) == "Try <tool_call>not json at all"


def test_a_held_marker_prefix_is_released_at_the_end():
    setup = tools_of("hermes", "weather")
    steps = run(setup, ["a < b and b <tool"])
    assert joined(steps[:1], Content) == "a < b and b "
    assert joined(steps, Content) == "a < b and b <tool"


def test_thinking_block_opened_by_the_prompt():
    steps = run(ParserSetup(thinking_tags=THINK, starts_thinking=True),
                ["\nI should", " greet.</th", "ink>\n\nHello", " there"])
    assert joined(steps, Thinking) == "I should greet."
    assert joined(steps, Content) == "Hello there"
    assert joined(steps[:1], Thinking) == "I should"  # thinking streams too


def test_thinking_block_written_by_the_model():
    steps = run(ParserSetup(thinking_tags=THINK), ["  <thi", "nk>hmm</think>", "Answer"])
    assert joined(steps, Thinking) == "hmm"
    assert joined(steps, Content) == "Answer"


def test_a_think_tag_after_the_answer_started_is_content():
    steps = run(ParserSetup(thinking_tags=THINK), ["Answer <think>x</think>"])
    assert joined(steps, Content) == "Answer <think>x</think>"
    assert joined(steps, Thinking) == ""


def test_unclosed_thinking_stays_thinking():
    steps = run(ParserSetup(thinking_tags=THINK, starts_thinking=True), ["still thinking"])
    assert joined(steps, Thinking) == "still thinking"


def test_thinking_then_a_call():
    setup = tools_of("hermes", "f", thinking_tags=THINK, starts_thinking=True)
    steps = run(setup, ['plan</think><tool_call>{"name": "f", "arguments": {}}</tool_call>'])
    assert joined(steps, Thinking) == "plan"
    assert [c.call.name for c in calls(steps)] == ["f"]
    assert joined(steps, Content) == ""


@pytest.mark.parametrize("pieces", [['{"name": "f", "parameters": {"q": 1}}'],
                                    ['<|python_tag|>{"name": "f", ', '"parameters": {"q": 1}}']])
def test_llama3_calls(pieces):
    steps = run(tools_of("llama3", "f"), pieces)
    assert [(c.call.name, c.call.arguments) for c in calls(steps)] == [("f", {"q": 1})]
    assert joined(steps, Content) == ""


def test_llama3_prose_streams():
    steps = run(tools_of("llama3", "f"), ["It is", " sunny."])
    assert joined(steps[:1], Content) == "It is"


def test_mistral_calls():
    steps = run(tools_of("mistral", "f"),
                ["Sure. [TOOL_", 'CALLS][{"name": "f", "arguments": {"a": "b"}}]'])
    assert joined(steps[:1], Content) == "Sure. "
    assert [c.call.arguments for c in calls(steps)] == [{"a": "b"}]


def test_unknown_function_names_are_not_calls():
    steps = run(tools_of("hermes", "f"),
                ['<tool_call>{"name": "rm", "arguments": {}}</tool_call>'])
    assert calls(steps) == []
    assert "rm" in joined(steps, Content)


def test_a_list_of_calls_in_one_hermes_block():
    """SmolLM2 writes its calls as a JSON list inside one <tool_call> block."""
    setup = tools_of("hermes", "a", "b")
    steps = run(setup, ['<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</tool_call>'])
    assert [(c.index, c.call.name) for c in calls(steps)] == [(0, "a"), (1, "b")]


def test_a_call_nested_too_deep_to_parse_is_passed_on_as_text():
    text = "<|tool_call_start|>[add(a=" + "1+" * 3000 + "1)]<|tool_call_end|>"
    steps = run(tools_of("lfm2", "add"), ["Sum: ", text[:100], text[100:], " done"])
    assert calls(steps) == []
    assert joined(steps, Content).startswith("Sum: " + text) and joined(steps, Content).endswith("done")


def test_a_laguna_call_inside_its_thinking_ends_the_thinking():
    """Laguna may open a call before closing its thinking (Ollama's parser reads it so): the call ends the
    block; where the format does not allow it (Qwen), the same text stays thinking."""
    text = ["Need the weather.\n<tool_", "call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n",
            "</tool_call>"]
    steps = run(tools_of("laguna", "get_weather", thinking_tags=THINK, starts_thinking=True), text)
    assert joined(steps, Thinking) == "Need the weather." and joined(steps, Content) == ""
    assert [(c.call.name, c.call.arguments) for c in calls(steps)] == [("get_weather", {"city": "Paris"})]
    qwen = run(tools_of("glm-4.7", "get_weather", thinking_tags=THINK, starts_thinking=True), text)
    assert joined(qwen, Thinking) == "".join(text) and not calls(qwen)


def test_a_glimmer_call_block_in_a_message_to_the_user_is_a_call():
    """Glimmer sometimes writes the ATEM block in its answer instead of a message to the tool: it is the call
    its invoke names (Ollama's fallback); an invoke of a tool not offered stays text."""
    block = ('<atem:function_calls>\n<atem:invoke name="get_time">\n<atem:parameter name="city">Oslo'
             "</atem:parameter>\n</atem:invoke>\n</atem:function_calls>")
    setup = tools_of("glimmer", "get_time", continues_header=True)
    steps = run(setup, [" to=user<|message|>", block[:30], block[30:], "<|eot|>"])
    assert [(c.call.name, c.call.arguments) for c in calls(steps)] == [("get_time", {"city": "Oslo"})]
    assert joined(steps, Content) == ""
    other = run(tools_of("glimmer", "get_weather", continues_header=True), [" to=user<|message|>" + block + "<|eot|>"])
    assert not calls(other) and joined(other, Content) == block
