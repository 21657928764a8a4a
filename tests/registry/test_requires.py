"""REQUIRES: kept in the config as Ollama keeps it, shown, and checked against our version."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from localllm import __version__
from localllm.config import Settings
from localllm.registry.models import import_gguf, register_model
from localllm.registry.names import ModelName
from localllm.registry.requires import ModelTooNew, check_requires, version_key
from localllm.registry.store import Store

from support.asgi import in_process
from support.gguf_builders import tiny_model

NEWER = "99.0.0"


@pytest.mark.parametrize("older,newer", [
    ("0.1.0", "0.1.1"), ("0.2", "0.10.0"), ("1.0.0-rc.1", "1.0.0"), ("1.0.0-alpha", "1.0.0-alpha.1"),
    ("1.0.0-alpha.2", "1.0.0-alpha.10"), ("1.0.0-alpha.1", "1.0.0-beta"), ("v1.2", "1.2.1"),
])  # fmt: skip
def test_versions_order_as_semver(older: str, newer: str) -> None:
    assert version_key(older) < version_key(newer)


def test_build_metadata_and_missing_parts_do_not_count() -> None:
    assert version_key("1.0.0+build.5") == version_key("1") == version_key("v1.0")


def test_a_newer_requirement_names_both_versions() -> None:
    check_requires(__version__, "model 'm'")
    check_requires("0.0.1", "model 'm'")
    with pytest.raises(ModelTooNew, match=rf"model 'm' requires localllm {NEWER} or newer, but this is localllm "
                                          rf"{__version__}"):
        check_requires(NEWER, "model 'm'")


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    return tiny_model(tmp_path / "tiny.gguf")


@pytest.fixture
def settings(tmp_path: Path, gguf: Path) -> Settings:
    """A store holding ``future``: a model whose config (as a registry would serve it) requires a newer localllm."""
    store = Store(tmp_path / "models")
    register_model(store, ModelName.parse("future"), import_gguf(store, gguf)[0], requires=NEWER)
    return Settings(models_dir=store.root, state_dir=tmp_path / "state", num_threads=1)


def run(settings: Settings, *requests: tuple[str, str, dict]) -> list:
    async def scenario() -> list:
        async with in_process(settings) as http:
            return [await http.request(method, path, json=body) for method, path, body in requests]

    return asyncio.run(scenario())


def config_of(store_root: Path, name: str) -> dict:
    manifest = json.loads(ModelName.parse(name).manifest_path(store_root).read_bytes())
    return json.loads((store_root / "blobs" / manifest["config"]["digest"].replace(":", "-")).read_bytes())


def test_requires_is_kept_in_the_config_and_shown(settings: Settings, gguf: Path) -> None:
    created, shown, derived, derived_shown = run(
        settings,
        ("POST", "/api/create", {"model": "old", "modelfile": f"FROM {gguf}\nREQUIRES v0.0.1\n", "stream": False}),
        ("POST", "/api/show", {"model": "old"}),
        ("POST", "/api/create", {"model": "child", "modelfile": "FROM old\nSYSTEM hi\n", "stream": False}),
        ("POST", "/api/show", {"model": "child"}),
    )
    assert created.status_code == 200, created.text
    assert config_of(settings.models_dir, "old")["requires"] == "0.0.1"  # Ollama's ConfigV2 "requires", no "v"
    assert shown.json()["requires"] == "0.0.1"
    assert "\nREQUIRES 0.0.1\n" in shown.json()["modelfile"]
    assert derived.status_code == 200 and derived_shown.json()["requires"] == "0.0.1"  # kept from the base
    assert config_of(settings.models_dir, "future")["requires"] == NEWER
    no_requires = run(settings, ("POST", "/api/create", {"model": "plain", "from": str(gguf), "stream": False}),
                      ("POST", "/api/show", {"model": "plain"}))
    assert "requires" not in no_requires[1].json() and "requires" not in config_of(settings.models_dir, "plain")


def test_creating_a_model_that_requires_a_newer_version_is_refused(settings: Settings, gguf: Path) -> None:
    before = sorted(p.name for p in (settings.models_dir / "blobs").iterdir())
    answers = run(
        settings,
        ("POST", "/api/create", {"model": "x", "modelfile": f"FROM {gguf}\nREQUIRES {NEWER}\n", "stream": False}),
        ("POST", "/api/create", {"model": "x", "from": str(gguf), "requires": NEWER, "stream": False}),
        ("POST", "/api/create", {"model": "x", "from": "future", "stream": False}),
        ("POST", "/api/create", {"model": "x", "from": str(gguf), "requires": "soon", "stream": False}),
    )
    for answer in answers[:3]:
        assert answer.status_code == 400, answer.text
        assert f"requires localllm {NEWER} or newer, but this is localllm {__version__}" in answer.json()["error"]
    assert answers[3].status_code == 400 and "requires: 'soon' is not a version" in answers[3].json()["error"]
    assert sorted(p.name for p in (settings.models_dir / "blobs").iterdir()) == before  # no link, no layer left
    assert [e.name.display for e in Store(settings.models_dir).list_models()] == ["future:latest"]


def test_running_a_model_that_requires_a_newer_version_is_412(settings: Settings) -> None:
    shown, generated, chatted, openai = run(
        settings,
        ("POST", "/api/show", {"model": "future"}),
        ("POST", "/api/generate", {"model": "future", "prompt": "hi", "stream": False}),
        ("POST", "/api/chat", {"model": "future", "messages": [{"role": "user", "content": "hi"}]}),
        ("POST", "/v1/chat/completions", {"model": "future", "messages": [{"role": "user", "content": "hi"}]}),
    )
    assert shown.status_code == 200 and shown.json()["requires"] == NEWER
    for answer in (generated, chatted, openai):
        assert answer.status_code == 412, answer.text
        assert f"model 'future:latest' requires localllm {NEWER} or newer, but this is localllm {__version__}" \
            in answer.text
