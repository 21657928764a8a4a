"""``localllm run`` with audio paths in the prompt, and ``localllm transcribe``, on a real model that hears."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.audio import flac, silence, tone, wav
from support.cli import CliEnv, PtySession, cli_with_models
from support.fixtures import with_projector

from localllm.cli.image_paths import extract_images


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path, audio_projector_path: Path) -> Iterator[CliEnv]:
    with cli_with_models(tmp_path_factory.mktemp("cli-audio"), plain=f"FROM {smollm2_path}\n",
                         # a transcript's piece ends at its first sentence, or at the Modelfile's 12 tokens
                         listener=with_projector(audio_projector_path, temperature=0, num_predict=12,
                                                 stop='"."')) as cli:
        (cli.root / "low.wav").write_bytes(wav(tone(300, 12)))
        (cli.root / "high tone.flac").write_bytes(flac(tone(3000, 12)))
        (cli.root / "notes.wav").write_text("shopping: milk, eggs")
        # talk.flac: low tones both sides of the silence
        (cli.root / "talk.flac").write_bytes(flac(np.concatenate([tone(300, 28), silence(1.5), tone(300, 10)])))
        yield cli


def test_run_sends_the_audio_a_prompt_names(env: CliEnv) -> None:
    low = env.run("run", "listener", "What do you hear in ./low.wav? Answer in one word.")
    assert low.returncode == 0, low.stderr
    assert "Added audio './low.wav'" in low.stderr and low.stdout.strip()
    high = env.run("run", "listener", f"What do you hear in '{env.root}/high tone.flac'? Answer in one word.")
    assert f"Added audio '{env.root}/high tone.flac'" in high.stderr and high.stdout.strip() != low.stdout.strip()


def test_run_refuses_an_audio_file_it_cannot_send(env: CliEnv) -> None:
    result = env.run("run", "listener", "What is in ./notes.wav?")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == ["Error: ./notes.wav is not a WAV, MP3 or FLAC file"]


def test_transcribe_prints_the_text_or_subtitles(env: CliEnv) -> None:
    text = env.run("transcribe", "listener", "low.wav")
    assert text.returncode == 0, text.stderr
    assert text.stdout.strip()
    srt = env.run("transcribe", "listener", "low.wav", "--format", "srt")
    assert srt.returncode == 0 and srt.stdout.startswith("1\n00:00:00,000 --> 00:00:12,000\n")
    assert text.stdout.strip() in srt.stdout
    missing = env.run("transcribe", "listener", "missing.wav")
    assert missing.returncode == 1 and "cannot read missing.wav" in missing.stderr
    deaf = env.run("transcribe", "plain", "low.wav")
    assert deaf.returncode == 1 and "'plain:latest' does not support audio" in deaf.stderr


@pytest.mark.slow  # two pieces of a 40 s recording, each read twice
def test_transcribe_draws_a_bar_on_a_terminal_and_nothing_elsewhere(env: CliEnv) -> None:
    plain = env.run("transcribe", "listener", "talk.flac", timeout=600)
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr  # no bar, no spinner: stderr is a pipe
    words = plain.stdout.split()
    assert words and plain.stdout.endswith("\n")
    session = PtySession(env, "transcribe", "listener", "talk.flac")
    try:
        session.expect(r"Transcribing talk\.flac.*\b0/40 s", timeout=120)  # the bar shows before the first piece
        session.expect(r"Transcribing talk\.flac.*\b(28|29|30)/40 s", timeout=300)  # the first piece, cut at the silence
        assert session.wait(timeout=300) == 0
    finally:
        session.close()
    assert "40/40 s" in session.seen
    shown = re.sub(r"[-\d]:[-\d]{2}:[-\d]{2}", r"\g<0> ", session.seen).split()  # the bar's time ends where text starts
    assert all(word in shown for word in words), (words, session.seen[-2000:])  # the text, above the bar


def test_only_a_model_that_hears_takes_audio_paths(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(wav(tone(300, 1)))
    prompt = f"hear {tmp_path}/a.wav now"
    assert extract_images(prompt).images == [] and extract_images(prompt).prompt == prompt
    heard = extract_images(prompt, images=False, audio=True)
    assert heard.prompt == "hear now" and len(heard.images) == 1 and heard.paths == [f"{tmp_path}/a.wav"]
