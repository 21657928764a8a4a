"""Thinking in the CLI: ``--think``/``--hidethinking``, ``/set think``, and how streamed
thinking is shown, on the event dicts the daemon streams (Ollama's shapes)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from support.cli import CliEnv, assert_clean_error

from localllm.cli.display import BOLD, GREY, RESET, AnswerPrinter
from localllm.cli.main import app
from localllm.cli.repl import ChatRepl
from localllm.cli.run import RunOptions, parse_think, stream_reply
from localllm.client import APIError, Client
from localllm.config import load_settings


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def chat_events(thinking: list[str], content: list[str], **final) -> Iterator[dict]:
    """``/api/chat`` stream lines: thinking deltas, content deltas, then the final object."""
    for piece in thinking:
        yield {"model": "m", "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False}
    for piece in content:
        yield {"model": "m", "message": {"role": "assistant", "content": piece}, "done": False}
    yield {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop", **final}


def show(events: Iterator[dict], *, chat: bool = True, out: io.StringIO | None = None, **printer) -> tuple:
    out = out if out is not None else io.StringIO()
    answer = AnswerPrinter(out, **printer)
    return stream_reply(events, answer, chat=chat), answer, out.getvalue()


# --- the printer on streamed events ----------------------------------------------------------


def test_thinking_then_answer_in_plain_text() -> None:
    final, answer, text = show(chat_events(["Short waves ", "scatter more."], ["Rayleigh ", "scattering."],
                                           eval_count=7))
    assert text == "Thinking...\nShort waves scatter more.\n...done thinking.\n\nRayleigh scattering."
    assert answer.content == "Rayleigh scattering."
    assert answer.thinking == "Short waves scatter more."
    assert final["done"] and final["eval_count"] == 7


def test_thinking_is_dimmed_on_a_terminal() -> None:
    _, _, text = show(chat_events(["Hmm.\n"], ["Yes."]), out=Terminal())
    assert text == (f"{GREY}{BOLD}Thinking...\n{RESET}{GREY}Hmm.\n"
                    f"{GREY}{BOLD}...done thinking.\n\n{RESET}Yes.")


def test_generate_events_carry_thinking_and_response_at_the_top() -> None:
    events = [{"response": "", "thinking": "Let me see.", "done": False},
              {"response": "42", "done": False},
              {"response": "", "done": True, "done_reason": "stop"}]
    final, answer, text = show(iter(events), chat=False)
    assert text == "Thinking...\nLet me see.\n...done thinking.\n\n42"
    assert (answer.content, answer.thinking, final["done_reason"]) == ("42", "Let me see.", "stop")


def test_hidden_thinking_is_kept_but_not_shown() -> None:
    _, answer, text = show(chat_events(["secret ", "plan"], ["Answer."]), out=Terminal(), show_thinking=False)
    assert text == "Answer."
    assert answer.thinking == "secret plan"


def test_no_thinking_prints_only_the_answer() -> None:
    _, answer, text = show(chat_events([], ["Just ", "this."]), out=Terminal())
    assert text == "Just this." and answer.thinking == ""


def test_a_block_is_closed_when_the_stream_ends_while_thinking() -> None:
    _, answer, text = show(chat_events(["still thinking"], []))
    assert text == "Thinking...\nstill thinking\n...done thinking.\n\n"
    assert answer.content == ""


def test_a_tool_call_closes_the_block() -> None:
    events = [{"message": {"role": "assistant", "content": "", "thinking": "Call it."}, "done": False},
              {"message": {"role": "assistant", "content": "", "tool_calls": [
                  {"function": {"name": "f", "arguments": {}}}]}, "done": False},
              {"message": {"role": "assistant", "content": ""}, "done": True}]
    _, _, text = show(iter(events))
    assert text == "Thinking...\nCall it.\n...done thinking.\n\n"


def test_ctrl_c_while_thinking_resets_the_colours() -> None:
    def interrupted() -> Iterator[dict]:
        yield from list(chat_events(["half a thou"], []))[:1]
        raise KeyboardInterrupt

    final, answer, text = show(interrupted(), out=Terminal())
    assert final is None
    assert text.endswith(f"half a thou{RESET}")
    assert answer.thinking == "half a thou"


def test_a_stream_failing_while_thinking_resets_the_colours() -> None:
    def failing() -> Iterator[dict]:
        yield from list(chat_events(["half a thou"], []))[:1]
        raise APIError("model runner crashed", 500)

    out = Terminal()
    with pytest.raises(APIError, match="model runner crashed"):
        show(failing(), out=out)
    assert out.getvalue().endswith(f"half a thou{RESET}")


# --- flags, settings and the request ---------------------------------------------------------


def run_params(*args: str) -> dict:
    """How ``localllm run ARGS`` parses, without running it."""
    command = typer.main.get_command(app).get_command(None, "run")  # type: ignore[union-attr]
    return command.make_context("run", list(args)).params


@pytest.mark.parametrize(("args", "think", "prompt"), [
    (["m", "--think", "Why", "blue?"], "true", ["Why", "blue?"]),  # bare: true, the next word is the prompt's
    (["m", "Why?", "--think"], "true", ["Why?"]),
    (["m", "--think=high", "Why?"], "high", ["Why?"]),
    (["m", "--think=false"], "false", []),
    (["m", "Why?"], None, ["Why?"]),
    (["m", "--", "--think"], None, ["--think"]),  # after "--" it is prompt text
])
def test_think_flag_parsing(args: list[str], think, prompt: list[str]) -> None:
    params = run_params(*args)
    assert params["think"] == think
    assert list(params["prompt"] or []) == prompt


def test_hidethinking_flag() -> None:
    assert run_params("m", "--hidethinking")["hidethinking"] is True
    assert run_params("m")["hidethinking"] is False


@pytest.mark.parametrize(("text", "value"), [
    ("true", True), ("false", False), ("TRUE", True), ("low", "low"), ("medium", "medium"), ("high", "high"),
])
def test_parse_think(text: str, value) -> None:
    assert parse_think(text) == value


@pytest.mark.parametrize("text", ["extreme", "", "yes", "1"])
def test_parse_think_refuses_unknown_values(text: str) -> None:
    with pytest.raises(ValueError, match=r"unknown think value .*must be true, false, low, medium, high"):
        parse_think(text)


def test_unknown_think_level_is_a_clean_error_before_any_daemon(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    try:
        assert_clean_error(cli.run("run", "smollm2:135m", "--think=extreme", "hi"), "--think", "'extreme'")
        assert cli.daemon_pids() == []
    finally:
        cli.kill_daemons()


def test_request_carries_think_only_when_set() -> None:
    assert "think" not in RunOptions(model="m").request(prompt="hi")
    assert RunOptions(model="m", think=False).request(prompt="hi")["think"] is False
    assert RunOptions(model="m", think="low").request(messages=[])["think"] == "low"


def test_a_model_that_thinks_thinks_unless_told_otherwise() -> None:
    thinker = {"capabilities": ["completion", "thinking"]}
    plain = {"capabilities": ["completion", "tools"]}
    opts = RunOptions(model="m")
    opts.apply_show(thinker)
    assert opts.think is True
    opts.apply_show(plain)  # /load of a model that cannot think
    assert opts.think is None
    chosen = RunOptions(model="m", think=False, think_chosen=True)
    chosen.apply_show(thinker)
    assert chosen.think is False


@pytest.fixture
def repl(tmp_path: Path) -> Iterator[ChatRepl]:
    with Client(load_settings()) as client:  # never called by /set
        opts = RunOptions(model="smollm2:135m")
        opts.apply_show({"capabilities": ["completion"]})
        yield ChatRepl(client, opts, tmp_path / "history")


def test_set_think_and_nothink(repl: ChatRepl, capsys: pytest.CaptureFixture[str]) -> None:
    repl.handle("/set think")
    assert repl.opts.think is True and repl.opts.think_chosen
    repl.handle("/set think high")
    assert repl.opts.think == "high"
    repl.handle("/set nothink")
    assert repl.opts.think is False
    repl.handle("/set think extreme")
    assert repl.opts.think is False  # unchanged
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "Set 'think' mode.", "Set 'think' mode to 'high'.", "Set 'nothink' mode.",
        "Couldn't set think: unknown think value 'extreme' (must be true, false, low, medium, high)",
    ]
    assert err.count('warning: model "smollm2:135m" does not support thinking output') == 3
    assert repl.opts.request(messages=[])["think"] is False


def test_set_think_on_a_model_that_thinks_does_not_warn(repl: ChatRepl, capsys: pytest.CaptureFixture[str]) -> None:
    repl.opts.apply_show({"capabilities": ["completion", "thinking"]})
    repl.handle("/set think low")
    assert "warning" not in capsys.readouterr().err
    assert repl.opts.think == "low"


def test_set_help_lists_think(repl: ChatRepl, capsys: pytest.CaptureFixture[str]) -> None:
    repl.handle("/set")
    err = capsys.readouterr().err
    assert "/set think [level]" in err and "/set nothink" in err


# --- end to end ------------------------------------------------------------------------------

THINKER_MODELFILE = '''\
FROM smollm2:135m
PARAMETER num_predict 16
PARAMETER temperature 0
TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ if .Thinking }}<think>{{ .Thinking }}</think>
{{ end }}{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ if .Think }}<think>
{{ end }}"""
'''


def test_run_shows_thinking_end_to_end(tmp_path: Path, smollm2_path: Path) -> None:
    from support.cli import write_ollama_model

    cli = CliEnv(tmp_path)
    write_ollama_model(cli.models_dir, smollm2_path)
    process = cli.start_daemon()
    try:
        (cli.root / "Modelfile").write_text(THINKER_MODELFILE)
        assert cli.run("create", "thinker", "-f", "Modelfile").returncode == 0
        assert "thinking" in cli.run("show", "thinker").stdout

        shown = cli.run("run", "thinker", "--think", "Why is the sky blue?")  # bare --think, then the prompt
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("Thinking...\n") and "...done thinking.\n\n" in shown.stdout
        assert shown.stdout.removeprefix("Thinking...\n").split("\n...done thinking.")[0].strip()

        hidden = cli.run("run", "thinker", "--think=high", "--hidethinking", "Why is the sky blue?")
        assert hidden.returncode == 0, hidden.stderr
        assert "Thinking..." not in hidden.stdout and "<think>" not in hidden.stdout

        inferred = cli.run("run", "thinker", "Why is the sky blue?")  # a model that thinks thinks by default
        assert inferred.stdout.startswith("Thinking...\n")

        off = cli.run("run", "thinker", "--think=false", "Why is the sky blue?")
        assert off.returncode == 0 and "Thinking..." not in off.stdout and off.stdout.strip()

        refused = cli.run("run", "smollm2:135m", "--think", "hi")  # a model that cannot think
        assert_clean_error(refused, "smollm2:135m")
    finally:
        process.terminate()
        cli.kill_daemons()
