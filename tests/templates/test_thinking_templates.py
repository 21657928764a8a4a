"""What templates receive for ``think``, and the thinking tags read from a template."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from support.gguf_builders import tiny_model

from localllm.templates.gotemplate import parse_template
from localllm.templates.prompt import PromptError, build_generate_prompt, build_prompt, render_ollama_template
from localllm.templates.thinking import DEFAULT_TAGS, ThinkingTags, go_thinking_tags, jinja_thinking_tags

# A Qwen3-style Go template: old thinking in <think> blocks, and with think on an open block to answer in.
THINKING_CHATML = """{{- range $i, $_ := .Messages }}<|im_start|>{{ .Role }}
{{ if .Thinking }}<think>{{ .Thinking }}</think>
{{ end }}{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ if .IsThinkSet }}{{ if .Think }}<think>
{{ else }}<think>

</think>

{{ end }}{{ end }}"""

USER = {"role": "user", "content": "Why is the sky blue?"}
THOUGHT = {"role": "assistant", "content": "Rayleigh scattering.", "thinking": "Short waves scatter more."}
THINK_VALUES = [None, True, False, "low", "medium", "high"]


def chat(messages: list[dict], *, go: str | None = None, jinja: str | None = None, think=None) -> str:
    return build_prompt(messages=messages, system=None, model_template=go, gguf_chat_template=jinja,
                        bos_token="", eos_token="", think=think)


# --- Go templates ----------------------------------------------------------------------------


@pytest.mark.parametrize(("think", "expected"), [
    (None, "false||false"), (True, "true|medium|true"), (False, "false||true"),
    ("low", "true|low|true"), ("medium", "true|medium|true"), ("high", "true|high|true"),
])
def test_go_templates_get_ollamas_think_values(think, expected: str) -> None:
    values = "{{ .Think }}|{{ .ThinkLevel }}|{{ .IsThinkSet }}"
    assert chat([USER], go="{{ range .Messages }}{{ end }}" + values, think=think) == expected
    # the per-turn (legacy) form and fill-in-the-middle get them too
    assert chat([USER], go="{{ .Prompt }}:" + values, think=think) == f"{USER['content']}:{expected}"
    assert render_ollama_template("{{ .Prompt }}{{ .Suffix }}:" + values, prompt="a", suffix="b",
                                  think=think) == f"ab:{expected}"


def test_go_template_messages_carry_thinking_and_the_prompt_opens_a_block() -> None:
    on = chat([USER, THOUGHT, USER], go=THINKING_CHATML, think=True)
    assert "<|im_start|>assistant\n<think>Short waves scatter more.</think>\nRayleigh scattering.<|im_end|>" in on
    tags = go_thinking_tags(parse_template(THINKING_CHATML))
    assert tags == ThinkingTags("<think>", "</think>")
    assert tags.opened_by(on)
    assert not tags.opened_by(chat([USER], go=THINKING_CHATML, think=False))  # an empty block, already closed
    assert not tags.opened_by(chat([USER], go=THINKING_CHATML))


def test_generate_passes_think_to_the_template() -> None:
    prompt = build_generate_prompt(prompt="Hi", system=None, suffix=None, template_override=None,
                                   model_template=THINKING_CHATML, gguf_chat_template=None, bos="", eos="",
                                   raw=False, think="high")
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize(("template", "tags"), [
    (THINKING_CHATML, ("<think>", "</think>")),
    ("{{ range .Messages }}{{ if .Thinking }}[THINK]{{ .Thinking }}[/THINK]{{ end }}{{ .Content }}{{ end }}",
     ("[THINK]", "[/THINK]")),
    # later finds win, text only counts at the ends of the list holding .Thinking
    ("{{ range .Messages }}<a>{{ .Thinking }}</a>{{ if .Thinking }}{{ .Role }}<b>{{ .Thinking }}</b>{{ end }}{{ end }}",
     ("<a>", "</b>")),
    ("{{ range .Tools }}<t>{{ .Thinking }}</t>{{ end }}", ("", "")),  # not in the range over .Messages
    ("{{ .Thinking }}", ("", "")),
    ("{{ range .Messages }}{{ .Content }}{{ end }}", ("", "")),
])
def test_infer_tags_as_ollama(template: str, tags: tuple[str, str]) -> None:
    assert parse_template(template).thinking_tags() == tags


@pytest.mark.parametrize(("template", "tags"), [
    ("{{ range .Messages }}{{ .Content }}{{ end }}{{ if .Think }}<think>{{ end }}", DEFAULT_TAGS),
    ("{{ range .Tools }}<t>{{ .Thinking }}</t>{{ end }}", DEFAULT_TAGS),
    ("{{ range .Messages }}{{ .Content }}{{ end }}", None),
    ("{{ .Prompt }}", None),
])
def test_go_templates_that_read_think_without_showing_tags_get_the_default(template: str, tags) -> None:
    assert go_thinking_tags(parse_template(template)) == tags


# --- Jinja templates -------------------------------------------------------------------------

JINJA_VALUES = ("{% if enable_thinking is defined %}{{ enable_thinking }}{% else %}unset{% endif %}"
                "|{{ reasoning_effort | default('none') }}")


@pytest.mark.parametrize(("think", "expected"), [
    (None, "unset|none"), (True, "True|none"), (False, "False|none"), ("low", "True|low"), ("high", "True|high"),
])
def test_jinja_templates_get_enable_thinking_and_reasoning_effort(think, expected: str) -> None:
    assert chat([USER], jinja=JINJA_VALUES, think=think) == expected


def test_granite_templates_get_their_thinking_switch() -> None:
    """Granite 3.2/3.3's templates ask for thinking by a ``thinking`` variable."""
    source = "{% if thinking %}Enclose your thinking in <think> </think>.{% else %}Answer.{% endif %}"
    assert chat([USER], jinja=source, think=True) == "Enclose your thinking in <think> </think>."
    assert chat([USER], jinja=source, think=False) == chat([USER], jinja=source) == "Answer."


