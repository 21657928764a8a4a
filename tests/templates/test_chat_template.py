"""GGUF chat templates in the sandbox, and build_prompt's choice of template."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.fixtures import metadata_string

from localllm.templates.chat import ChatTemplate
from localllm.templates.gotemplate import TemplateError
from localllm.templates.prompt import PromptError, build_generate_prompt, build_prompt

SMOL_DEFAULT_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def smol_template(smollm2_path: Path) -> str:
    return metadata_string(smollm2_path, "tokenizer.chat_template")


def test_smollm2_template_renders_chatml(smol_template: str) -> None:
    tmpl = ChatTemplate(smol_template, bos_token="<|im_start|>", eos_token="<|im_end|>")
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Why is the sky blue?"}]
    assert tmpl.render(messages) == (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tmpl.render(messages[1:], add_generation_prompt=False) == (
        SMOL_DEFAULT_SYSTEM + "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n"
    )


def test_hugging_face_helpers() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}"
        "{{ m['content'] | tojson }}{% if loop.index == 3 %}{% break %}{% endif %}{% endfor %}"
        "|{{ tools | tojson(indent=1) }}|{{ strftime_now('%Y') | length }}|{{ custom }}"
        "{% generation %}gen{% endgeneration %}"
    )
    out = ChatTemplate(source, bos_token="<s>").render(
        [{"role": "user", "content": "héllo <b>"}, {"role": "skip", "content": "x"}, {"role": "user", "content": "2"}, {"role": "user", "content": "3"}],
        tools=[{"a": 1}],
        custom="extra",
    )
    assert out == '<s>"héllo <b>""2"|' + json.dumps([{"a": 1}], indent=1) + "|4|extragen"


def test_raise_exception_becomes_template_error_naming_the_template() -> None:
    source = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation roles must start with user') }}{% endif %}ok"
    tmpl = ChatTemplate(source, name="gemma chat template")
    assert tmpl.render([{"role": "user", "content": "hi"}]) == "ok"
    with pytest.raises(TemplateError, match="gemma chat template: Conversation roles must start with user"):
        tmpl.render([{"role": "assistant", "content": "hi"}])


def test_syntax_error_names_template_and_line() -> None:
    with pytest.raises(TemplateError, match=r"tokenizer.chat_template: line 2: .*endfor"):
        ChatTemplate("ok\n{% for m in messages %}")


def test_undefined_variable_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="UndefinedError"):
        ChatTemplate("{{ nothing.here }}").render([])


@pytest.mark.parametrize(
    "payload",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ joiner.__init__.__globals__.os.popen('touch {marker}').read() }}",
        "{{ lipsum.__globals__['os'].popen('touch {marker}').read() }}",
        "{{ namespace.__init__.__globals__['__builtins__']['open']('/etc/passwd').read() }}",
        "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.popen('touch {marker}') }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ (messages|attr('__class__')).__mro__ }}",
        "{{ messages.append(1) }}{{ messages.clear() }}",
        "{% set x = messages.pop() %}",
    ],
)
def test_template_injection_payloads_are_blocked(payload: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    source = payload.replace("{marker}", str(marker))
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError, match="tokenizer.chat_template"):
        ChatTemplate(source).render(messages)
    assert not marker.exists()
    assert messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "source,message",
    [
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}", "recursion"),
        ("{{ 'a' * 10**10 }}", "repetition larger"),
        ("{{ 'a' | center(10**10) }}", "argument larger"),
        ("{{ 2 ** (10**8) }}", "exponent"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "string larger"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "larger"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = t %}{% endfor %}", "larger"),
        ("{{ '%999999999s' % 'a' }}", "format width"),
        ("{{ '{:999999999}'.format(1) }}", "format width"),
        ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output larger"),
    ],
)
def test_hostile_templates_are_bounded(source: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(TemplateError, match=message):
        ChatTemplate(source, max_output=2_000_000).render([])
    assert time.monotonic() - started < 5


# --- build_prompt / build_generate_prompt ----------------------------------------------------

GO_CHATML = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
USER = {"role": "user", "content": "Hi"}


def prompt_for(messages, *, system=None, model_template=None, gguf_template=None, tools=None) -> str:
    return build_prompt(
        messages=messages,
        system=system,
        model_template=model_template,
        gguf_chat_template=gguf_template,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        tools=tools,
    )


def test_gguf_template_with_modelfile_system(smol_template: str) -> None:
    out = prompt_for([USER], system="You are Mario.", gguf_template=smol_template)
    assert out == "<|im_start|>system\nYou are Mario.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    own_system = [{"role": "system", "content": "Own."}, USER]
    assert prompt_for(own_system, system="You are Mario.", gguf_template=smol_template).startswith("<|im_start|>system\nOwn.<|im_end|>")


def test_modelfile_template_wins_over_gguf_template(smol_template: str) -> None:
    out = prompt_for([USER], system="S", model_template="{{ .System }}|{{ .Prompt }}", gguf_template=smol_template)
    assert out == "S|Hi"


def test_plain_fallback_without_any_template() -> None:
    assert prompt_for([USER], system="Be nice.") == "Be nice.\n\nHi"


def test_bad_messages_are_prompt_errors() -> None:
    with pytest.raises(PromptError, match=r"messages\[1\]: unknown role 'wizard'"):
        prompt_for([USER, {"role": "wizard", "content": "x"}])
    with pytest.raises(PromptError, match="content must be a string"):
        prompt_for([{"role": "user", "content": 5}])


def test_template_failure_surfaces_as_template_error() -> None:
    with pytest.raises(TemplateError, match="Only user"):
        prompt_for([USER], gguf_template="{{ raise_exception('Only user and assistant roles') }}")


def generate(prompt: str, **kw) -> str:
    args = dict(system=None, suffix=None, template_override=None, model_template=None, gguf_chat_template=None, bos="", eos="", raw=False)
    args.update(kw)
    return build_generate_prompt(prompt=prompt, **args)


def test_generate_raw_returns_prompt_untouched() -> None:
    assert generate("<|im_start|>raw", raw=True, model_template=GO_CHATML) == "<|im_start|>raw"


def test_generate_wraps_prompt_as_user_message_after_system_and_history(smol_template: str) -> None:
    history = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    out = generate("Why?", system="Sys", model_template=GO_CHATML, history=history)
    assert out == (
        "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert generate("Why?", gguf_chat_template=smol_template) == SMOL_DEFAULT_SYSTEM + (
        "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_generate_template_override_and_suffix() -> None:
    fim = "{{ if .Suffix }}<PRE>{{ .Prompt }}<SUF>{{ .Suffix }}<MID>{{ else }}{{ .Prompt }}{{ end }}"
    assert generate("def f(", template_override=fim, model_template=GO_CHATML) == "def f("
    assert generate("def f(", suffix="return 1", template_override=fim) == "<PRE>def f(<SUF>return 1<MID>"
    with pytest.raises(PromptError, match="does not support insert"):
        generate("def f(", suffix="return 1", model_template=GO_CHATML)
    with pytest.raises(TemplateError, match="unclosed action"):
        generate("x", template_override="{{ .Prompt")
