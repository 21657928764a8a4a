"""The blob/manifest store: atomic writes, shared blobs, Ollama's on-disk format, verification."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from localllm.registry.models import import_gguf, load_local_model, register_model
from localllm.registry.names import ModelName
from localllm.registry.store import (
    CorruptManifest,
    DigestMismatch,
    InvalidDigest,
    ModelNotFound,
    Store,
    build_manifest,
    layer,
)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def store_files(store: Store) -> tuple[list[str], list[str]]:
    blobs = sorted(p.name for p in store.blobs_dir.iterdir())
    temps = sorted(p.name for p in store.partial_dir.rglob("*"))
    return blobs, temps


def link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def test_add_blob_hashes_while_copying_and_deduplicates(tmp_path: Path) -> None:
    store = Store(tmp_path)
    data = b"hello blob" * 1000
    digest, size = store.add_blob_bytes(data)
    assert (digest, size) == (digest_of(data), len(data))
    assert store.blob_path(digest).read_bytes() == data
    assert store.add_blob(iter([data[:5], data[5:]]), expected_digest=digest) == (digest, size)
    assert store_files(store) == ([f"sha256-{digest[7:]}"], [])


def test_digest_mismatch_stores_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with pytest.raises(DigestMismatch, match="expected sha256:0000"):
        store.add_blob_bytes(b"payload", expected_digest="sha256:" + "0" * 64)
    assert store_files(store) == ([], [])


def test_failing_source_leaves_no_blob_and_no_temp(tmp_path: Path) -> None:
    store = Store(tmp_path)

    def chunks():
        yield b"a" * 1000
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        store.add_blob(chunks())
    assert store_files(store) == ([], [])


@pytest.mark.parametrize("bad", ["sha256:abc", "md5:" + "0" * 64, "sha256:" + "G" * 64, "sha256-" + "0" * 64, "../x"])
def test_invalid_digests_are_rejected(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidDigest, match="invalid digest"):
        Store(tmp_path).blob_path(bad)


def test_manifest_naming_a_missing_blob_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path)
    manifest = build_manifest(layer("application/vnd.docker.container.image.v1+json", digest_of(b"x"), 1), [])
    with pytest.raises(CorruptManifest, match="not in the store"):
        store.write_manifest(ModelName.parse("a"), manifest)
    assert store.list_models() == []


def test_unknown_model_message(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="model 'nope:latest' not found, try pulling it first"):
        Store(tmp_path).read_manifest(ModelName.parse("nope"))


def test_shared_blobs_are_stored_once_and_collected_last(tmp_path: Path, smollm2_path: Path) -> None:
    store = Store(tmp_path)
    model_digest, _ = import_gguf(store, smollm2_path)
    system = layer("application/vnd.ollama.image.system", *store.add_blob_bytes(b"be brief"))
    register_model(store, ModelName.parse("one"), model_digest)
    register_model(store, ModelName.parse("two:x"), model_digest, [system])
    store.copy(ModelName.parse("two:x"), ModelName.parse("ns/three"))
    names = {e.name.display for e in store.list_models()}
    assert names == {"one:latest", "two:x", "ns/three:latest"}
    assert len([p for p in store.blobs_dir.iterdir() if p.stat().st_size > 1_000_000]) == 1

    store.delete(ModelName.parse("one"))
    assert store.has_blob(model_digest)
    store.delete(ModelName.parse("two:x"))
    assert store.has_blob(model_digest) and store.has_blob(system["digest"])  # ns/three still uses them
    store.delete(ModelName.parse("ns/three"))
    assert store_files(store) == ([], [])
    assert list(store.manifests_dir.iterdir()) == []  # empty directories removed too
    with pytest.raises(ModelNotFound):
        store.delete(ModelName.parse("one"))


def test_held_blobs_survive_deletion(tmp_path: Path) -> None:
    store = Store(tmp_path)
    config = layer("application/vnd.docker.container.image.v1+json", *store.add_blob_bytes(b"{}"))
    name = ModelName.parse("m")
    store.write_manifest(name, build_manifest(config, []))
    with store.hold([config["digest"]]):
        store.delete(name)
        assert store.has_blob(config["digest"])
    assert store.list_models() == []


def test_reads_a_store_written_in_ollamas_exact_format(tmp_path: Path, smollm2_path: Path) -> None:
    """A store laid out byte-for-byte the way Ollama writes it lists and loads."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()

    def put(data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / f"sha256-{digest}").write_bytes(data)
        return f"sha256:{digest}", len(data)

    model_hex = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    link_or_copy(smollm2_path, blobs / f"sha256-{model_hex}")
    template = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
    template_digest, template_size = put(template.encode())
    params_digest, params_size = put(b'{"stop":["<|im_start|>","<|im_end|>"]}')
    license_digest, license_size = put(b"Apache License\nVersion 2.0")
    config_digest, config_size = put(
        json.dumps(
            {"model_format": "gguf", "model_family": "llama", "model_families": ["llama"], "model_type": "134.52M",
             "file_type": "Q4_1", "architecture": "amd64", "os": "linux",
             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{model_hex}"]}}
        ).encode()
    )  # fmt: skip
    manifest = (
        '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",'
        f'"config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{config_digest}","size":{config_size}}},'
        '"layers":['
        f'{{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{model_hex}","size":98362432}},'
        f'{{"mediaType":"application/vnd.ollama.image.template","digest":"{template_digest}","size":{template_size}}},'
        f'{{"mediaType":"application/vnd.ollama.image.license","digest":"{license_digest}","size":{license_size}}},'
        f'{{"mediaType":"application/vnd.ollama.image.params","digest":"{params_digest}","size":{params_size}}}]}}\n'
    )
    manifest_file = tmp_path / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m"
    manifest_file.parent.mkdir(parents=True)
    manifest_file.write_text(manifest)

    store = Store(tmp_path)
    (entry,) = store.list_models()
    assert entry.name.display == "smollm2:135m"
    assert entry.digest == hashlib.sha256(manifest.encode()).hexdigest()
    assert entry.size == 98362432 + config_size + template_size + params_size + license_size
    model = load_local_model(store, ModelName.parse("smollm2:135m"))
    assert model.model_path == blobs / f"sha256-{model_hex}"
    assert model.template == template
    assert model.parameters == {"stop": ["<|im_start|>", "<|im_end|>"]}
    assert model.license == ["Apache License\nVersion 2.0"]
    assert model.details == {
        "parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
        "parameter_size": "134.52M", "quantization_level": "Q4_1",
    }  # fmt: skip
    assert model.gguf.arch_value("context_length") == 8192
    assert store.verify() == []


def test_our_manifests_are_what_ollama_writes(tmp_path: Path, smollm2_path: Path) -> None:
    store = Store(tmp_path)
    digest, size = import_gguf(store, smollm2_path)
    name = ModelName.parse("smollm2:135m")
    manifest_digest = register_model(store, name, digest)
    path = tmp_path / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m"
    raw = path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == manifest_digest
    manifest = json.loads(raw)
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert manifest["layers"] == [{"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": size}]
    config = json.loads(store.blob_path(manifest["config"]["digest"]).read_bytes())
    assert manifest["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json"
    assert config["model_format"] == "gguf" and config["model_family"] == "llama" and config["file_type"] == "Q4_1"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [digest]}


def test_verify_reports_missing_corrupt_and_unreadable(tmp_path: Path) -> None:
    store = Store(tmp_path)
    config = layer("application/vnd.docker.container.image.v1+json", *store.add_blob_bytes(b"{}"))
    extra = layer("application/vnd.ollama.image.system", *store.add_blob_bytes(b"system prompt"))
    store.write_manifest(ModelName.parse("good"), build_manifest(config, []))
    store.write_manifest(ModelName.parse("bad"), build_manifest(config, [extra]))
    assert store.verify() == []

    store.blob_path(extra["digest"]).write_bytes(b"tampered!!!!!")
    bad_manifest = ModelName.parse("broken").manifest_path(tmp_path)
    bad_manifest.parent.mkdir(parents=True)
    bad_manifest.write_text("{not json")
    problems = store.verify()
    assert any("bad:latest" in p and "corrupt" in p for p in problems), problems
    assert any("broken" in p and "unreadable" in p for p in problems), problems
    assert {e.name.display for e in store.list_models()} == {"good:latest", "bad:latest"}

    store.blob_path(extra["digest"]).unlink()
    assert any("missing" in p for p in store.verify())
