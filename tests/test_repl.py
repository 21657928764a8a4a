"""The chat REPL of ``localllm run MODEL``, driven through a pseudo-terminal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli_helpers import CliEnv, PtySession, write_ollama_model

PROMPT = r"(?m)^>>> $"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Iterator[CliEnv]:
    cli = CliEnv(tmp_path_factory.mktemp("repl"))
    write_ollama_model(cli.models_dir, smollm2_path)
    process = cli.start_daemon()
    yield cli
    process.terminate()
    cli.kill_daemons()


@pytest.fixture
def repl(env: CliEnv) -> Iterator[PtySession]:
    session = PtySession(env, "run", "smollm2:135m")
    try:
        session.expect(PROMPT, timeout=120)
        yield session
    finally:
        session.close()


def test_settings_commands(repl: PtySession) -> None:
    repl.sendline("/set parameter temperature 0")
    repl.expect(r"Set parameter 'temperature' to '0'")
    repl.sendline("/set parameter num_predict 8")
    repl.expect(r"Set parameter 'num_predict' to '8'")
    repl.sendline("/set parameter temperature warm")
    repl.expect(r"Couldn't set parameter: invalid float value for parameter 'temperature': 'warm'")
    repl.sendline("/set parameter no_such_option 1")
    repl.expect(r"Couldn't set parameter: unknown parameter 'no_such_option'")
    repl.sendline("/set system You are a pirate.")
    repl.expect(r"Set system message\.")
    repl.sendline("/show system")
    repl.expect(r"(?m)^You are a pirate\.")
    repl.sendline("/show parameters")
    repl.expect(r"Model defined parameters:")
    repl.expect(r"User defined parameters:")
    repl.expect(r"temperature\s+0\.0")
    repl.sendline("/show info")
    repl.expect(r"architecture\s+llama")
    repl.sendline("/show template")
    repl.expect(r"im_start")
    repl.sendline("/show modelfile")
    repl.expect(r"(?m)^FROM ")
    repl.sendline("/show nonsense")
    repl.expect(r"Unknown command '/show nonsense'")
    repl.sendline("/set format json")
    repl.expect(r"Set format to 'json' mode\.")
    repl.sendline("/set noformat")
    repl.expect(r"Disabled format\.")
    repl.sendline("/frobnicate")
    repl.expect(r"Unknown command '/frobnicate'")
    repl.sendline("/?")
    repl.expect(r"/bye\s+Exit")
    repl.sendline("/bye")
    assert repl.wait() == 0


def test_chat_verbose_multiline_clear_and_save(env: CliEnv, repl: PtySession) -> None:
    repl.sendline("/set parameter num_predict 8")
    repl.expect(r"Set parameter")
    repl.sendline("/set verbose")
    repl.expect(r"Set 'verbose' mode\.")
    repl.sendline("Say hello.")
    repl.expect(r"eval rate:\s+[\d.]+ tokens/s", timeout=120)
    repl.expect(PROMPT)
    repl.sendline('"""Name')
    repl.expect(r"(?m)^\.\.\. ")
    repl.sendline("a color.")
    repl.expect(r"(?m)^\.\.\. ")
    repl.sendline('"""')
    repl.expect(r"eval count:\s+\d+ token\(s\)", timeout=120)
    repl.expect(PROMPT)
    repl.sendline("/set quiet")
    repl.expect(r"Set 'quiet' mode\.")
    repl.sendline("/save repl-saved")
    repl.expect(r"Created new model 'repl-saved'", timeout=60)
    repl.sendline("/clear")
    repl.expect(r"Cleared session context")
    repl.send("\x04")  # Ctrl+D leaves
    assert repl.wait() == 0

    info = httpx.post(env.base_url + "/api/show", json={"model": "repl-saved"}, timeout=30).json()
    contents = [m["content"] for m in info.get("messages", [])]
    assert "Say hello." in contents
    assert "Name\na color." in contents
    assert "num_predict" in info.get("parameters", "")
    history = (env.state_dir / "history").read_text()
    assert "/set verbose" in history and "Say hello." in history


def test_ctrl_c_stops_generation_without_leaving(repl: PtySession) -> None:
    repl.sendline("/set parameter num_predict 4000")
    repl.expect(r"Set parameter")
    repl.sendline("Write a very long story about a dragon.")
    repl.expect(r"\w+ \w+ \w+", timeout=120)  # words are streaming
    repl.send("\x03")
    repl.expect(PROMPT, timeout=30)
    repl.send("\x03")  # at the prompt: a hint, still no exit
    repl.expect(r"Use Ctrl \+ d or /bye to exit\.")
    repl.sendline("/show system")
    repl.expect(r"No system message|\S")
    repl.sendline("/bye")
    assert repl.wait() == 0


def test_load_switches_model(env: CliEnv, repl: PtySession) -> None:
    created = httpx.post(env.base_url + "/api/create", timeout=60, json={
        "model": "other", "from": "smollm2:135m", "system": "You are the other model.", "stream": False})
    assert created.status_code == 200, created.text
    repl.sendline("/load no-such-model")
    repl.expect(r"Couldn't find model 'no-such-model'")
    repl.sendline("/show system")
    repl.expect(r"No system message was specified for this model\.")
    repl.sendline("/load other")
    repl.expect(r"Loading model 'other'")
    repl.expect(PROMPT, timeout=60)
    repl.sendline("/show system")
    repl.expect(r"(?m)^You are the other model\.")
    repl.sendline("/bye")
    assert repl.wait() == 0


def test_run_without_tty_and_without_prompt_only_loads(env: CliEnv) -> None:
    result = env.run("run", "smollm2:135m")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    loaded = httpx.get(env.base_url + "/api/ps", timeout=30).json()["models"]
    assert any(m["name"] == "smollm2:135m" for m in loaded), json.dumps(loaded)
