"""Fitting a long chat into the model's context the way Ollama's ``chatPrompt`` does.

When the rendered conversation does not fit, whole turns are left out from
the oldest on, so the prompt keeps the template's shape (its markers, the
system prompt) instead of losing its first tokens to a cut:

- system messages are always kept, wherever they stood;
- the kept part starts at a user message (a tool call and its results, an
  assistant turn and the question it answers, go together), and always holds
  the last user message and everything after it;
- only when that is still too long is one message cut inside: the longest
  one kept, which loses its beginning (as Ollama's prompt cut keeps the most
  recent tokens), and the answer says so (:attr:`FittedPrompt.truncated`).

The prompt is fitted into the context less room for the answer (``num_predict``
tokens, at most a quarter of the context), so a long chat still gets an
answer rather than a context full after its first token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..images import MARKER
from .errors import bad_request
from .runner_client import Health, RunnerProcess

log = logging.getLogger("localllm.history")

#: Renders the prompt of a selection of the chat's messages with the runner's /health answer (BOS/EOS tokens).
SelectionRenderer = Callable[[Health, list[dict[str, Any]]], str]


@dataclass
class ChatHistory:
    """A chat's messages (template-shaped dicts) and how to render any selection of them."""

    messages: list[dict[str, Any]]
    render: SelectionRenderer


@dataclass
class FittedPrompt:
    """The prompt a chat gets: its text and tokens, and what was left out to fit."""

    text: str
    tokens: list[int] | None  # None: not tokenized (too short to need it)
    dropped: int = 0  # messages left out
    truncated: bool = False  # one message was cut inside
    images: list[str] = field(default_factory=list)  # of the messages kept, in the order of their markers

    @property
    def prompt(self) -> str | list[int]:
        """What the runner gets: the tokens where they were counted (no second tokenization), else the
        text (always, with images: the runner tokenizes them with libmtmd)."""
        return self.text if self.tokens is None or self.images else self.tokens


def answer_room(n_ctx: int, num_predict: int | None) -> int:
    """Tokens of the context kept free for the answer: ``num_predict``, at most a quarter of the context."""
    quarter = n_ctx // 4
    return quarter if num_predict is None or num_predict <= 0 else min(num_predict, quarter)


class _Counter:
    """Renders and tokenizes selections of a chat through the model's runner."""

    def __init__(self, history: ChatHistory, runner: RunnerProcess) -> None:
        self.history = history
        self.runner = runner

    async def render(self, messages: list[dict[str, Any]]) -> str:
        # A template (a stranger's code) may render for seconds: in a thread, the loop keeps answering.
        return await asyncio.to_thread(self.history.render, self.runner.health, messages)

    async def prompt(self, messages: list[dict[str, Any]]) -> tuple[str, list[int]]:
        text = await self.render(messages)
        return text, await self.runner.tokenize(text, prompt=True, images=images_of(messages))


def images_of(messages: list[dict[str, Any]]) -> list[str]:
    """The images of ``messages`` in the order their markers appear in the prompt."""
    return [image for m in messages for image in m.get("images", ())]


