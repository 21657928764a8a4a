"""Chat templates written for the tests in each family's documented format, and the texts the
tests force a model (SmolLM2) to write in that format through a grammar: a thinking block and an
answer, one tool call, two tool calls. The tests then check what each client receives."""

from __future__ import annotations

import json
from dataclasses import dataclass

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
PARIS = ("get_weather", {"city": "Paris", "days": 3})
OSLO = ("get_time", {"city": "Oslo"})


@dataclass(frozen=True)
class Family:
    name: str  # Ollama's PARSER name of the format (a variant after a dash: granite-3.3)
    template: str  # Go TEMPLATE in the family's format
    think_answer: str | None  # the model's text for thinking "Plan it." then the answer "Hello there."
    one_call: str  # the model's text for PARIS (after thinking, where the family thinks)
    two_calls: str  # for PARIS then OSLO
    opens_thinking: bool = False  # the template opens the thinking block when asked to think


def grammar(text: str) -> str:
    """GBNF that makes the model write exactly ``text``."""
    return f"root ::= {json.dumps(text, ensure_ascii=False)}"


_CHATML_MESSAGES = '''{{- range .Messages }}<|im_start|>{{ if eq .Role "tool" }}user
<tool_response>
{{ .Content }}
</tool_response>{{ else }}{{ .Role }}
{{ if .Thinking }}<think>
{{ .Thinking }}
</think>

{{ end }}{{ .Content }}%s{{ end }}<|im_end|>
{{ end }}<|im_start|>assistant
'''

