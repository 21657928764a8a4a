"""A store written by Ollama (``~/.ollama/models``) works as ours when LOCALLLM_MODELS points at it.

The store is laid out byte for byte as Ollama writes it (``manifest.WriteManifest``
and ``server/create.go``: Go's ``json.Encoder``, so compact JSON with a newline and
``<``/``>`` escaped as ``\\u003c``/``\\u003e``; config as ``model.ConfigV2``), and the
real daemon is driven with the ``ollama`` Python package: list, show, generate, cp, rm.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from support.daemon import Daemon

SYSTEM = "You are a terse assistant."
TEMPLATE = ("{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
            "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n")


def go_json(value: object) -> bytes:
    """What Go's ``json.NewEncoder(w).Encode(value)`` writes (HTML characters escaped, a newline)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n").encode()


def write_ollama_store(models: Path, gguf: Path) -> dict[str, bytes]:
    """``smollm2:135m`` as ``ollama create`` leaves it: model, template, system and params layers, a
    ConfigV2 config. Returns the blobs written, by file name."""
    blobs = models / "blobs"
    blobs.mkdir(parents=True)
    written: dict[str, bytes] = {}

    def blob(media_type: str, data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / f"sha256-{digest}").write_bytes(data)
        written[f"sha256-{digest}"] = data
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    model_hex = hashlib.sha256(gguf.read_bytes()).hexdigest()
    try:
        os.link(gguf, blobs / f"sha256-{model_hex}")  # the cached fixture: never written through this name
    except OSError:
        shutil.copyfile(gguf, blobs / f"sha256-{model_hex}")
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{model_hex}",
         "size": gguf.stat().st_size},
        blob("application/vnd.ollama.image.template", TEMPLATE.encode()),
        blob("application/vnd.ollama.image.system", SYSTEM.encode()),
        blob("application/vnd.ollama.image.params",
             go_json({"num_predict": 8, "stop": ["<|im_start|>", "<|im_end|>"], "temperature": 0})),
    ]
    config = blob("application/vnd.docker.container.image.v1+json", go_json({
        "model_format": "gguf", "model_family": "llama", "model_families": ["llama"], "model_type": "134.52M",
        "file_type": "Q4_1", "architecture": "amd64", "os": "linux"}))
    manifest = go_json({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                        "config": config, "layers": layers})
    path = models / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m"
    path.parent.mkdir(parents=True)
    path.write_bytes(manifest)
    written["manifest"] = manifest
    return written


@pytest.fixture(scope="module")
def ollama_home(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Iterator[tuple[Daemon, Path, dict]]:
    root = tmp_path_factory.mktemp("ollama-home")
    models = root / ".ollama" / "models"
    written = write_ollama_store(models, smollm2_path)
    daemon = Daemon(root, LOCALLLM_MODELS=str(models), LOCALLLM_NUM_THREADS="1").start()
    try:
        yield daemon, models, written
    finally:
        daemon.stop()


def test_list_and_show_read_what_ollama_wrote(ollama_home) -> None:
    daemon, models, written = ollama_home
    client = ollama.Client(host=daemon.url)
    (entry,) = client.list().models
    assert entry.model == "smollm2:135m"
    assert entry.digest == hashlib.sha256(written["manifest"]).hexdigest()
    manifest = json.loads(written["manifest"])
    assert entry.size == manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
    assert entry.details.family == "llama" and entry.details.quantization_level == "Q4_1"
    shown = client.show("smollm2:135m")
    assert shown.template == TEMPLATE
    assert httpx.post(f"{daemon.url}/api/show", json={"model": "smollm2:135m"}).json()["system"] == SYSTEM
    assert '"<|im_start|>"' in shown.parameters and "num_predict" in shown.parameters
    assert f"SYSTEM {SYSTEM}" in shown.modelfile
    assert shown.modelinfo["llama.context_length"] == 8192


def test_generate_runs_the_ollama_model(ollama_home) -> None:
    daemon, _, _ = ollama_home
    answer = ollama.Client(host=daemon.url).generate(model="smollm2:135m", prompt="Say hello.", keep_alive=0)
    assert answer.done and answer.response.strip()
    assert 0 < answer.eval_count <= 8  # num_predict from the params layer Ollama wrote


def test_cp_and_rm_keep_ollamas_layout(ollama_home) -> None:
    daemon, models, written = ollama_home
    client = ollama.Client(host=daemon.url)
    manifests = models / "manifests" / "registry.ollama.ai" / "library"
    client.copy("smollm2:135m", "mine:copy")
    assert (manifests / "mine" / "copy").read_bytes() == written["manifest"]  # same bytes, same model ID
    assert sorted(m.model for m in client.list().models) == ["mine:copy", "smollm2:135m"]
    client.delete("smollm2:135m")
    assert not (manifests / "smollm2").exists()
    blobs = {p.name for p in (models / "blobs").iterdir()}
    assert {name for name in written if name != "manifest"} <= blobs  # still named by the copy
    client.delete("mine:copy")
    assert client.list().models == []
    assert not any((models / "blobs").iterdir())  # every layer Ollama wrote went with the last name
    assert not manifests.exists()  # emptied folders pruned, as Ollama prunes them
