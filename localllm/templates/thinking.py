"""Thinking (reasoning) around the templates: the ``think`` setting, what each
kind of template receives for it, and the tags that mark a model's thinking.

``think`` is ``None`` (not set), ``True``/``False`` or a level (``"low"``,
``"medium"``, ``"high"``), as in Ollama's API. Go templates (a Modelfile
``TEMPLATE``) get Ollama's ``.Think``, ``.ThinkLevel`` and ``.IsThinkSet``;
Jinja templates (a GGUF's ``tokenizer.chat_template``) get ``enable_thinking``
and ``reasoning_effort``, the names Qwen3's and gpt-oss's templates read, and
assistant messages with thinking carry ``reasoning_content`` (Qwen3) besides
``thinking``.

A template supports thinking when it shows where thinking goes: Go templates
as Ollama's ``thinking.InferTags`` finds it (the text around ``.Thinking`` in
the range over ``.Messages``) or by reading ``.Think``/``.Thinking`` at all;
Jinja templates by writing a known tag pair, or by reading
``enable_thinking``/``reasoning_content``, or by splitting old answers at
``</think>``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from localllm.templates.gotemplate import GoTemplate

THINK_LEVELS = ("low", "medium", "high")
Think = bool | str | None


class ThinkingTags(NamedTuple):
    """The text a model writes around its thinking, e.g. ``<think>`` … ``</think>``."""

    opening: str
    closing: str

    def opened_by(self, prompt: str) -> bool:
        """Whether ``prompt`` already ends with the opening tag, so the answer starts inside the block."""
        return prompt.rstrip().endswith(self.opening)


DEFAULT_TAGS = ThinkingTags("<think>", "</think>")
_KNOWN_TAGS = (
    DEFAULT_TAGS,
    ThinkingTags("<seed:think>", "</seed:think>"),  # Seed-OSS
    ThinkingTags("[THINK]", "[/THINK]"),  # Magistral
    ThinkingTags("<|START_THINKING|>", "<|END_THINKING|>"),  # Command A Reasoning
    ThinkingTags("Here is my thought process:", "Here is my response:"),  # Granite 3.2
)
_JINJA_MARKERS = ("enable_thinking", "reasoning_content", ".split('</think>')", '.split("</think>")')


def check_think(value: object) -> Think:
    """``value`` if it is a valid ``think``; ValueError naming the problem otherwise."""
    if value is None or isinstance(value, bool) or value in THINK_LEVELS:
        return value  # type: ignore[return-value]
    raise ValueError(f"think: unknown value {value!r} (expected true, false, {', '.join(map(repr, THINK_LEVELS))})")


def go_think_values(think: Think) -> dict[str, Any]:
    """``.Think``, ``.ThinkLevel`` and ``.IsThinkSet`` as Ollama sets them (a bare ``true`` is level "medium")."""
    level = think if isinstance(think, str) else ("medium" if think else "")
    return {"Think": bool(think), "ThinkLevel": level, "IsThinkSet": think is not None}


def jinja_think_values(think: Think) -> dict[str, Any]:
    """``enable_thinking`` (and Granite's ``thinking``) when think is set, ``reasoning_effort`` when a level
    is given."""
    values: dict[str, Any] = {}
    if think is not None:
        values["enable_thinking"] = values["thinking"] = bool(think)
    if isinstance(think, str):
        values["reasoning_effort"] = think
    return values


def with_reasoning_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant messages with thinking also carry it as ``reasoning_content``, where Qwen3-style templates look."""
    return [
        {**m, "reasoning_content": m["thinking"]} if m.get("role") == "assistant" and m.get("thinking") else m
        for m in messages
    ]


def go_thinking_tags(template: GoTemplate) -> ThinkingTags | None:
    """The tags a Go template puts around thinking; the default pair if it reads ``.Think`` without showing them."""
    opening, closing = template.thinking_tags()
    if opening and closing:
        return ThinkingTags(opening, closing)
    return DEFAULT_TAGS if {"think", "thinking"} & template.identifiers() else None


def jinja_thinking_tags(source: str) -> ThinkingTags | None:
    """The tags a Jinja chat template writes around thinking; None when it has no place for thinking."""
    for tags in _KNOWN_TAGS:
        if tags.opening in source and tags.closing in source:
            return tags
    return DEFAULT_TAGS if any(marker in source for marker in _JINJA_MARKERS) else None