FAMILIES = [
    Family(
        "harmony",
        '''<|start|>system<|message|>You are a helpful assistant.
Reasoning: {{ if .ThinkLevel }}{{ .ThinkLevel }}{{ else }}medium{{ end }}
# Valid channels: analysis, commentary, final.<|end|>
{{- if .Tools }}<|start|>developer<|message|># Tools
namespace functions {
{{- range .Tools }}
type {{ .Function.Name }} = (_: {{ json .Function.Parameters }}) => any;
{{- end }}
}<|end|>{{ end }}
{{- range .Messages }}
{{- if eq .Role "user" }}<|start|>user<|message|>{{ .Content }}<|end|>
{{- else if eq .Role "assistant" }}
{{- if .Thinking }}<|start|>assistant<|channel|>analysis<|message|>{{ .Thinking }}<|end|>{{ end }}
{{- range .ToolCalls }}<|start|>assistant<|channel|>commentary to=functions.{{ .Function.Name }} <|constrain|>json<|message|>{{ json .Function.Arguments }}<|call|>{{ end }}
{{- if .Content }}<|start|>assistant<|channel|>final<|message|>{{ .Content }}<|end|>{{ end }}
{{- else if eq .Role "tool" }}<|start|>functions.{{ .ToolName }} to=assistant<|channel|>commentary<|message|>{{ .Content }}<|end|>
{{- end }}
{{- end }}<|start|>assistant''',
        "<|channel|>analysis<|message|>Plan it.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.",
        '<|channel|>analysis<|message|>Plan it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather '
        '<|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>',
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}'
        '<|call|><|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
    ),
    Family(
        "qwen3.5",
        '''<|im_start|>system
{{ if .Tools }}# Tools
<tools>
{{ range .Tools }}{{ json .Function }}
{{ end }}</tools>
To call a function reply with
<tool_call>
<function=example_function_name>
<parameter=example_parameter>
value
</parameter>
</function>
</tool_call>{{ end }}<|im_end|>
''' + _CHATML_MESSAGES % '''{{ range .ToolCalls }}
<tool_call>
<function={{ .Function.Name }}>
{{ range $k, $v := .Function.Arguments }}<parameter={{ $k }}>
{{ $v }}
</parameter>
{{ end }}</function>
</tool_call>{{ end }}''' + '''{{ if .Think }}<think>
{{ end }}''',
        "Plan it.\n</think>\n\nHello there.",
        "Plan it.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=city>\nOslo\n"
        "</parameter>\n</function>\n</tool_call>",
        opens_thinking=True,
    ),
    Family(
        "gemma4",
        '''<|turn>system
{{ if .Think }}<|think|>{{ end }}{{ range .Tools }}<|tool>declaration:{{ .Function.Name }}{{ json .Function.Parameters }}<tool|>{{ end }}<turn|>
{{ range .Messages }}<|turn>{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}
{{ if .Thinking }}<|channel>thought
{{ .Thinking }}<channel|>{{ end }}{{ range .ToolCalls }}<|tool_call>call:{{ .Function.Name }}{{ json .Function.Arguments }}<tool_call|>{{ end }}{{ if eq .Role "tool" }}<|tool_response>response:{{ .ToolName }}{value:<|"|>{{ .Content }}<|"|>}<tool_response|>{{ else }}{{ .Content }}{{ end }}<turn|>
{{ end }}<|turn>model
''',
        "<|channel>thought\nPlan it.<channel|>Hello there.",
        '<|channel>thought\nPlan it.<channel|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>',
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>'
        '<|tool_call>call:get_time{city:<|"|>Oslo<|"|>}<tool_call|>',
    ),
    Family(
        "ministral",
        '''[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]{{ if .Tools }}[AVAILABLE_TOOLS]{{ json .Tools }}[/AVAILABLE_TOOLS]{{ end }}
{{- range .Messages }}
{{- if eq .Role "user" }}[INST]{{ .Content }}[/INST]
{{- else if eq .Role "assistant" }}{{ if .Thinking }}[THINK]{{ .Thinking }}[/THINK]{{ end }}{{ .Content }}{{ range .ToolCalls }}[TOOL_CALLS]{{ .Function.Name }}[ARGS]{{ json .Function.Arguments }}{{ end }}</s>
{{- else if eq .Role "tool" }}[TOOL_RESULTS]{{ .Content }}[/TOOL_RESULTS]
{{- end }}{{ end }}''',
        "[THINK]Plan it.[/THINK]Hello there.",
        '[THINK]Plan it.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[ARGS]{"city": "Oslo"}',
    ),
    Family(
        "deepseek3",
        '''{{ .System }}{{ if .Tools }}## Tools
{{ range .Tools }}### {{ .Function.Name }}
{{ json .Function.Parameters }}
{{ end }}{{ end }}
{{- range .Messages }}
{{- if eq .Role "user" }}<｜User｜>{{ .Content }}
{{- else if eq .Role "assistant" }}<｜Assistant｜></think>{{ .Content }}{{ if .ToolCalls }}<｜tool▁calls▁begin｜>{{ range .ToolCalls }}<｜tool▁call▁begin｜>{{ .Function.Name }}<｜tool▁sep｜>{{ json .Function.Arguments }}<｜tool▁call▁end｜>{{ end }}<｜tool▁calls▁end｜>{{ end }}<｜end▁of▁sentence｜>
{{- else if eq .Role "tool" }}<｜tool▁output▁begin｜>{{ .Content }}<｜tool▁output▁end｜>
{{- end }}{{ end }}<｜Assistant｜>{{ if .Think }}<think>{{ else }}</think>{{ end }}''',
        "Plan it.</think>Hello there.",
        'Plan it.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3}'
        '<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3}<｜tool▁call▁end｜>'
        '<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        opens_thinking=True,
    ),
    Family(
        "glm-4.7",
        '''[gMASK]<sop>{{ if .Tools }}<|system|>
# Tools
{{ range .Tools }}{{ json .Function }}
{{ end }}{{ end }}
{{- range .Messages }}
{{- if eq .Role "tool" }}<|observation|><tool_response>{{ .Content }}</tool_response>
{{- else }}<|{{ .Role }}|>{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}{{ range .ToolCalls }}<tool_call>{{ .Function.Name }}{{ range $k, $v := .Function.Arguments }}<arg_key>{{ $k }}</arg_key><arg_value>{{ $v }}</arg_value>{{ end }}</tool_call>{{ end }}
{{- end }}{{ end }}<|assistant|>{{ if .Think }}<think>{{ end }}''',
        "Plan it.</think>Hello there.",
        "Plan it.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
        "<arg_value>3</arg_value></tool_call><tool_call>get_time<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
        "</tool_call>",
        opens_thinking=True,
    ),
    Family(
        "lfm2",
        '''<|im_start|>system
{{ if .Tools }}List of tools: <|tool_list_start|>{{ json .Tools }}<|tool_list_end|>{{ end }}<|im_end|>
{{ range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}{{ if .ToolCalls }}<|tool_call_start|>[{{ range $i, $c := .ToolCalls }}{{ if $i }}, {{ end }}{{ .Function.Name }}({{ range $k, $v := .Function.Arguments }}{{ $k }}={{ json $v }} {{ end }}){{ end }}]<|tool_call_end|>{{ end }}<|im_end|>
{{ end }}<|im_start|>assistant
''',
        None,
        '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
        '<|tool_call_start|>[get_weather(city="Paris", days=3), get_time(city="Oslo")]<|tool_call_end|>',
    ),
    Family(
        "granite",
        '''{{ if .Tools }}<|start_of_role|>available_tools<|end_of_role|>{{ json .Tools }}<|end_of_text|>
{{ end }}{{ range .Messages }}<|start_of_role|>{{ .Role }}<|end_of_role|>{{ .Content }}{{ if .ToolCalls }}<|tool_call|>{{ json .ToolCalls }}{{ end }}<|end_of_text|>
{{ end }}<|start_of_role|>assistant<|end_of_role|>''',
        None,
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
        '{"name": "get_time", "arguments": {"city": "Oslo"}}]',
    ),
    Family(
        "granite-3.3",  # Granite 3.3 (PARSER granite): thinks when asked, <think> ... </think><response> ... </response>
        '''{{ if .Think }}<|start_of_role|>system<|end_of_role|>Your thinking process should be enclosed within <think> </think> tags, and then the response within <response> </response> tags.<|end_of_text|>
{{ end }}{{ if .Tools }}<|start_of_role|>available_tools<|end_of_role|>{{ json .Tools }}<|end_of_text|>
{{ end }}{{ range .Messages }}<|start_of_role|>{{ .Role }}<|end_of_role|>{{ .Content }}{{ if .ToolCalls }}<|tool_call|>{{ json .ToolCalls }}{{ end }}<|end_of_text|>
{{ end }}<|start_of_role|>assistant<|end_of_role|>''',
        "<think>Plan it.</think><response>Hello there.</response>",
        '<think>Plan it.</think><|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
        '{"name": "get_time", "arguments": {"city": "Oslo"}}]',
    ),
]

