"""The interactive chat of ``localllm run MODEL`` (Ollama's ``generateInteractive``).

Line editing and history come from Python's ``readline``; the history file
lives in the state directory so it is kept across sessions. Ctrl+C stops a
generation (or clears the line being typed) without leaving; Ctrl+D or
``/bye`` leaves.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from localllm.cli.display import AnswerPrinter, StreamPrinter
from localllm.cli.format import show_info
from localllm.cli.run import RunOptions, load_model, parse_think, print_stats, prompt_images, stream_reply
from localllm.client import APIError, Client, DaemonError
from localllm.registry.modelfile import ModelfileError, convert_parameters

try:
    import readline
except ImportError:  # Windows without pyreadline: plain input(), no history
    readline = None  # type: ignore[assignment]

PROMPT = ">>> "
ALT_PROMPT = "... "
HISTORY_LENGTH = 1000

HELP = """Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message.
"""

HELP_SET = """Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set wordwrap          Enable wordwrap
  /set nowordwrap        Disable wordwrap
  /set format json       Enable JSON mode
  /set noformat          Disable formatting
  /set think [level]     Enable thinking (level: low, medium or high)
  /set nothink           Disable thinking
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
"""

HELP_SHOW = """Available Commands:
  /show info         Show details for this model
  /show license      Show model license
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template
"""

HELP_PARAMETERS = """Available Parameters:
  /set parameter seed <int>             Random number seed
  /set parameter num_predict <int>      Max number of tokens to predict
  /set parameter top_k <int>            Pick from top k num of tokens
  /set parameter top_p <float>          Pick token based on sum of probabilities
  /set parameter min_p <float>          Pick token based on top token probability * min_p
  /set parameter num_ctx <int>          Set the context size
  /set parameter temperature <float>    Set creativity level
  /set parameter repeat_penalty <float> How strongly to penalize repetitions
  /set parameter repeat_last_n <int>    Set how far back to look for repetitions
  /set parameter num_gpu <int>          The number of layers to send to the GPU
  /set parameter stop <string> <string> ...   Set the stop parameters
"""

HELP_SHORTCUTS = """Available keyboard shortcuts:
  Ctrl + a            Move to the beginning of the line (Home)
  Ctrl + e            Move to the end of the line (End)
   Alt + b            Move back (left) one word
   Alt + f            Move forward (right) one word
  Ctrl + k            Delete the sentence after the cursor
  Ctrl + u            Delete the sentence before the cursor
  Ctrl + w            Delete the word before the cursor

  Ctrl + l            Clear the screen
  Ctrl + c            Stop the model from responding
  Ctrl + d            Exit localllm (/bye)
"""


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class History:
    """The readline history file, read at start and appended to after every line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if readline is None:
            return
        readline.set_history_length(HISTORY_LENGTH)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                readline.read_history_file(path)
        except OSError as exc:
            _err(f"warning: could not read the history file {path}: {exc.strerror}")

    def save(self) -> None:
        if readline is None:
            return
        try:
            readline.write_history_file(self.path)
        except OSError as exc:
            _err(f"warning: could not write the history file {self.path}: {exc.strerror}")


class _Leave(Exception):
    """Ctrl+D or /bye."""


