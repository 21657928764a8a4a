"""``localllm run`` with image paths in the prompt (one-shot and the REPL), on a real vision model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import CliEnv, PtySession, cli_with_models
from support.fixtures import with_projector
from support.images import picture

from localllm.cli.image_paths import ImagePathError, extract_images

PROMPT = r"(?m)^>>> $"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, projector_path: Path) -> Iterator[CliEnv]:
    with cli_with_models(tmp_path_factory.mktemp("cli-vision"),
                         seer=with_projector(projector_path, temperature=0, num_predict=12)) as cli:
        (cli.root / "red.png").write_bytes(picture("red"))
        (cli.root / "blue photo.png").write_bytes(picture("blue"))
        (cli.root / "notes.png").write_text("shopping: milk, eggs")
        yield cli


def test_run_sends_the_image_a_prompt_names(env: CliEnv) -> None:
    red = env.run("run", "seer", "./red.png What colour is this picture? Answer in one word.")
    assert red.returncode == 0, red.stderr
    assert "Added image './red.png'" in red.stderr and "red" in red.stdout.lower()
    blue = env.run("run", "seer", f"'{env.root}/blue photo.png' What colour is this picture? Answer in one word.")
    assert f"Added image '{env.root}/blue photo.png'" in blue.stderr and "blue" in blue.stdout.lower()


@pytest.mark.parametrize("prompt, problem", [
    ("What is in ./missing.png?", "no such image file: ./missing.png"),
    ("What is in ./notes.png?", "./notes.png is not a PNG, JPEG, WebP or GIF image"),
])
def test_run_refuses_a_file_it_cannot_send(env: CliEnv, prompt: str, problem: str) -> None:
    result = env.run("run", "seer", prompt)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"Error: {problem}"]


def test_the_repl_adds_images_and_refuses_missing_ones(env: CliEnv) -> None:
    session = PtySession(env, "run", "seer")
    try:
        session.expect(PROMPT, timeout=120)
        session.sendline("What colour is ./missing.jpg?")
        session.expect("Error: no such image file: ./missing.jpg")
        session.expect(PROMPT)
        session.sendline(r"./blue\ photo.png What colour is this picture? Answer in one word.")
        session.expect(r"Added image './blue photo.png'")
        session.expect("(?i)blue", timeout=120)
        session.expect(PROMPT, timeout=120)
    finally:
        session.close()


def test_paths_with_a_tilde_and_text_only_words_are_told_apart(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "cat.webp").write_bytes(picture("white", "WEBP"))
    found = extract_images("Is ~/cat.webp a cat, unlike logo.png or https://example.org/a.png?")
    assert found.paths == ["~/cat.webp"] and len(found.images) == 1
    assert found.prompt == "Is a cat, unlike logo.png or https://example.org/a.png?"
    with pytest.raises(ImagePathError, match="no such image file: ~/dog.jpg"):
        extract_images("and ~/dog.jpg")
