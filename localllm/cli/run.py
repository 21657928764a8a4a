"""What ``localllm run`` does around one generation: find or pull the model,
load it, stream an answer (and the model's thinking) with a spinner and word
wrap, stop cleanly on Ctrl+C, print ``--verbose`` statistics.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localllm.cli.display import AnswerPrinter, Spinner
from localllm.cli.format import stats_summary
from localllm.cli.image_paths import ImagePathError, PromptImages, extract_images, is_audio_path
from localllm.cli.progress import show_progress
from localllm.client import APIError, Client, DaemonError
from localllm.config import SettingsError, parse_duration
from localllm.registry.names import name_for_file


@dataclass
class RunOptions:
    """The state of a run or chat session (Ollama's ``runOptions``)."""

    model: str
    format: str | dict[str, Any] | None = None
    keep_alive: str | float | None = None
    wordwrap: bool = True
    verbose: bool = False
    system: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    loaded_messages: list[dict[str, Any]] = field(default_factory=list)
    parent_model: str = ""
    capabilities: list[str] = field(default_factory=list)
    think: bool | str | None = None  # None: not sent
    think_chosen: bool = False  # set by --think or /set (n)othink, else inferred from the model
    hide_thinking: bool = False

    def request(self, **body: Any) -> dict[str, Any]:
        """A generate/chat request body carrying the session's settings."""
        body["model"] = self.model
        if self.format:
            body["format"] = self.format
        if self.think is not None:
            body["think"] = self.think
        if self.options:
            body["options"] = dict(self.options)
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        return body

    def apply_show(self, info: dict[str, Any]) -> None:
        """Take what a session needs from the model's ``/api/show`` answer."""
        self.parent_model = str((info.get("details") or {}).get("parent_model") or "")
        self.loaded_messages = list(info.get("messages") or [])
        self.capabilities = [str(c) for c in info.get("capabilities") or []]
        if not self.think_chosen:  # as Ollama: a model that can think does, unless told otherwise
            self.think = True if "thinking" in self.capabilities else None


def parse_think(value: str) -> bool | str:
    """``--think=VALUE`` or ``/set think VALUE``: true, false or a level; ValueError otherwise."""
    from localllm.templates.thinking import THINK_LEVELS  # only here: the CLI starts without the template engines

    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    if text in THINK_LEVELS:
        return text
    raise ValueError(f"unknown think value {value!r} (must be true, false, {', '.join(THINK_LEVELS)})")


def parse_format(value: str | None) -> str | dict[str, Any] | None:
    """``--format``: ``json`` or a JSON schema object."""
    if not value:
        return None
    if value == "json":
        return "json"
    try:
        schema = json.loads(value)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise DaemonError(f"invalid --format {value!r}: use 'json' or a JSON schema object")
    return schema


def parse_keep_alive(value: str | None) -> str | float | None:
    """``--keepalive``: checked here, sent as the API takes it (number of seconds or ``"5m"``)."""
    if value is None or value == "":
        return None
    try:
        parse_duration(value)
    except SettingsError as exc:
        raise DaemonError(f"invalid --keepalive: {exc}") from None
    try:
        return float(value)
    except ValueError:
        return value


def ensure_model(client: Client, model: str) -> dict[str, Any]:
    """The model's ``/api/show`` answer, pulling it first when the daemon does not have it."""
    try:
        return client.show(model)
    except APIError as exc:
        if exc.status_code != 404:
            raise
    show_progress(client.pull(model))
    return client.show(model)


def register_file(client: Client, argument: str) -> str:
    """``localllm run ./model.gguf``: the file registered where it is (linked, not copied) under a name
    taken from it (``name_for_file``); returns that name.

    A model already made from this file is reused, and registered again if the
    file changed since (the daemon then answers 409 naming the file). A name
    taken by any other model is left alone: the error says how to pick another.
    """
    path = Path(os.path.abspath(Path(argument).expanduser()))
    if not path.is_file():
        raise DaemonError(f"no such file: {path}")
    name = name_for_file(path).display
    try:
        info = client.show(name)
    except APIError as exc:
        if exc.status_code != 404 and not (exc.status_code == 409 and str(path) in str(exc)):
            raise
    else:
        if modelfile_source(info) == str(path):
            return name
        raise DaemonError(f"a model named '{name}' already exists and was not made from {path}; register the "
                          f"file under a name of your choice: localllm create NAME -f Modelfile, with FROM {path}")
    show_progress(client.create({"model": name, "from": str(path)}))
    return name


def modelfile_source(info: dict[str, Any]) -> str | None:
    """What the FROM line of a ``show`` answer's Modelfile names (a linked model's file)."""
    for line in str(info.get("modelfile") or "").splitlines():
        if line.startswith("FROM "):
            return line.removeprefix("FROM ").strip()
    return None


def load_model(client: Client, opts: RunOptions) -> None:
    """Load (or with ``keep_alive`` 0 unload) the model: a generate request without a prompt."""
    spinner = Spinner()
    try:
        for _ in client.generate(opts.request()):
            pass
    finally:
        spinner.stop()


def stream_reply(events: Iterator[dict[str, Any]], printer: AnswerPrinter, chat: bool) -> dict[str, Any] | None:
    """Print a streamed answer; returns the final (``done``) object, or ``None`` if Ctrl+C stopped it.

    Events are the daemon's stream: chat events carry ``message.content`` and
    ``message.thinking``, generate events ``response`` and ``thinking``. The
    spinner keeps turning while thinking streams unseen. Leaving the stream
    closes the connection, which tells the daemon to stop generating at once.
    """
    spinner = Spinner()
    final: dict[str, Any] | None = None
    try:
        for event in events:
            delta = (event.get("message") or {}) if chat else event
            thinking, piece = delta.get("thinking") or "", delta.get("content" if chat else "response") or ""
            if piece or (thinking and printer.show_thinking):
                spinner.stop()
            printer.think(thinking)
            if delta.get("tool_calls"):
                printer.end_thinking()
            printer.write(piece)
            if event.get("done"):
                final = event
        printer.end_thinking()
    except KeyboardInterrupt:
        return None
    finally:
        spinner.stop()
        printer.stop()
    return final or {}


def print_stats(final: dict[str, Any] | None, verbose: bool) -> None:
    if verbose and final:
        sys.stderr.write(stats_summary(final))
        sys.stderr.flush()


def prompt_images(opts: RunOptions, prompt: str) -> PromptImages:
    """The images (and audio files) a prompt names by path, for a model that can see (or hear), said on
    stderr as each is added; a file that cannot be sent is a DaemonError naming it. Other models get the
    prompt as typed."""
    try:
        found = extract_images(prompt, "vision" in opts.capabilities, "audio" in opts.capabilities)
    except ImagePathError as exc:
        raise DaemonError(str(exc)) from None
    for path in found.paths:
        sys.stderr.write(f"Added {'audio' if is_audio_path(path) else 'image'} '{path}'\n")
    return found


def run_once(client: Client, opts: RunOptions, prompt: str) -> None:
    """Answer one prompt on stdout (``localllm run MODEL PROMPT`` or piped input)."""
    if not prompt:
        load_model(client, opts)
        return
    found = prompt_images(opts, prompt)
    images = {"images": found.images} if found.images else {}
    printer = AnswerPrinter(wrap=opts.wordwrap, show_thinking=not opts.hide_thinking)
    final = stream_reply(client.generate(opts.request(prompt=found.prompt, **images)), printer, chat=False)
    sys.stdout.write("\n\n" if sys.stdout.isatty() else "\n")
    sys.stdout.flush()
    print_stats(final, opts.verbose)
