"""Turning a chat or generate request into prompt text.

This is the one place that decides which template applies, in Ollama's order:
a Modelfile ``TEMPLATE`` (Go syntax) wins, else the GGUF's own
``tokenizer.chat_template`` (Jinja), else plain text. It also reproduces how
Ollama feeds a Go template (``template/template.go``): consecutive messages of
one role are merged, system messages are collected into ``.System``, and a
template that never mentions ``.Messages`` is run once per turn with
``.System``/``.Prompt``/``.Response``, the last turn cut after ``{{ .Response }}``.
Both kinds of template get the request's ``think`` setting (see ``thinking``).

The public functions render in a worker process (:mod:`~localllm.templates.worker`),
which bounds a template's time and memory; the ``render_*`` functions are what
runs there.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from functools import lru_cache
from typing import Any, ParamSpec

from localllm.templates.chat import ChatTemplate
from localllm.templates.gotemplate import GoTemplate, TemplateError, parse_template
from localllm.templates.renderers import built_in_renderer
from localllm.templates.thinking import (
    Think,
    check_think,
    go_think_values,
    jinja_think_values,
    with_reasoning_content,
)
from localllm.templates.worker import call_bounded

ROLES = ("system", "user", "assistant", "tool")

_SAMPLE_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi, how can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]


class PromptError(ValueError):
    """The request cannot be turned into a prompt (bad messages, unsupported suffix)."""


@lru_cache(maxsize=64)
def ollama_template(text: str) -> GoTemplate:
    """Parse a Modelfile TEMPLATE as Ollama does: one that mentions neither
    ``.Messages`` nor ``.Response`` gets ``{{ .Response }}`` appended."""
    tmpl = parse_template(text)
    if not {"messages", "response"} & tmpl.identifiers():
        tmpl = parse_template(text + "{{ .Response }}")
    return tmpl


@lru_cache(maxsize=16)
def _chat_template(source: str, bos_token: str, eos_token: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)


def validate_model_template(text: str) -> None:
    """Create-time check: the TEMPLATE parses and renders a sample conversation.

    Raises TemplateError, so a Modelfile with a broken (or endless) template
    fails at ``create`` rather than at the first chat.
    """
    call_bounded(render_ollama_template, {"text": text, "messages": _SAMPLE_CONVERSATION})


def _check_messages(messages: list[dict]) -> None:
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise PromptError(f"messages[{i}] must be an object")
        if m.get("role") not in ROLES:
            raise PromptError(f"messages[{i}]: unknown role {m.get('role')!r} (expected one of {', '.join(ROLES)})")
        for text_field in ("content", "thinking"):
            if not isinstance(m.get(text_field) or "", str):
                raise PromptError(f"messages[{i}]: {text_field} must be a string")


def _checked_think(think: Think) -> Think:
    try:
        return check_think(think)
    except ValueError as exc:
        raise PromptError(str(exc)) from None


def _collate(messages: list[dict]) -> tuple[str, list[dict]]:
    """Ollama's collate: join system texts, merge consecutive same-role messages (not tool results)."""
    system: list[str] = []
    out: list[dict] = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "system":
            system.append(content)
        if out and out[-1]["role"] == m["role"] and m["role"] != "tool":
            out[-1]["content"] = (out[-1].get("content") or "") + "\n\n" + content
        else:
            out.append({**m, "content": content})
    return "\n\n".join(system), out


def render_ollama_template(
    text: str,
    *,
    messages: list[dict] | None = None,
    tools: list[dict] | None = None,
    prompt: str = "",
    suffix: str = "",
    think: Think = None,
) -> str:
    """Execute a Modelfile TEMPLATE with Ollama's data: ``.Messages``/``.System``/``.Tools``
    for chat templates, per-turn ``.System``/``.Prompt``/``.Response`` for legacy ones,
    ``.Prompt``/``.Suffix`` for fill-in-the-middle; all with ``.Think``/``.ThinkLevel``/``.IsThinkSet``."""
    tmpl = ollama_template(text)
    thinking = go_think_values(_checked_think(think))
    if prompt and suffix:
        return tmpl.render({"Prompt": prompt, "Suffix": suffix, "Response": "", **thinking})
    system, msgs = _collate(messages or [])
    if "messages" in tmpl.identifiers():
        return tmpl.render({"System": system, "Messages": msgs, "Tools": tools or None, "Response": "", **thinking})
    return _render_per_turn(tmpl, msgs, thinking)


def _render_per_turn(tmpl: GoTemplate, messages: list[dict], thinking: dict[str, Any]) -> str:
    parts: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def flush() -> None:
        parts.append(tmpl.render({**turn, **thinking}))
        turn.update(System="", Prompt="", Response="")

    for m in messages:
        if m["role"] == "system":
            if turn["Prompt"] or turn["Response"]:
                flush()
            turn["System"] = m["content"]
        elif m["role"] == "user":
            if turn["Response"]:
                flush()
            turn["Prompt"] = m["content"]
        elif m["role"] == "assistant":
            turn["Response"] = m["content"]
    parts.append(tmpl.cut_after_field("Response").render({**turn, **thinking}))
    return "".join(parts)