class ChatRepl:
    """One interactive chat session with a model."""

    def __init__(self, client: Client, opts: RunOptions, history_file: Path) -> None:
        self.client = client
        self.opts = opts
        self.history = History(history_file)

    def run(self) -> None:
        """Read and answer lines until Ctrl+D or /bye."""
        self._replay_loaded_messages()
        try:
            while True:
                try:
                    line = input(PROMPT)
                except KeyboardInterrupt:
                    print("\nUse Ctrl + d or /bye to exit.")
                    continue
                try:
                    self.handle(line)
                except KeyboardInterrupt:  # Ctrl+C inside a multi-line entry: drop it
                    print()
        except EOFError:
            print()
        except _Leave:
            pass
        finally:
            self.history.save()

    def _replay_loaded_messages(self) -> None:
        for message in self.opts.loaded_messages:
            if message.get("role") == "user":
                print(f"{PROMPT}{message.get('content', '')}")
            elif message.get("role") == "assistant":
                StreamPrinter(wrap=self.opts.wordwrap).write(str(message.get("content", "")))
                print("\n")

    def _read_multiline(self, first: str) -> str:
        """The rest of a ``\"\"\"`` block whose first line (after the quotes) is ``first``."""
        if first.endswith('"""'):
            return first[:-3]
        parts = [first] if first else []
        while True:
            line = input(ALT_PROMPT)
            if line.endswith('"""'):
                if line[:-3]:
                    parts.append(line[:-3])
                return "\n".join(parts)
            parts.append(line)

    def handle(self, line: str) -> None:
        """Act on one line typed at the prompt (a command or a message)."""
        if line.startswith('"""'):
            self.send(self._read_multiline(line[3:]))
            return
        words = line.split()
        if not words:
            return
        command = words[0]
        if command in ("/bye", "/exit"):
            raise _Leave
        if command in ("/?", "/help"):
            topic = words[1].lstrip("/") if len(words) > 1 else ""
            text = {"set": HELP_SET, "show": HELP_SHOW, "shortcut": HELP_SHORTCUTS, "shortcuts": HELP_SHORTCUTS}
            _err(text.get(topic, HELP))
        elif command == "/set":
            self._set(line, words)
        elif command == "/show":
            self._show(words)
        elif command == "/load":
            self._load(words)
        elif command == "/save":
            self._save(words)
        elif command == "/clear":
            self.opts.messages = [{"role": "system", "content": self.opts.system}] if self.opts.system else []
            print("Cleared session context")
        elif command.startswith("/"):
            print(f"Unknown command '{command}'. Type /? for help")
        else:
            self.send(line)

    def _set(self, line: str, words: list[str]) -> None:
        if len(words) < 2:
            _err(HELP_SET)
            return
        what = words[1]
        opts = self.opts
        if what in ("wordwrap", "nowordwrap"):
            opts.wordwrap = what == "wordwrap"
            print(f"Set '{what}' mode.")
        elif what in ("verbose", "quiet"):
            opts.verbose = what == "verbose"
            print(f"Set '{what}' mode.")
        elif what == "format":
            if len(words) < 3 or words[2] != "json":
                print("Invalid or missing format. For 'json' mode use '/set format json'")
            else:
                opts.format = "json"
                print("Set format to 'json' mode.")
        elif what == "noformat":
            opts.format = None
            print("Disabled format.")
        elif what in ("think", "nothink"):
            self._set_think(what, words[2] if what == "think" and len(words) > 2 else None)
        elif what == "parameter":
            if len(words) < 4:
                _err(HELP_PARAMETERS)
                return
            try:  # typed as Modelfile PARAMETERs are: the daemon rejects a wrong JSON type
                opts.options.update(convert_parameters((words[2], value) for value in words[3:]))
            except ModelfileError as exc:
                print(f"Couldn't set parameter: {exc}")
                return
            print(f"Set parameter '{words[2]}' to '{', '.join(words[3:])}'")
        elif what == "system":
            text = line.split("system", 1)[1].strip()
            if not text:
                _err(HELP_SET)
                return
            if text.startswith('"""'):
                text = self._read_multiline(text[3:])
            self._set_system(text)
        else:
            print(f"Unknown command '/set {what}'. Type /? for help")

    def _set_think(self, what: str, level: str | None) -> None:
        """``/set think [level]`` or ``/set nothink``; warns, as Ollama does, when the model cannot think."""
        try:
            think = parse_think(level) if level else what == "think"
        except ValueError as exc:
            print(f"Couldn't set think: {exc}")
            return
        self.opts.think, self.opts.think_chosen = think, True
        if "thinking" not in self.opts.capabilities:
            _err(f'warning: model "{self.opts.model}" does not support thinking output')
        print(f"Set '{what}' mode to '{level}'." if level else f"Set '{what}' mode.")

    def _set_system(self, text: str) -> None:
        """Replace a trailing system message or add one, as Ollama does."""
        self.opts.system = text
        message = {"role": "system", "content": text}
        if self.opts.messages and self.opts.messages[-1].get("role") == "system":
            self.opts.messages[-1] = message
        else:
            self.opts.messages.append(message)
        print("Set system message.")

    def _show(self, words: list[str]) -> None:
        if len(words) < 2:
            _err(HELP_SHOW)
            return
        try:
            info = self.client.show(self.opts.model)
        except DaemonError as exc:
            print(f"error: couldn't get model: {exc}")
            return
        what = words[1]
        if what == "info":
            _err(show_info(info).rstrip("\n") + "\n")
        elif what == "license":
            print(info.get("license") or "No license was specified for this model.")
        elif what == "modelfile":
            print(info.get("modelfile", ""))
        elif what == "parameters":
            self._show_parameters(info)
        elif what == "system":
            system = self.opts.system or info.get("system") or ""
            print(system + "\n" if system else "No system message was specified for this model.")
        elif what == "template":
            print(info.get("template") or "No prompt template was specified for this model.")
        else:
            print(f"Unknown command '/show {what}'. Type /? for help")

    def _show_parameters(self, info: dict[str, Any]) -> None:
        print("Model defined parameters:")
        parameters = str(info.get("parameters") or "")
        if not parameters:
            print("  No additional parameters were specified for this model.")
        for line in parameters.splitlines():
            print(f"  {line}")
        print()
        if self.opts.options:
            print("User defined parameters:")
            for name, value in self.opts.options.items():
                print(f"  {name:<30} {value}")
            print()

    def _load(self, words: list[str]) -> None:
        if len(words) != 2:
            print("Usage:\n  /load <modelname>")
            return
        name = words[1]
        print(f"Loading model '{name}'")
        try:
            info = self.client.show(name)
            candidate = replace(self.opts, model=name, messages=[], system="")
            candidate.apply_show(info)
            load_model(self.client, candidate)
        except APIError as exc:
            if exc.status_code == 404 or "not found" in str(exc):
                print(f"Couldn't find model '{name}'")
            else:
                print(f"error: {exc}")
            return
        self.opts = candidate

    def _save(self, words: list[str]) -> None:
        if len(words) != 2:
            print("Usage:\n  /save <modelname>")
            return
        opts = self.opts
        body: dict[str, Any] = {"model": words[1], "from": opts.parent_model or opts.model}
        if opts.system:
            body["system"] = opts.system
        if opts.options:
            body["parameters"] = dict(opts.options)
        messages = opts.loaded_messages + opts.messages
        if messages:
            body["messages"] = messages
        try:
            for _ in self.client.create(body):
                pass
        except DaemonError as exc:
            print(f"error: {exc}")
            return
        print(f"Created new model '{words[1]}'")

    def send(self, text: str) -> None:
        """Send a user message and stream the assistant's answer."""
        opts = self.opts
        try:
            found = prompt_images(opts, text)
        except DaemonError as exc:
            print(f"Error: {exc}\n")
            return
        images = {"images": found.images} if found.images else {}
        opts.messages.append({"role": "user", "content": found.prompt, **images})
        printer = AnswerPrinter(wrap=opts.wordwrap, show_thinking=not opts.hide_thinking)
        try:
            final = stream_reply(self.client.chat(opts.request(messages=list(opts.messages))), printer, chat=True)
        except DaemonError as exc:
            opts.messages.pop()
            print(f"\nError: {exc}\n" if printer.content else f"Error: {exc}\n")
            return
        if final is None:  # stopped by Ctrl+C: forget the unanswered question
            opts.messages.pop()
            print("\n")
            return
        answer = {"role": "assistant", "content": printer.content}
        if printer.thinking:
            answer["thinking"] = printer.thinking
        opts.messages.append(answer)
        print("\n")
        print_stats(final, opts.verbose)
