"""The Go text/template renderer, on Ollama's real templates and on Go's semantics one by one."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localllm.templates.gotemplate import TemplateError, parse_template
from localllm.templates.prompt import ollama_template, render_ollama_template, validate_model_template

# --- Ollama's bundled templates (ollama/ollama template/*.gotmpl), verbatim -------------------

CHATML = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""

LLAMA3_INSTRUCT = """{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>

{{ .Content }}<|eot_id|>
{{- end }}<|start_header_id|>assistant<|end_header_id|>

"""

MISTRAL_INSTRUCT = """[INST] {{ range $index, $_ := .Messages }}
{{- if eq .Role "system" }}{{ .Content }}

{{ else if eq .Role "user" }}{{ .Content }}[/INST]
{{- else if eq .Role "assistant" }} {{ .Content }}</s>[INST] {{ end }}
{{- end }}"""

GEMMA_INSTRUCT = """{{- $system := "" }}
{{- range .Messages }}
{{- if eq .Role "system" }}
{{- if not $system }}{{ $system = .Content }}
{{- else }}{{ $system = printf "%s\\n\\n%s" $system .Content }}
{{- end }}
{{- continue }}
{{- else if eq .Role "user" }}<start_of_turn>user
{{- if $system }}
{{ $system }}
{{- $system = "" }}
{{- end }}
{{- else if eq .Role "assistant" }}<start_of_turn>model
{{- end }}
{{ .Content }}<end_of_turn>
{{ end }}<start_of_turn>model
"""

ZEPHYR = """{{- range .Messages }}<|{{ .Role }}|>
{{ .Content }}</s>
{{ end }}<|assistant|>
"""

ALPACA = """{{- $system := "" }}
{{- range .Messages }}
{{- if eq .Role "system" }}
{{- if not $system }}{{ $system = .Content }}
{{- else }}{{ $system = printf "%s\\n\\n%s" $system .Content }}
{{- end }}
{{- else if eq .Role "user" }}
{{- if $system }}{{ $system }}

{{ $system = "" }}
{{- end }}### Instruction:
{{ .Content }}

{{ else if eq .Role "assistant" }}### Response:
{{ .Content }}

{{ end }}
{{- end }}### Response:
"""

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER1 = {"role": "user", "content": "Hello, how are you?"}
ASSISTANT = {"role": "assistant", "content": "I'm doing great. How can I help you today?"}
USER2 = {"role": "user", "content": "I'd like to show off how chat templating works!"}
CONVERSATION = [SYSTEM, USER1, ASSISTANT, USER2]

# Expected texts worked out by hand from Go's trimming rules: "{{-" eats the white space
# before it, "-}}" the white space after it, and nothing else is touched.
EXPECTED = {
    ("chatml", "user"): "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n",
    ("chatml", "full"): (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHello, how are you?<|im_end|>\n"
        "<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n"
        "<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    ("llama3", "user"): (
        "<|start_header_id|>user<|end_header_id|>\n\nHello, how are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    ("llama3", "full"): (
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello, how are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nI'm doing great. How can I help you today?<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nI'd like to show off how chat templating works!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    ("mistral", "user"): "[INST] Hello, how are you?[/INST]",
    ("mistral", "full"): (
        "[INST] You are a helpful assistant.\n\nHello, how are you?[/INST]"
        " I'm doing great. How can I help you today?</s>[INST] I'd like to show off how chat templating works![/INST]"
    ),
    ("gemma", "user"): "<start_of_turn>user\nHello, how are you?<end_of_turn>\n<start_of_turn>model\n",
    ("gemma", "full"): (
        "<start_of_turn>user\nYou are a helpful assistant.\nHello, how are you?<end_of_turn>\n"
        "<start_of_turn>model\nI'm doing great. How can I help you today?<end_of_turn>\n"
        "<start_of_turn>user\nI'd like to show off how chat templating works!<end_of_turn>\n"
        "<start_of_turn>model\n"
    ),
    ("zephyr", "user"): "<|user|>\nHello, how are you?</s>\n<|assistant|>\n",
    ("zephyr", "full"): (
        "<|system|>\nYou are a helpful assistant.</s>\n<|user|>\nHello, how are you?</s>\n"
        "<|assistant|>\nI'm doing great. How can I help you today?</s>\n"
        "<|user|>\nI'd like to show off how chat templating works!</s>\n<|assistant|>\n"
    ),
    ("alpaca", "user"): "### Instruction:\nHello, how are you?\n\n### Response:\n",
    ("alpaca", "full"): (
        "You are a helpful assistant.\n\n### Instruction:\nHello, how are you?\n\n"
        "### Response:\nI'm doing great. How can I help you today?\n\n"
        "### Instruction:\nI'd like to show off how chat templating works!\n\n### Response:\n"
    ),
}
TEMPLATES = {
    "chatml": CHATML,
    "llama3": LLAMA3_INSTRUCT,
    "mistral": MISTRAL_INSTRUCT,
    "gemma": GEMMA_INSTRUCT,
    "zephyr": ZEPHYR,
    "alpaca": ALPACA,
}


@pytest.mark.parametrize("name,case", sorted(EXPECTED))
def test_real_ollama_templates_render_like_go(name: str, case: str) -> None:
    messages = [USER1] if case == "user" else CONVERSATION
    assert render_ollama_template(TEMPLATES[name], messages=messages) == EXPECTED[(name, case)]


def test_two_system_messages_are_joined_by_gemma_template_printf() -> None:
    second = {"role": "system", "content": "Be brief."}
    out = render_ollama_template(GEMMA_INSTRUCT, messages=[SYSTEM, second, USER1])
    # collate merges the consecutive system messages with a blank line, as Ollama does
    assert out.startswith("<start_of_turn>user\nYou are a helpful assistant.\n\nBe brief.\nHello, how are you?")


# --- legacy (per-turn) templates, as in Ollama's TestExecuteWithMessages ------------------------

MISTRAL_LEGACY = "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] "


def test_legacy_template_is_rendered_once_per_turn_and_cut_after_response() -> None:
    messages = [
        {"role": "user", "content": "Hello friend!"},
        {"role": "assistant", "content": "Hello human!"},
        {"role": "user", "content": "What is your name?"},
    ]
    expected = "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] "
    assert render_ollama_template(MISTRAL_LEGACY, messages=messages) == expected
    assert render_ollama_template(MISTRAL_LEGACY + "{{ .Response }}", messages=messages) == expected
    with_system = [{"role": "system", "content": "You are a helpful assistant!"}, *messages]
    assert render_ollama_template(MISTRAL_LEGACY, messages=with_system) == (
        "[INST] You are a helpful assistant!\n\nHello friend![/INST] Hello human![INST] What is your name?[/INST] "
    )


def test_legacy_template_continues_an_open_assistant_turn() -> None:
    messages = [
        {"role": "user", "content": "Hello friend!"},
        {"role": "assistant", "content": "Hello human!"},
        {"role": "user", "content": "What is your name?"},
        {"role": "assistant", "content": "My name is Ollama and I"},
    ]
    out = render_ollama_template("[INST] {{ .Prompt }}[/INST] {{ .Response }}</s>", messages=messages)
    assert out == "[INST] Hello friend![/INST] Hello human!</s>[INST] What is your name?[/INST] My name is Ollama and I"


def test_legacy_chatml_drops_text_after_response_in_last_turn_only() -> None:
    template = (
        "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
        "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
        "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n"
    )
    assert render_ollama_template(template, messages=CONVERSATION) == EXPECTED[("chatml", "full")]


def test_suffix_renders_prompt_and_suffix_only() -> None:
    template = "{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>\n{{- else }}{{ .Prompt }}\n{{- end }}"
    assert render_ollama_template(template, prompt="def add(", suffix="return x") == "<PRE> def add( <SUF>return x <MID>"
    assert render_ollama_template(template, messages=[{"role": "user", "content": "hello"}]) == "hello"


def test_template_without_messages_or_response_gets_response_appended() -> None:
    assert "response" in ollama_template("{{ .Prompt }}").identifiers()
    assert "response" not in ollama_template(CHATML).identifiers()


# --- Go semantics, one feature at a time ------------------------------------------------------


def render(text: str, data: dict | None = None) -> str:
    return parse_template(text).render(data or {})


@pytest.mark.parametrize(
    "text,data,expected",
    [
        ("a  {{- 1 -}}  b", {}, "a1b"),
        ("a \n\t{{- /* note */ -}}\n b", {}, "ab"),
        ("a{{/* note */}}b", {}, "ab"),
        ("{{-3}}", {}, "-3"),
        ("{{ .A.B }}", {"A": {"B": "deep"}}, "deep"),
        ("{{ .Missing }}|{{ .Missing.Deeper }}", {}, "|"),
        ("{{ if .X }}yes{{ else if .Y }}maybe{{ else }}no{{ end }}", {"Y": 1}, "maybe"),
        ("{{ if and .X .Y }}both{{ else }}not both{{ end }}", {"X": "a", "Y": ""}, "not both"),
        ("{{ or .X .Y \"default\" }}", {"X": "", "Y": 0}, "default"),
        ("{{ and .X (index .X 0) }}", {"X": []}, "[]"),  # and stops at the empty list: index never runs
        ("{{ not .L }}{{ not .M }}{{ not 0.0 }}", {"L": [], "M": {"k": 1}}, "truefalsetrue"),
        ("{{ with .U }}{{ .Name }}{{ else with .V }}v={{ . }}{{ else }}none{{ end }}", {"V": 3}, "v=3"),
        ("{{ range $i, $m := .L }}{{ $i }}={{ $m }};{{ end }}", {"L": ["a", "b"]}, "0=a;1=b;"),
        ("{{ range $m := .L }}{{ $m }}{{ end }}", {"L": ["a", "b"]}, "ab"),
        ("{{ range .L }}x{{ else }}empty{{ end }}", {"L": []}, "empty"),
        ("{{ range $k, $v := .M }}{{ $k }}:{{ $v }} {{ end }}", {"M": {"b": 2, "a": 1}}, "a:1 b:2 "),
        ("{{ range 3 }}{{ . }}{{ end }}", {}, "012"),
        ("{{ range .L }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ if eq . 4 }}{{ break }}{{ end }}{{ . }}{{ end }}", {"L": [1, 2, 3, 4, 5]}, "13"),
        ("{{ range .L }}{{ $.Top }}{{ .N }}{{ end }}", {"Top": "T", "L": [{"N": 1}, {"N": 2}]}, "T1T2"),
        ("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}", {}, "2"),
        ("{{ $x := \"outer\" }}{{ with 5 }}{{ $x := \"inner\" }}{{ $x }}{{ end }} {{ $x }}", {}, "inner outer"),
        ("{{ len .S }} {{ len .L }} {{ len .M }}", {"S": "héllo", "L": [1, 2], "M": {}}, "6 2 0"),
        ("{{ index .L 1 }} {{ index .M \"k\" }} {{ index .N 0 1 }}", {"L": ["a", "b"], "M": {"k": "v"}, "N": [[1, 2]]}, "b v 2"),
        ("{{ slice .S 1 3 }} {{ slice .L 1 }}", {"S": "hello", "L": [1, 2, 3]}, "el [2,3]"),
        ("{{ eq .R \"user\" \"tool\" }} {{ ne 1 2 }} {{ lt 1 2.5 }} {{ ge \"b\" \"a\" }}", {"R": "tool"}, "true true true true"),
        ("{{ print 1 2 \"a\" \"b\" 3 }}", {}, "1 2ab3"),  # Go adds a space only between two non-strings
        ('{{ printf "%s=%d %q %5.2f|%-4s|%03d %v %t" "k" 7 "q" 3.14159 "ab" 5 .L true }}', {"L": [1]}, 'k=7 "q"  3.14|ab  |005 [1] true'),
        ('{{ printf "%d %s" "x" }}', {}, "%!d(string=x) %!s(MISSING)"),
        ('{{ "abc" | printf "%s!" }} {{ .X | len }}', {"X": [1, 2]}, "abc! 2"),
        ("{{ json .V }}", {"V": {"a": [1, 2.0, "<b>"], "é": None}}, '{"a":[1,2,"\\u003cb\\u003e"],"é":null}'),
        ("{{ .F }} {{ .G }} {{ .H }} {{ .T }}", {"F": 1.0, "G": 1e21, "H": 0.00001, "T": False}, "1 1e+21 1e-05 false"),
        ("{{ `raw\\n` }}{{ \"esc\\t\\u00e9\" }}{{ 'a' }}{{ 0x10 }}", {}, "raw\\nesc\té9716"),
        ("{{ (index .L 0).Role }}", {"L": [{"role": "user"}]}, "user"),
        ("{{ html \"<a href='x'>\" }}", {}, "&lt;a href=&#39;x&#39;&gt;"),
    ],
)
def test_go_semantics(text: str, data: dict, expected: str) -> None:
    assert render(text, data) == expected


def test_fields_find_json_spelling_of_go_names() -> None:
    template = (
        "{{ range .Messages }}{{ .Role }}:{{ .Content }}"
        "{{ range .ToolCalls }} call {{ .Function.Name }}({{ .Function.Arguments }}){{ end }}"
        "{{ if .ToolCallID }} id={{ .ToolCallID }}{{ end }};{{ end }}"
    )
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    ]
    assert render(template, {"Messages": messages}) == 'assistant: call weather({"city":"Paris"});tool:sunny id=c1;'


def test_tools_print_as_json_and_range_over_properties() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"unit": {"type": "string"}, "city": {"type": "string", "description": "City"}}},
            },
        }
    ]
    template = (
        "{{ if .Tools }}[TOOLS]{{ .Tools }}[/TOOLS]{{ end }}"
        "{{ range .Tools }}{{ range $name, $p := .Function.Parameters.Properties }}{{ $name }}:{{ $p.Type }},{{ end }}{{ end }}"
    )
    out = parse_template(template).render({"Tools": tools})
    assert out.startswith('[TOOLS][{"type":"function","function":{"name":"get_weather"')
    assert out.endswith("[/TOOLS]city:string,unit:string,")
    render_with_tools = render_ollama_template("{{ .Tools }}{{ range .Messages }}{{ .Content }}{{ end }}", messages=[USER1], tools=tools)
    assert '"get_weather"' in render_with_tools and render_with_tools.endswith("Hello, how are you?")


# --- errors: parse time, with a position -----------------------------------------------------


@pytest.mark.parametrize(
    "text,message,line",
    [
        ("{{ .Prompt ", "unclosed action", 1),
        ("ok\n{{ if .X }}yes", "has no {{end}}", 2),
        ("{{ end }}", "unexpected {{end}}", 1),
        ("a\nb {{ nosuchfunc .X }}", "function 'nosuchfunc' not defined", 2),
        ("{{ $undefined }}", "undefined variable '$undefined'", 1),
        ("{{ if .X }}{{ $v := 1 }}{{ else }}{{ $v }}{{ end }}", "undefined variable '$v'", 1),
        ("{{ break }}", "{{break}} outside {{range}}", 1),
        ('{{ define "x" }}{{ end }}', "not supported", 1),
        ("{{ (1 }}", "unclosed left paren", 1),
        ('{{ "open }}', "unterminated quoted string", 1),
        ("{{ 1 | 2 }}", "non executable command", 1),
        ("{{ 12abc }}", "bad number syntax", 1),
        ("{{/* comment */ }}", "comment ends before closing delimiter", 1),
        ("{{ .A | }}", "missing value", 1),
        ("{{ # }}", "unrecognized character", 1),
    ],
)
def test_parse_errors_name_the_problem_and_position(text: str, message: str, line: int) -> None:
    with pytest.raises(TemplateError) as err:
        parse_template(text)
    assert message in str(err.value)
    assert err.value.line == line and err.value.column >= 1
    assert f"line {line}" in str(err.value)


def test_render_errors_have_positions() -> None:
    with pytest.raises(TemplateError, match=r"line 2, col \d+: index out of range: 5"):
        render("x\n{{ index .L 5 }}", {"L": [1]})
    with pytest.raises(TemplateError, match="can't evaluate field Role in type string"):
        render("{{ range .L }}{{ .Role }}{{ end }}", {"L": ["text"]})
    with pytest.raises(TemplateError, match="incompatible types for comparison"):
        render('{{ eq 1 "1" }}')


def test_validate_model_template_catches_render_time_errors_at_create() -> None:
    validate_model_template(CHATML)
    with pytest.raises(TemplateError, match="can't evaluate field"):
        validate_model_template("{{ range .Messages }}{{ .Content.Text }}{{ end }}")
    with pytest.raises(TemplateError):
        validate_model_template("{{ .Prompt")


# --- hostile templates stay bounded ----------------------------------------------------------


@pytest.mark.parametrize(
    "text,message",
    [
        ("{{ range 1000000000 }}x{{ end }}", "too many loop iterations"),
        ("{{ range 400 }}{{ range 400 }}{{ range 400 }}{{ end }}{{ end }}{{ end }}", "too many loop iterations"),
        ('{{ $s := "ab" }}{{ range 64 }}{{ $s = printf "%s%s" $s $s }}{{ end }}{{ $s }}', "larger than"),
        ('{{ printf "%999999999d" 1 }}', "width or precision"),
        ("{{ range 100000 }}" + "x" * 200 + "{{ end }}", "output larger than"),
    ],
)
def test_hostile_templates_fail_fast_with_template_error(text: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(TemplateError, match=message):
        parse_template(text).render({}, max_output=1_000_000)
    assert time.monotonic() - started < 5


def test_deep_nesting_is_a_parse_error_not_a_recursion_error() -> None:
    with pytest.raises(TemplateError, match="nested deeper"):
        parse_template("{{ " + "(" * 500 + "1" + ")" * 500 + " }}")
    with pytest.raises(TemplateError, match="nested deeper"):
        parse_template("{{ if 1 }}" * 500 + "{{ end }}" * 500)


# --- property tests: whatever the text, only TemplateError comes out -------------------------

_FRAGMENTS = st.sampled_from(
    ["{{", "}}", "{{-", "-}}", " ", "\n", ".", ".Role", ".Messages", "$", "$x", "$i", ":=", "=", ",", "|", "(", ")",
     "if", "else", "end", "range", "with", "break", "continue", "eq", "and", "or", "not", "len", "index", "slice",
     "printf", "print", "json", '"s"', '"%s%d"', "`r`", "'c'", "1", "-2", "3.5", "0x1f", "true", "nil", "/*", "*/", "x", "é"]
)
_TEMPLATE_TEXT = st.one_of(st.text(max_size=80), st.lists(_FRAGMENTS, max_size=40).map("".join))
_DATA = {"Messages": [{"Role": "user", "Content": "hi"}, {"role": "assistant", "content": ""}], "System": "s", "L": [1, "a"], "M": {"k": 2}}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEMPLATE_TEXT)
def test_parse_and_render_raise_nothing_but_template_error(text: str) -> None:
    try:
        tmpl = parse_template(text)
    except TemplateError:
        return
    try:
        out = tmpl.render(_DATA, max_iterations=2000, max_output=100_000)
    except TemplateError:
        return
    assert isinstance(out, str)
