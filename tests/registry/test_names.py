"""Model name parsing: the defaults, Ollama's short display form, and names that must never reach the disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localllm.registry.names import DEFAULT_HOST, InvalidName, ModelName


@pytest.mark.parametrize(
    ("text", "parts", "display"),
    [
        ("smollm2", (DEFAULT_HOST, "library", "smollm2", "latest"), "smollm2:latest"),
        ("smollm2:135m", (DEFAULT_HOST, "library", "smollm2", "135m"), "smollm2:135m"),
        ("myns/foo", (DEFAULT_HOST, "myns", "foo", "latest"), "myns/foo:latest"),
        ("example.com:5000/ns/m:v1.2", ("example.com:5000", "ns", "m", "v1.2"), "example.com:5000/ns/m:v1.2"),
        ("hf.co/org/repo:Q4_K_M", ("hf.co", "org", "repo", "Q4_K_M"), "hf.co/org/repo:Q4_K_M"),
        ("huggingface.co/Org/Repo-GGUF", ("hf.co", "Org", "Repo-GGUF", "latest"), "hf.co/Org/Repo-GGUF:latest"),
        ("  gemma3:270m  ", (DEFAULT_HOST, "library", "gemma3", "270m"), "gemma3:270m"),
        ("registry.ollama.ai/library/x:y", (DEFAULT_HOST, "library", "x", "y"), "x:y"),
    ],
)
def test_parse_valid(text: str, parts: tuple[str, str, str, str], display: str) -> None:
    name = ModelName.parse(text)
    assert (name.host, name.namespace, name.model, name.tag) == parts
    assert name.display == display == str(name)
    assert ModelName.parse(name.full) == name


def test_huggingface_flag_and_manifest_path(tmp_path: Path) -> None:
    name = ModelName.parse("hf.co/org/repo:Q4_1")
    assert name.is_huggingface
    assert not ModelName.parse("smollm2").is_huggingface
    assert name.manifest_path(tmp_path) == tmp_path / "manifests" / "hf.co" / "org" / "repo" / "Q4_1"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a/../b", "'..'"),
        ("../etc/passwd", "'..'"),
        ("..", "'..'"),
        ("/abs/path", "paths are not model names"),
        ("a\\b", "paths are not model names"),
        ("a/b/c/d", "[host/][namespace/]model[:tag]"),
        ("model:", "empty tag"),
        ("a b", "model 'a b'"),
        ("ns.dots/model", "namespace 'ns.dots'"),
        ("https://example.com/x.gguf", "URL"),
        ("model:.hidden", "tag '.hidden'"),
        ("ns/.model", "model '.model'"),
        ("-model", "model '-model'"),
        ("model:" + "t" * 129, "longer than 128"),
        ("x" * 400, "longer than 350"),
        ("a//b", "empty namespace"),
        ("mod\x00el", "model"),
    ],
)
def test_parse_invalid_names_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InvalidName) as excinfo:
        ModelName.parse(text)
    message = str(excinfo.value)
    assert message.startswith("invalid model name")
    assert problem in message


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(InvalidName):
        ModelName("registry.ollama.ai", "library", "..", "latest")
    with pytest.raises(InvalidName):
        ModelName("registry.ollama.ai", "library", "a/b", "latest")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*"ab./:\\-_ 0~%\x00", "..", "hf.co/", "A"]), max_size=20).map("".join))
def test_parse_never_escapes_the_store(text: str) -> None:
    root = Path("/store/root")
    try:
        name = ModelName.parse(text)
    except InvalidName:
        return
    path = name.manifest_path(root)
    relative = path.relative_to(root / "manifests")
    assert len(relative.parts) == 4
    assert all(part not in ("", ".", "..") and "/" not in part for part in relative.parts)
    assert Path("/" + str(relative)).resolve() == Path("/" + str(relative))  # nothing to normalise away
    assert ModelName.parse(name.full) == name