def _kept(messages: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """The system messages before ``start``, then every message from ``start`` on."""
    return [m for m in messages[:start] if m["role"] == "system"] + messages[start:]


async def fit_history(history: ChatHistory, runner: RunnerProcess, num_predict: int | None,
                      truncate: bool, num_ctx: int | None = None) -> FittedPrompt:
    """The chat's prompt within the request's context (``num_ctx``, else the runner's; see the module docstring).

    With ``truncate`` false nothing is left out, and a prompt over the
    context is a 400 naming both lengths. A context smaller than the
    system messages alone is a 400 naming both sizes.
    """
    counter = _Counter(history, runner)
    n_ctx = num_ctx or runner.health.n_ctx
    budget = n_ctx - answer_room(n_ctx, num_predict)
    messages = history.messages
    images = images_of(messages)
    text = await counter.render(messages)
    if len(text.encode("utf-8")) < budget and not images:  # a token holds at least a byte: it surely fits
        return FittedPrompt(text, None)
    tokens = await runner.tokenize(text, prompt=True, images=images)
    if len(tokens) <= budget:
        return FittedPrompt(text, tokens, images=images)
    if not truncate:
        if len(tokens) <= n_ctx:
            return FittedPrompt(text, tokens, images=images)
        raise bad_request(f"the chat's prompt is {len(tokens)} tokens, more than the context length of {n_ctx} "
                          "tokens, and truncate is false; shorten the chat, raise num_ctx, or allow truncation")
    await _check_system_fits(counter, messages, n_ctx)
    starts = [i for i, m in enumerate(messages) if m["role"] == "user" and i > 0]
    if not starts:  # nothing to leave out: the last message runs from the start
        return await _cut_inside(counter, messages, 0, budget, n_ctx)
    lo, hi = 0, len(starts) - 1  # find the first start whose prompt fits: keep as many turns as fit
    best: tuple[int, str, list[int]] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        text, tokens = await counter.prompt(_kept(messages, starts[mid]))
        if len(tokens) <= budget:
            best, hi = (starts[mid], text, tokens), mid - 1
        else:
            lo = mid + 1
    if best is None:
        return await _cut_inside(counter, messages, starts[-1], budget, n_ctx)
    start, text, tokens = best
    kept = _kept(messages, start)
    log.info("chat of %d messages over the context (%d tokens): left out the oldest %d", len(messages), n_ctx,
             len(messages) - len(kept))
    return FittedPrompt(text, tokens, dropped=len(messages) - len(kept), images=images_of(kept))


async def _check_system_fits(counter: _Counter, messages: list[dict[str, Any]], n_ctx: int) -> None:
    """The system messages are always kept: a context they alone overflow cannot hold the chat."""
    system = [m for m in messages if m["role"] == "system"]
    if not system:
        return
    _, tokens = await counter.prompt(system)
    check_system_tokens(len(tokens), n_ctx)


async def check_generate_system(render_system: Callable[[Health], str], prompt: str, runner: RunnerProcess,
                                num_ctx: int | None = None) -> None:
    """A plain prompt's system part (``/api/generate``'s ``system``) in the request's context: the runner cuts
    a long prompt, but a context the system part alone overflows is the request's 400, naming both sizes."""
    n_ctx = num_ctx or runner.health.n_ctx
    if len(prompt.encode("utf-8")) < n_ctx:  # a token holds at least a byte: the system part surely fits
        return
    text = await asyncio.to_thread(render_system, runner.health)
    check_system_tokens(len(await runner.tokenize(text, prompt=True)), n_ctx)


def check_system_tokens(n_system: int, n_ctx: int) -> None:
    """A 400 naming both sizes when the system part (always kept) overflows the context."""
    if n_system > n_ctx:
        raise bad_request(f"num_ctx {n_ctx} is smaller than the prompt's system part of {n_system} tokens; "
                          "raise num_ctx or shorten the system prompt")


async def _cut_inside(counter: _Counter, messages: list[dict[str, Any]], start: int, budget: int,
                      n_ctx: int) -> FittedPrompt:
    """Cut the beginning off the longest kept message until the prompt fits ``budget``."""
    kept = _kept(messages, start)
    longest = max(range(len(kept)), key=lambda i: len(kept[i].get("content") or ""))
    markers = MARKER * len(kept[longest].get("images", ()))  # its images stay: only its text is cut
    content = (kept[longest].get("content") or "")[len(markers):]

    def with_content(text: str) -> list[dict[str, Any]]:
        return [dict(m, content=markers + text) if i == longest else m for i, m in enumerate(kept)]

    _, frame = await counter.prompt(with_content(""))
    room = budget - len(frame)
    if room <= 0:
        images = images_of(kept)
        held = f" (with {len(images)} images, which are never cut)" if images else ""
        raise bad_request(f"the chat's prompt does not fit the context length of {n_ctx} tokens: without the text "
                          f"of its longest message it is still {len(frame)} tokens{held}; shorten it, send fewer "
                          "images or raise num_ctx")
    words = await counter.runner.tokenize(content, add_special=False, parse_special=False)
    for _ in range(4):  # a cut may tokenize a little longer at its edge: cut again by the excess
        tail = await counter.runner.detokenize(words[-room:]) if room > 0 else ""
        text, tokens = await counter.prompt(with_content(tail))
        if len(tokens) <= budget:
            log.warning("a message of %d tokens does not fit the context (%d tokens): kept its last %d",
                        len(words), n_ctx, room)
            return FittedPrompt(text, tokens, dropped=len(messages) - len(kept), truncated=True,
                                images=images_of(kept))
        room -= len(tokens) - budget
    raise bad_request(f"the chat's prompt could not be cut to fit the context length of {n_ctx} tokens")