def _plain(messages: list[dict]) -> str:
    """No template at all: the texts one after another, as Ollama's ``{{ .Prompt }}`` default would."""
    return "\n\n".join(m.get("content") or "" for m in messages if m.get("content"))


P = ParamSpec("P")


def _bounded(render: Callable[P, str], runs_template: Callable[[dict[str, Any]], bool]) -> Callable[P, str]:
    """``render`` with the same parameters, run in a render worker (its time and memory bounded) when
    ``runs_template`` says the request runs a template; without one nothing foreign runs, so it runs here."""
    signature = inspect.signature(render)

    @functools.wraps(render)
    def bounded(*args: P.args, **kwargs: P.kwargs) -> str:
        request = signature.bind(*args, **kwargs).arguments  # a wrong argument is the caller's TypeError
        return call_bounded(render, request) if runs_template(request) else render(**request)

    return bounded


def render_chat_prompt(
    *,
    messages: list[dict],
    system: str | None,
    model_template: str | None,
    gguf_chat_template: str | None,
    bos_token: str,
    eos_token: str,
    tools: list[dict] | None = None,
    think: Think = None,
    renderer: str | None = None,
) -> str:
    """The prompt for a chat request, in this process (:func:`build_prompt` bounds it).

    ``messages`` are the conversation (Modelfile MESSAGE lines first, then the
    request's), ``system`` the Modelfile's SYSTEM, put first when the
    conversation does not start with a system message (as Ollama does).
    ``think`` is the request's thinking setting. Raises PromptError for bad
    messages or ``think``, TemplateError when the template fails or passes a
    limit of the render worker.
    """
    _check_messages(messages)
    think = _checked_think(think)
    msgs = list(messages)
    if system and (not msgs or msgs[0]["role"] != "system"):
        msgs.insert(0, {"role": "system", "content": system})
    built_in = built_in_renderer(renderer)
    if built_in is not None:  # a Modelfile RENDERER we write prompts with (renderers.py)
        try:
            return built_in(msgs, tools or [], think)
        except ValueError as exc:  # a conversation the renderer's format cannot hold
            raise PromptError(str(exc)) from None
    if model_template:
        return render_ollama_template(model_template, messages=msgs, tools=tools, think=think)
    if gguf_chat_template:
        template = _chat_template(gguf_chat_template, bos_token, eos_token)
        return template.render(with_reasoning_content(msgs), tools=tools, **jinja_think_values(think))
    return _plain(msgs)


#: :func:`render_chat_prompt` in a render worker whenever a template runs.
build_prompt = _bounded(render_chat_prompt, lambda r: built_in_renderer(r.get("renderer")) is None and bool(
    r.get("model_template") or r.get("gguf_chat_template")))


def render_generate_prompt(
    *,
    prompt: str,
    system: str | None,
    suffix: str | None,
    template_override: str | None,
    model_template: str | None,
    gguf_chat_template: str | None,
    bos: str,
    eos: str,
    raw: bool,
    history: list[dict] | None = None,
    think: Think = None,
) -> str:
    """The prompt for ``/api/generate``, in this process (:func:`build_generate_prompt` bounds it).

    ``raw`` sends ``prompt`` untouched; a request ``template`` (``template_override``)
    overrides the model's; with ``suffix`` the Go template gets ``.Prompt``/``.Suffix``
    (fill in the middle); otherwise the prompt becomes one user message after
    ``system`` (the request's, else the Modelfile's) and ``history`` (the
    Modelfile's MESSAGE lines), as Ollama's generate handler builds it.
    ``think`` reaches the template as in :func:`build_prompt`.
    """
    think = _checked_think(think)
    if raw:
        return prompt
    template = template_override or model_template
    if suffix:
        if not template or "suffix" not in ollama_template(template).identifiers():
            raise PromptError("this model's template does not support insert (suffix)")
        return render_ollama_template(template, prompt=prompt, suffix=suffix, think=think)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages += list(history or [])
    messages.append({"role": "user", "content": prompt})
    return render_chat_prompt(
        messages=messages,
        system=None,
        model_template=template,
        gguf_chat_template=gguf_chat_template,
        bos_token=bos,
        eos_token=eos,
        think=think,
    )


#: :func:`render_generate_prompt` in a render worker whenever a template runs (never for ``raw``).
build_generate_prompt = _bounded(render_generate_prompt, lambda r: not r.get("raw") and bool(
    r.get("template_override") or r.get("model_template") or r.get("gguf_chat_template")))


__all__ = [
    "PromptError",
    "TemplateError",
    "build_generate_prompt",
    "build_prompt",
    "ollama_template",
    "render_chat_prompt",
    "render_generate_prompt",
    "render_ollama_template",
    "validate_model_template",
]
