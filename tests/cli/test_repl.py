"""The chat REPL of ``localllm run MODEL``, driven through a pseudo-terminal."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.cli import CliEnv, PtySession, write_ollama_model

from localllm.cli.display import StreamPrinter

PROMPT = r"(?m)^>>> $"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Iterator[CliEnv]:
    cli = CliEnv(tmp_path_factory.mktemp("repl"))
    write_ollama_model(cli.models_dir, smollm2_path)
    process = cli.start_daemon()
    yield cli
    process.terminate()
    cli.kill_daemons()


def ask(repl: PtySession, line: str, *patterns: str, timeout: float = 60) -> None:
    """Type a line as a person would, after the prompt; expect each pattern in turn, then the prompt."""
    repl.sendline(line)
    for pattern in patterns:
        repl.expect(pattern, timeout=timeout)
    repl.expect(PROMPT, timeout=timeout)


@pytest.fixture
def repl(env: CliEnv) -> Iterator[PtySession]:
    session = PtySession(env, "run", "smollm2:135m")
    try:
        session.expect(PROMPT, timeout=120)
        yield session
    finally:
        session.close()


def test_settings_commands(repl: PtySession) -> None:
    ask(repl, "/set parameter temperature 0", r"Set parameter 'temperature' to '0'")
    ask(repl, "/set parameter num_predict 8", r"Set parameter 'num_predict' to '8'")
    ask(repl, "/set parameter temperature warm",
        r"Couldn't set parameter: invalid float value for parameter 'temperature': 'warm'")
    ask(repl, "/set parameter no_such_option 1", r"Couldn't set parameter: unknown parameter 'no_such_option'")
    ask(repl, "/set system You are a pirate.", r"Set system message\.")
    ask(repl, "/show system", r"(?m)^You are a pirate\.")
    repl.sendline('/set system """You are')
    repl.expect(r"(?m)^\.\.\. ")
    ask(repl, 'a cat."""', r"Set system message\.")
    ask(repl, "/show system", r"(?m)^You are\r?\na cat\.")
    ask(repl, "/show parameters", r"Model defined parameters:", r"User defined parameters:", r"temperature\s+0\.0")
    ask(repl, "/show info", r"architecture\s+llama", r"quantization\s+Q4_1")
    ask(repl, "/show template", r"im_start")
    ask(repl, "/show modelfile", r"(?m)^FROM ")
    ask(repl, "/show license", r"\S")
    ask(repl, "/show nonsense", r"Unknown command '/show nonsense'")
    ask(repl, "/set format json", r"Set format to 'json' mode\.")
    ask(repl, "/set noformat", r"Disabled format\.")
    ask(repl, "/set", r"/set system <string>")
    ask(repl, "/frobnicate", r"Unknown command '/frobnicate'")
    ask(repl, "/?", r"/bye\s+Exit")
    ask(repl, "/? shortcuts", r"Ctrl \+ c\s+Stop the model from responding")
    repl.sendline("/bye")
    assert repl.wait() == 0


def test_think_settings(repl: PtySession) -> None:
    ask(repl, "/set think high", r'warning: model "smollm2:135m" does not support thinking output',
        r"Set 'think' mode to 'high'\.")
    ask(repl, "/set think extreme",
        r"Couldn't set think: unknown think value 'extreme' \(must be true, false, low, medium, high\)")
    ask(repl, "/set nothink", r"Set 'nothink' mode\.")


def test_chat_verbose_multiline_clear_and_save(env: CliEnv, repl: PtySession) -> None:
    ask(repl, "/set parameter num_predict 8", r"Set parameter")
    ask(repl, "/set verbose", r"Set 'verbose' mode\.")
    ask(repl, "Say hello.", r"eval rate:\s+[\d.]+ tokens/s", timeout=120)
    repl.sendline('"""Name')
    repl.expect(r"(?m)^\.\.\. ")
    repl.sendline("a color.")
    repl.expect(r"(?m)^\.\.\. ")
    ask(repl, '"""', r"eval count:\s+\d+ token\(s\)", timeout=120)
    ask(repl, "/set quiet", r"Set 'quiet' mode\.")
    ask(repl, "/save repl-saved", r"Created new model 'repl-saved'")
    ask(repl, "/clear", r"Cleared session context")
    repl.send("\x04")  # Ctrl+D leaves
    assert repl.wait() == 0

    info = httpx.post(env.base_url + "/api/show", json={"model": "repl-saved"}, timeout=30).json()
    contents = [m["content"] for m in info.get("messages", [])]
    assert "Say hello." in contents
    assert "Name\na color." in contents
    assert "num_predict" in info.get("parameters", "")
    history = (env.state_dir / "history").read_text()
    assert "/set verbose" in history and "Say hello." in history


