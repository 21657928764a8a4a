"""Running one turn of the conversation core on a model: the one place between the
dialects and inference (Ollama's ``ChatHandler``).

A turn is prepared first (model, options, tools, thinking, constraint; every
problem is a 400 before anything streams), then opened: the runner's events
become :mod:`~localllm.server.conversation` deltas, split by the
:class:`~localllm.server.output_parser.OutputParser` as they arrive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..registry.models import LocalModel
from ..templates import prompt as prompts
from ..templates.families import HARMONY
from ..templates.thinking import ThinkingTags
from .conversation import (
    Answer, ChatTurn, Content, Delta, Failure, Final, Message, Thinking, ThinkSetting, ToolCallDelta,
    template_messages,
)
from .errors import ApiError, bad_request
from .harmony_names import HarmonyNames
from .history import ChatHistory, images_of
from .inference import CompletionJob, Inference, PromptRenderer, constrain_tool_calls, template_errors_as_400
from .limits import check_request
from .output_parser import OutputParser, ParserSetup
from .runner_client import Health
from .tool_grammar import ToolUse
from .vision import check_images

@dataclass
class PreparedTurn:
    """A turn checked and resolved, ready to run."""

    job: CompletionJob
    render: PromptRenderer
    think: ThinkSetting = None
    tool_use: ToolUse | None = None
    parser_setup: ParserSetup = field(default_factory=ParserSetup)
    history: ChatHistory | None = None  # a chat's messages: older ones are left out when they do not fit
    forced_call: str | None = None  # a tool_choice that makes the answer one call from its first token
    # (no thinking first): "required" or the function's name
    system_render: PromptRenderer | None = None  # a plain prompt's system part alone (never cut to fit)


@dataclass
class PromptNotes:
    """What fitting the prompt into the context did, for the answer to report."""

    truncated: bool = False  # a message (or a plain prompt) was cut inside


def thinking_tags(model: LocalModel, think: ThinkSetting) -> ThinkingTags | None:
    """The thinking block's tags to look for, after checking ``think`` against the model.

    Asking a model that cannot think to think is a 400 (Ollama's answer);
    ``think: false`` still looks for the block, so that a model that always
    thinks has it dropped from the answer rather than mixed into it.
    """
    tags = model.thinking_tags
    if think not in (None, False) and tags is None:
        raise bad_request(f"{model.name.display!r} does not support thinking")
    return tags


def format_markers(model: LocalModel) -> tuple[str, ...]:
    """The markers the parser reads in this model's output, which the runner must spell out even
    where they are control tokens (gpt-oss's ``<|channel|>``, Mistral's ``[TOOL_CALLS]``)."""
    return tuple(dict.fromkeys([*model.chat_format.markers, *(model.thinking_tags or ())]))


def check_tool_results(messages: list[Message]) -> None:
    """A tool result naming a call id must answer a call made earlier in the conversation."""
    known: set[str] = set()
    for index, message in enumerate(messages):
        known.update(call.id for call in message.tool_calls if call.id)
        if message.role == "tool" and message.tool_call_id and message.tool_call_id not in known:
            raise bad_request(f"messages[{index}]: tool result for unknown tool call id {message.tool_call_id!r}")


def apply_tool_choice(job: CompletionJob, tool_use: ToolUse | None, choice: str,
                      parallel: bool = True) -> ToolUse | None:
    """``none`` drops the tools; ``required`` or a function name forces one call from the first
    token; ``auto`` constrains the calls the model chooses to write (to one, unless ``parallel``)."""
    if tool_use is None and choice not in ("auto", "none"):
        raise bad_request(f"tool_choice {choice!r} needs tools, and the request offers none")
    if tool_use is None or choice == "none":
        return None
    if choice == "auto":
        if not constrain_tool_calls(job, tool_use, parallel) and not parallel:
            raise bad_request("parallel_tool_calls false cannot be honoured for this request: its tool calls "
                              "are not held by a grammar (an output format is set, or a tool's schema cannot "
                              "be expressed); use tool_choice required or a function name, which make one call")
    else:
        job.grammar, job.json_schema = tool_use.forced_grammar(forced_name(choice)), None
    return tool_use


def forced_name(choice: str) -> str | None:
    """The function a forced ``tool_choice`` names (None for ``required``: any of the tools)."""
    return None if choice == "required" else choice


class ChatHandler:
    """Prepares and runs turns for every dialect."""

    def __init__(self, inference: Inference) -> None:
        self.inference = inference

    # -- preparing ---------------------------------------------------------------------

    def prepare(self, turn: ChatTurn) -> PreparedTurn:
        """Resolve and check a chat turn; every problem is an :class:`ApiError` raised here."""
        limits = self.inference.settings.limits
        check_request(limits, texts=[m.content for m in turn.messages], messages=len(turn.messages),
                      tools=turn.tools, constraint=turn.constraint.json_schema or turn.constraint.grammar
                      or turn.grammar)
        job = self.inference.job(turn.model, turn.options, turn.keep_alive, turn.constraint, turn.grammar)
        job.shift, job.truncate = turn.shift, turn.truncate
        job.preserved_tokens = format_markers(job.model)
        self.inference.want_logprobs(job, turn.logprobs, turn.top_logprobs)
        model = job.model
        check_images(model, ((f"messages[{i}].images[{j}]", data) for i, m in enumerate(turn.messages)
                             for j, data in enumerate(m.images)))
        check_tool_results(turn.messages)
        names = HarmonyNames.of(turn.tools) if model.chat_format is HARMONY and turn.tools else None
        if names is not None and names.renames:  # names gpt-oss can write (harmony_names.py)
            turn = names.apply(turn)
        tool_use = apply_tool_choice(job, ToolUse.for_model(model, turn.tools), turn.tool_choice,
                                     turn.parallel_tool_calls)
        messages = template_messages(turn.messages)
        tools = tool_use.tools if tool_use else None

        def render(health: Health, kept: list[dict[str, Any]]) -> str:
            with template_errors_as_400(model):
                return prompts.build_prompt(
                    messages=kept, system=model.system, model_template=model.template,
                    gguf_chat_template=model.chat_template, bos_token=health.bos,
                    eos_token=health.eos, tools=tools, think=turn.think, renderer=model.format_names[1],
                )

        history = ChatHistory(model.messages + messages, render)
        setup = ParserSetup(format=model.chat_format, thinking_tags=thinking_tags(model, turn.think),
                            tools=tool_use.schemas if tool_use else {},
                            client_names=names.to_user if names is not None else {})
        forced = turn.tool_choice if tool_use is not None and turn.tool_choice != "auto" else None
        return PreparedTurn(job, lambda health: render(health, history.messages), turn.think, tool_use, setup,
                            history, forced_call=forced)

    def prepare_generate(self, job: CompletionJob, render: PromptRenderer, think: ThinkSetting,
                         system_render: PromptRenderer | None = None) -> PreparedTurn:
        """A completion of a plain prompt (``/api/generate``): thinking is split out, no tools;
        ``system_render`` renders its system part alone, which a context must hold."""
        setup = ParserSetup(format=job.model.chat_format, thinking_tags=thinking_tags(job.model, think))
        job.preserved_tokens = format_markers(job.model)
        return PreparedTurn(job, render, think, None, setup, system_render=system_render)

    # -- running -----------------------------------------------------------------------

    async def open(self, turn: PreparedTurn) -> "DeltaStream":
        """The turn's deltas, ending in one :class:`Final` or :class:`Failure`.

        Waits for the runner's first event, so a failure to load or to render
        the prompt is raised here as an :class:`ApiError`, before a dialect
        has sent anything.
        """
        lease = await self.inference.lease(turn.job)
        notes = PromptNotes()
        if turn.history is None:
            prompt: str | list[int] = await lease.render(turn.render)
            text = prompt
            if turn.system_render is not None:
                await lease.check_system(turn.system_render, prompt)
        else:  # a chat: older messages are left out (or one is cut) to fit the context
            fitted = await lease.fit(turn.history)
            prompt, text, notes.truncated = fitted.prompt, fitted.text, fitted.truncated
            turn.job.images = fitted.images
        setup = turn.parser_setup
        if setup.thinking_tags and turn.think is not False and not turn.forced_call:
            # A template that opens the block itself leaves the answer inside it (unless a forced
            # call takes the answer from its first token).
            setup = replace(setup, starts_thinking=setup.thinking_tags.opened_by(text))
        if setup.format.answer_start and isinstance(text, str) and text.endswith(setup.format.answer_start):
            setup = replace(setup, continues_header=True)
            if turn.forced_call and turn.tool_use:  # the call goes on the header the prompt ends with
                turn.job.grammar = turn.tool_use.forced_grammar(forced_name(turn.forced_call),
                                                                setup.format.answer_start)
        events = lease.complete(prompt)
        first = await anext(events)  # a failure to start is raised here, before a dialect sends anything
        deltas = self._deltas(first, events, OutputParser(setup), turn.think is False, notes)
        return DeltaStream(deltas, events, notes)

    async def count_tokens(self, turn: PreparedTurn) -> int:
        """The tokens of the prompt the turn would send (Anthropic's ``count_tokens``), its images' too."""
        images = images_of(turn.history.messages) if turn.history else []
        return await self.inference.count_prompt_tokens(turn.job, turn.render, images)

    async def answer(self, turn: PreparedTurn) -> Answer:
        """The whole answer of a turn (clients that did not ask for a stream)."""
        return await gather(await self.open(turn))

    @staticmethod
    async def _deltas(first: dict[str, Any], events: AsyncIterator[dict[str, Any]],
                      parser: OutputParser, drop_thinking: bool, notes: PromptNotes) -> AsyncIterator[Delta]:
        logprobs: list[dict[str, Any]] = []  # of text the parser holds back
        answer_logprobs: list[dict[str, Any]] = []  # of the answer's text: thinking and calls have none

        def passed_on(deltas: list[Delta]) -> list[Delta]:
            """``deltas`` to send; the pending log-probabilities go with the answer text among them,
            and are dropped when the text they were for turned out to be thinking or a call."""
            nonlocal logprobs
            content = next((d for d in deltas if isinstance(d, Content)), None)
            if content is not None and logprobs:
                content.logprobs, logprobs = logprobs, []
                answer_logprobs.extend(content.logprobs)
            elif any(isinstance(d, (Thinking, ToolCallDelta)) for d in deltas):
                logprobs = []
            return [d for d in deltas if not (drop_thinking and isinstance(d, Thinking))]

        async def runner_events() -> AsyncIterator[dict[str, Any]]:
            yield first
            async for event in events:
                yield event

        try:
            async for event in runner_events():
                if "error" in event:
                    yield Failure(event["error"])
                    return
                logprobs += event.get("logprobs", ())
                if not event.get("done"):
                    for delta in passed_on(parser.feed(event.get("content", ""))):
                        yield delta
                    continue
                for delta in passed_on(parser.finish(cut_off=event.get("done_reason") == "length")):
                    yield delta
                if logprobs:  # of tokens that wrote no text (the end of generation)
                    answer_logprobs.extend(logprobs)
                    yield Content("", logprobs)
                reason = "tool_calls" if parser.calls_made else event.get("done_reason", "stop")
                metrics = {k: v for k, v in event.items() if isinstance(v, int) and not isinstance(v, bool)}
                notes.truncated = notes.truncated or bool(event.get("truncated"))  # the runner cut a plain prompt
                yield Final(reason=reason, stop_sequence=event.get("stop_sequence"), metrics=metrics,
                            context=event.get("context", []), logprobs=answer_logprobs,
                            truncated=notes.truncated)
                return
            yield Failure("model runner ended the answer early")
        finally:
            await events.aclose()


class DeltaStream:
    """A turn's deltas (iterate it once); closing it ends the runner stream even when no delta was read.

    ``notes`` says already, before the first delta, whether a chat's prompt was cut to fit.
    """

    def __init__(self, deltas: AsyncIterator[Delta], events: AsyncIterator[dict[str, Any]],
                 notes: PromptNotes) -> None:
        self._deltas = deltas
        self._events = events
        self.notes = notes

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._deltas

    async def aclose(self) -> None:
        await self._deltas.aclose()
        await self._events.aclose()


async def gather(deltas: AsyncIterator[Delta]) -> Answer:
    """Collect a delta stream into one :class:`Answer`; a failure is a 500."""
    answer = Answer()
    async for delta in deltas:
        if isinstance(delta, Content):
            answer.content += delta.text
        elif isinstance(delta, Thinking):
            answer.thinking += delta.text
        elif isinstance(delta, ToolCallDelta):
            answer.tool_calls.append(delta.call)
        elif isinstance(delta, Final):
            answer.final = delta
        elif isinstance(delta, Failure):
            raise ApiError(500, delta.message)
    return answer
