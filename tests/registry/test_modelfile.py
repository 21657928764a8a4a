"""Modelfile parsing, writing and PARAMETER typing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localllm.options import OPTION_TYPES
from localllm.templates.families import FORMATS, RENDERERS
from localllm.registry.modelfile import (
    Modelfile,
    ModelfileError,
    convert_parameters,
    format_modelfile,
    parameters_to_pairs,
    parse_modelfile,
)

MARIO = '''# From Ollama's documentation
FROM llama3.2
# sets the temperature to 1 [higher is more creative, lower is more coherent]
PARAMETER temperature 1
# sets the context window size to 4096
PARAMETER num_ctx 4096
PARAMETER stop "<|start_header_id|>"
PARAMETER stop <|eot_id|>

# sets a custom system message to specify the behavior of the chat assistant
SYSTEM You are Mario from super mario bros, acting as an assistant.
TEMPLATE """{{ if .System }}<|start_header_id|>system<|end_header_id|>

{{ .System }}<|eot_id|>{{ end }}{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>

{{ .Prompt }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>

{{ .Response }}<|eot_id|>"""
MESSAGE user Is Toronto in Canada?
MESSAGE assistant yes
ADAPTER ./lora.gguf
LICENSE """Apache 2.0
and more"""
LICENSE second license
REQUIRES 0.14.0
'''


def test_parses_ollama_documentation_example() -> None:
    mf = parse_modelfile(MARIO)
    assert mf.from_ == "llama3.2"
    assert mf.parameters == [("temperature", "1"), ("num_ctx", "4096"), ("stop", "<|start_header_id|>"), ("stop", "<|eot_id|>")]
    assert mf.system == "You are Mario from super mario bros, acting as an assistant."
    assert mf.template.startswith("{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}")
    assert mf.template.endswith("{{ .Response }}<|eot_id|>")
    assert mf.messages == [{"role": "user", "content": "Is Toronto in Canada?"}, {"role": "assistant", "content": "yes"}]
    assert mf.adapters == ["./lora.gguf"]
    assert mf.license == ["Apache 2.0\nand more", "second license"]
    assert mf.requires == "0.14.0"
    assert convert_parameters(mf.parameters) == {"temperature": 1.0, "num_ctx": 4096, "stop": ["<|start_header_id|>", "<|eot_id|>"]}
    assert parse_modelfile(format_modelfile(mf)) == mf


def test_syntax_details() -> None:
    text = (
        "\ufeff  from   ./model.gguf  \r\n"
        "\tsystem   say \"hi\" to them   \r\n"
        'Template "{{ .Prompt }}\n  spans lines "\n'
        "parameter seed 42\n"
        "REQUIRES v0.5\n"
    )
    mf = parse_modelfile(text)
    assert mf.from_ == "./model.gguf"
    assert mf.system == 'say "hi" to them'  # bare values are trimmed; inner quotes are text
    assert mf.template == "{{ .Prompt }}\n  spans lines "
    assert mf.parameters == [("seed", "42")]
    assert mf.requires == "0.5"


def test_last_template_and_system_win_and_empty_quoted_values() -> None:
    mf = parse_modelfile('FROM m\nSYSTEM one\nSYSTEM ""\nTEMPLATE """"""\n')
    assert mf.system == "" and mf.template == ""
    assert parse_modelfile(format_modelfile(mf)) == mf


def test_parser_and_renderer_take_ollama_names() -> None:
    mf = parse_modelfile("FROM m\nPARSER qwen3-coder\nrenderer deepseek3.1\n")
    assert (mf.parser, mf.renderer) == ("qwen3-coder", "deepseek3.1")
    assert "PARSER qwen3-coder\nRENDERER deepseek3.1\n" in format_modelfile(mf)


@pytest.mark.parametrize(
    "text,message,line",
    [
        ("FROM m\nFOO bar", "line 2: unknown instruction 'FOO'", 2),
        ("FROM m\n\n  CMD:run", "line 3: unknown instruction 'CMD:run'", 3),
        ("PARAMETER temperature 1\n", "no FROM line", None),
        ("# only a comment\n", "no FROM line", None),
        ("FROM a\nFROM ./p.gguf\nFROM ./q.gguf", "line 3: a third FROM", 3),
        ("FROM m\nSYSTEM", "line 2: missing value for SYSTEM", 2),
        ("FROM m\nPARAMETER temperature", "line 2: PARAMETER needs a name and a value", 2),
        ("FROM m\nPARAMETER temprature 0.5", "line 2: unknown parameter 'temprature'", 2),
        ("FROM m\nPARAMETER num_ctx big", "line 2: invalid int value for parameter 'num_ctx'", 2),
        ("FROM m\nPARAMETER temperature hot", "line 2: invalid float value for parameter 'temperature'", 2),
        ("FROM m\nPARAMETER use_mmap maybe", "line 2: invalid bool value", 2),
        ("FROM m\nMESSAGE robot beep", "line 2: message role must be one of system, user, assistant, tool, not 'robot'", 2),
        ("FROM m\nMESSAGE user", "line 2: MESSAGE needs a role and a value", 2),
        ('FROM m\nTEMPLATE """{{ .Prompt }}\nno end', "line 2: unterminated quoted string", 2),
        ('FROM m\nSYSTEM "open', "line 2: unterminated quoted string", 2),
        ("FROM m\nREQUIRES latest", "line 2: REQUIRES must be a version", 2),
        ("FROM m\nPARSER qwen9", "line 2: unknown PARSER 'qwen9'; known: ", 2),
        ("FROM m\n\nRENDERER harmonyy", "line 3: unknown RENDERER 'harmonyy'", 3),
        ('FROM ""', "line 1: FROM needs a model name", 1),
    ],
)
def test_errors_name_the_line(text: str, message: str, line: int | None) -> None:
    with pytest.raises(ModelfileError) as err:
        parse_modelfile(text)
    assert message in str(err.value)
    assert err.value.line == line