BY_NAME = {family.name: family for family in FAMILIES}


def modelfile(family: Family, parser: str | None = None, base: str = "smollm2:135m") -> str:
    """A Modelfile for ``base`` (SmolLM2 unless told) with the family's template (and a PARSER line, when given)."""
    lines = [f"FROM {base}", f'TEMPLATE """{family.template}"""', "PARAMETER temperature 0"]
    return "\n".join(lines + ([f"PARSER {parser}"] if parser else [])) + "\n"


@dataclass(frozen=True)
class Rendered:
    """A format whose prompt a built-in renderer writes (a Modelfile's ``RENDERER`` and ``PARSER``, Ollama's
    names), and what the tests force a model to write in it with thinking on: ``thought`` and ``answer`` around
    their text ({}), and PARIS then OSLO as two calls after a thought."""

    renderer: str
    parser: str
    thought: str
    answer: str
    calls: str

    def think_answer(self, thinking: str = "Plan it.", text: str = "Hello there.") -> str:
        return self.thought.format(thinking) + self.answer.format(text)

    @property
    def two_calls(self) -> str:
        return self.thought.format("Plan it.") + self.calls


_QWEN_XML_TWO = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                 "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=city>\nOslo\n"
                 "</parameter>\n</function>\n</tool_call>")
_ATEM = ('<|start|>assistant to={0}<|message|><atem:function_calls>\n<atem:invoke name="{0}">\n{1}</atem:invoke>\n'
         "</atem:function_calls>")

RENDERED = [
    Rendered("qwen3.8", "qwen3.5", "{}\n</think>\n\n", "{}", _QWEN_XML_TWO),
    Rendered("ornith", "ornith", "{}\n</think>\n\n", "{}", _QWEN_XML_TWO),
    Rendered("nemotron-3.5-nano", "nemotron-3.5-nano", "{}\n</think>\n", "{}", _QWEN_XML_TWO),
    Rendered("laguna", "laguna", "{}\n</think>\n", "{}",
             "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
             "<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time\n<arg_key>city</arg_key>\n"
             "<arg_value>Oslo</arg_value>\n</tool_call>\n"),
    Rendered("poolside-v1", "poolside-v1", "{}</think>", "{}",
             "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
             "<arg_value>3</arg_value></tool_call><tool_call>get_time<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
             "</tool_call>"),
    Rendered("cohere", "cohere", "{}<|END_THINKING|>", "<|START_TEXT|>{}<|END_TEXT|><|END_OF_TURN_TOKEN|>",
             '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", '
             '"days": 3}},\n    {"tool_call_id": "1", "tool_name": "get_time", "parameters": {"city": "Oslo"}}\n]'
             "<|END_ACTION|><|END_OF_TURN_TOKEN|>"),
    Rendered("glimmer", "glimmer", " to=self<|message|>{}<|eom|>", "<|start|>assistant to=user<|message|>{}<|eot|>",
             _ATEM.format("get_weather", '<atem:parameter name="city">Paris</atem:parameter>\n'
                                         '<atem:parameter name="days">3</atem:parameter>\n') + "<|eom|>"
             + _ATEM.format("get_time", '<atem:parameter name="city">Oslo</atem:parameter>\n') + "<|eot|>"),
]