def test_jinja_assistant_messages_carry_reasoning_content() -> None:
    source = ("{% for m in messages %}{{ m.role }}:{% if m.reasoning_content is string %}"
              "<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.thinking | default('') }}/{{ m.content }};"
              "{% endfor %}")
    thinking_user = {**USER, "thinking": "not an answer's"}
    assert chat([thinking_user, THOUGHT], jinja=source) == (
        "user:not an answer's/Why is the sky blue?;"
        "assistant:<think>Short waves scatter more.</think>Short waves scatter more./Rayleigh scattering.;"
    )


@pytest.mark.parametrize(("source", "tags"), [
    ("{% for m in messages %}<think>{{ m.reasoning_content }}</think>{% endfor %}", DEFAULT_TAGS),
    ("{{ '[THINK]' }}{% for m in messages %}{{ m.content }}{% endfor %}{{ '[/THINK]' }}", ("[THINK]", "[/THINK]")),
    ("<seed:think></seed:think>", ("<seed:think>", "</seed:think>")),
    ("{% if enable_thinking %}think hard{% endif %}", DEFAULT_TAGS),
    ("{% set c = m.content.split('</think>')[-1] %}", DEFAULT_TAGS),
    ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}", None),
    ("<think> only opens", None),
    ("{% if thinking %}Here is my thought process: ... Here is my response: ...{% endif %}",  # Granite 3.2
     ("Here is my thought process:", "Here is my response:")),
])
def test_jinja_thinking_tags(source: str, tags) -> None:
    assert jinja_thinking_tags(source) == tags


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("think", ["extreme", "true", 1, ["low"]])
@pytest.mark.parametrize("kind", ["go", "jinja", "none"])
def test_unknown_think_is_a_prompt_error_naming_it(think, kind: str) -> None:
    template = {"go": {"go": THINKING_CHATML}, "jinja": {"jinja": JINJA_VALUES}, "none": {}}[kind]
    with pytest.raises(PromptError, match=r"think: unknown value .*expected true, false, 'low', 'medium', 'high'"):
        chat([USER], think=think, **template)
    with pytest.raises(PromptError, match="think: unknown value"):
        build_generate_prompt(prompt="Hi", system=None, suffix=None, template_override=None, model_template=None,
                              gguf_chat_template=None, bos="", eos="", raw=True, think=think)


def test_thinking_that_is_not_text_is_a_prompt_error() -> None:
    with pytest.raises(PromptError, match=r"messages\[1\]: thinking must be a string"):
        chat([USER, {**THOUGHT, "thinking": {"steps": 3}}], go=THINKING_CHATML)


# --- capabilities, through the real daemon ---------------------------------------------------


def capabilities(daemon, model: str) -> list[str]:
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": model}, timeout=30)
    assert shown.status_code == 200, shown.text
    return shown.json()["capabilities"]


def test_show_lists_thinking_for_a_go_template_that_thinks(daemon) -> None:
    daemon.create("smollm2-thinking", f'FROM smollm2:135m\nTEMPLATE """{THINKING_CHATML}"""')
    assert "thinking" in capabilities(daemon, "smollm2-thinking")
    assert "thinking" not in capabilities(daemon, "smollm2:135m")


def test_show_lists_thinking_for_a_gguf_template_that_thinks(daemon, tmp_path: Path) -> None:
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "<|im_start|>assistant\n{% if enable_thinking %}<think>\n{% endif %}")
    thinker = tiny_model(tmp_path / "thinker.gguf", extra=lambda w: w.add_chat_template(template))
    plain = tiny_model(tmp_path / "plain.gguf", extra=lambda w: w.add_chat_template("{{ messages[0].content }}"))
    daemon.create("tiny-thinker", f"FROM {thinker}")
    daemon.create("tiny-plain", f"FROM {plain}")
    assert "thinking" in capabilities(daemon, "tiny-thinker")
    assert "thinking" not in capabilities(daemon, "tiny-plain")