def test_parameter_types_cover_ollama_options() -> None:
    for name in ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n", "presence_penalty",
                 "frequency_penalty", "mirostat", "mirostat_tau", "mirostat_eta", "seed", "num_predict", "stop", "num_ctx",
                 "num_batch", "num_keep", "num_thread", "num_gpu"):
        assert name in OPTION_TYPES
    assert OPTION_TYPES["num_ctx"] is int and OPTION_TYPES["temperature"] is float and OPTION_TYPES["stop"] is list


def test_convert_parameters_types_values() -> None:
    pairs = [("num_ctx", "2048"), ("temperature", "0.25"), ("stop", "a"), ("use_mmap", "false"), ("stop", "b"),
             ("seed", "-1"), ("low_vram", "true"), ("top_k", "10"), ("top_k", "20")]
    assert convert_parameters(pairs) == {"num_ctx": 2048, "temperature": 0.25, "stop": ["a", "b"], "use_mmap": False, "seed": -1, "top_k": 20}
    with pytest.raises(ModelfileError, match="unknown parameter 'bogus'"):
        convert_parameters([("bogus", "1")])
    for bad in [("temperature", "nan"), ("temperature", "inf"), ("num_ctx", "1.5"), ("num_ctx", "1_000")]:
        with pytest.raises(ModelfileError, match=f"parameter '{bad[0]}'"):
            convert_parameters([bad])


def test_parameters_to_pairs_inverts_convert() -> None:
    options = {"num_ctx": 2048, "temperature": 0.7, "stop": ["<a>", "<b>"], "use_mmap": True}
    assert convert_parameters(parameters_to_pairs(options)) == options


def test_format_refuses_a_value_no_quoting_can_carry() -> None:
    clash = 'a"\nb"""\nc'  # a '"' and a '"""' both at line ends: every spelling would end early
    with pytest.raises(ModelfileError, match="SYSTEM cannot be written"):
        format_modelfile(Modelfile(from_="m", system=clash))
    with pytest.raises(ModelfileError, match="role"):
        format_modelfile(Modelfile(from_="m", messages=[{"role": "robot", "content": "x"}]))


def test_format_quotes_only_when_needed() -> None:
    mf = Modelfile(from_="m", system="plain", template="two\nlines", license=[" padded "], parameters=[("stop", 'say "x"')])
    text = format_modelfile(mf)
    assert "SYSTEM plain\n" in text
    assert 'TEMPLATE """two\nlines"""\n' in text
    assert 'LICENSE " padded "\n' in text
    assert "PARAMETER stop say \"x\"\n" in text
    assert parse_modelfile(text) == mf


# --- property tests --------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_safe_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters='"\r'), max_size=40)
_versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}(-rc[0-9])?", fullmatch=True)


def _modelfiles(values: st.SearchStrategy[str]) -> st.SearchStrategy[Modelfile]:
    params = st.one_of(
        st.tuples(st.just("stop"), values),
        st.tuples(st.sampled_from(["num_ctx", "seed", "top_k"]), st.integers(-(2**40), 2**40).map(str)),
        st.tuples(st.sampled_from(["temperature", "top_p"]), st.floats(0, 2).map(repr)),
        st.tuples(st.just("use_mmap"), st.sampled_from(["true", "false"])),
    )
    return st.builds(
        Modelfile,
        from_=values.filter(bool),
        parameters=st.lists(params, max_size=4),
        template=st.none() | values,
        system=st.none() | values,
        messages=st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": values}), max_size=3),
        adapters=st.lists(values.filter(bool), max_size=2),
        license=st.lists(values, max_size=2),
        requires=st.none() | _versions,
        parser=st.none() | st.sampled_from(sorted(FORMATS)),
        renderer=st.none() | st.sampled_from(sorted(RENDERERS)),
    )


@settings(max_examples=300, deadline=None)
@given(_modelfiles(_safe_text))
def test_round_trip_without_quote_clashes(mf: Modelfile) -> None:
    assert parse_modelfile(format_modelfile(mf)) == mf


@settings(max_examples=300, deadline=None)
@given(_modelfiles(_text))
def test_round_trip_or_clear_refusal_for_any_text(mf: Modelfile) -> None:
    try:
        text = format_modelfile(mf)
    except ModelfileError as e:
        assert "cannot be written" in str(e)
        return
    assert parse_modelfile(text) == mf


_LINES = st.sampled_from(
    ["FROM m", "from x y", "PARAMETER stop a", "PARAMETER temperature 0.5", "PARAMETER num_ctx x", "TEMPLATE \"\"\"", '"""',
     "SYSTEM \"", '"', "MESSAGE user hi", "MESSAGE bot hi", "# c", "", "  ", "LICENSE x", "ADAPTER a", "REQUIRES 1.2",
     "FOO", "\t", "SYSTEM", "PARAMETER", "\r"]
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_text, st.lists(st.one_of(_LINES, _text), max_size=12).map("\n".join)))
def test_parser_raises_nothing_but_modelfile_error(text: str) -> None:
    try:
        mf = parse_modelfile(text)
    except ModelfileError as e:
        assert str(e)
        return
    try:
        again = format_modelfile(mf)
    except ModelfileError:
        return
    assert parse_modelfile(again) == mf