def test_history_is_kept_across_sessions(env: CliEnv) -> None:
    first = PtySession(env, "run", "smollm2:135m")
    try:
        first.expect(PROMPT, timeout=120)
        ask(first, "/set wordwrap", r"Set 'wordwrap' mode\.")
        first.sendline("/bye")
        assert first.wait() == 0
    finally:
        first.close()
    second = PtySession(env, "run", "smollm2:135m")
    try:
        second.expect(PROMPT, timeout=120)
        second.send("\x1b[A")  # arrow up recalls the last line of the previous session
        second.expect(r"/bye")
        second.send("\x1b[A")
        second.expect(r"set wordwrap")
        second.send("\r")
        second.expect(r"Set 'wordwrap' mode\.")
    finally:
        second.close()


def test_ctrl_c_stops_generation_without_leaving(repl: PtySession) -> None:
    ask(repl, "/set parameter num_predict 4000", r"Set parameter")
    ask(repl, "/set parameter temperature 0", r"Set parameter")  # greedy: the story cannot end by chance at once
    repl.sendline("Write a very long story about a dragon.")
    repl.expect(r"dragon\.\s*\n")  # the line itself
    repl.expect(r"\w+ \w+ \w+ \w+", timeout=120)  # words of the answer are streaming
    repl.send("\x03")
    repl.expect(PROMPT, timeout=30)
    repl.wait_reading_keys()
    repl.send("\x03")  # at the prompt: a hint, still no exit
    repl.expect(r"Use Ctrl \+ d or /bye to exit\.")
    repl.expect(PROMPT)
    ask(repl, "/set quiet", r"Set 'quiet' mode\.")  # still answering
    repl.sendline("/bye")
    assert repl.wait() == 0


def test_load_switches_model(env: CliEnv, repl: PtySession) -> None:
    created = httpx.post(env.base_url + "/api/create", timeout=60, json={
        "model": "other", "from": "smollm2:135m", "system": "You are the other model.", "stream": False})
    assert created.status_code == 200, created.text
    ask(repl, "/load no-such-model", r"Couldn't find model 'no-such-model'")
    ask(repl, "/show system", r"No system message was specified for this model\.")
    ask(repl, "/load other", r"Loading model 'other'")
    ask(repl, "/show system", r"(?m)^You are the other model\.")
    repl.sendline("/bye")
    assert repl.wait() == 0


def test_run_without_tty_and_without_prompt_only_loads(env: CliEnv) -> None:
    result = env.run("run", "smollm2:135m")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    loaded = httpx.get(env.base_url + "/api/ps", timeout=30).json()["models"]
    assert any(m["name"] == "smollm2:135m" for m in loaded), json.dumps(loaded)


class _Terminal(io.StringIO):
    """What a terminal shows for the text the printer writes (cursor-left, clear-to-end, newline)."""

    def isatty(self) -> bool:
        return True

    def screen(self) -> list[str]:
        lines: list[list[str]] = [[]]
        col = 0
        text = self.getvalue()
        i = 0
        while i < len(text):
            escape = re.match(r"\x1b\[(\d*)([DK])", text[i:])
            if escape:
                if escape.group(2) == "D":
                    col -= int(escape.group(1))
                else:
                    del lines[-1][col:]
                i += escape.end()
                continue
            if text[i] == "\n":
                lines.append([])
                col = 0
            elif col < len(lines[-1]):
                lines[-1][col] = text[i]
                col += 1
            else:
                lines[-1].append(text[i])
                col += 1
            i += 1
        return ["".join(line).rstrip() for line in lines]


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_word_wrap_breaks_between_words(chunk: int) -> None:
    text = ("The quick brown fox jumps over the lazy dog and keeps running far away into the distant hills.\n"
            "Short line. Averyveryveryverylongwordthatdoesnotfitonanyline ok.")
    terminal = _Terminal()
    printer = StreamPrinter(out=terminal, wrap=True)
    printer.width = 30
    for i in range(0, len(text), chunk):  # tokens arrive in pieces
        printer.write(text[i:i + chunk])
    screen = terminal.screen()
    assert all(len(line) <= 25 for line in screen), screen
    assert " ".join(screen).split() == text.replace("\n", " ").replace(
        "Averyveryveryverylongwordthatdoesnotfitonanyline", "Averyveryveryverylongword thatdoesnotfitonanyline").split()
    assert screen[:4] == ["The quick brown fox jumps", "over the lazy dog and", "keeps running far away",
                          "into the distant hills."]
    assert printer.content == text
