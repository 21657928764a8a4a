"""GGUF files used where they are: linked, not copied; a changed or vanished file is refused, never run."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.config import Settings
from localllm.registry.links import LinkedFileError
from localllm.registry.models import link_gguf, load_local_model, register_model
from localllm.registry.names import ModelName, name_for_file
from localllm.registry.store import Store

from support.asgi import in_process
from support.cli import CliEnv
from support.gguf_builders import tiny_model

NAME = ModelName.parse("mine")


def sha256_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def flip_last_byte(path: Path, keep_mtime: bool = False) -> None:
    """Change the file's bytes (a tensor's last byte) without changing its size."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def touch_later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    """A small valid GGUF in a folder of the user's."""
    folder = tmp_path / "user-files"
    folder.mkdir()
    return tiny_model(folder / "Tiny-Model.Q8.gguf")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "models")


def linked_model(store: Store, gguf: Path) -> str:
    digest, _ = link_gguf(store, gguf)
    register_model(store, NAME, digest)
    return digest


# --- the store -----------------------------------------------------------------------


def test_a_linked_file_is_not_copied_and_reads_as_an_ordinary_blob(store: Store, gguf: Path) -> None:
    digest = linked_model(store, gguf)
    blob = store.blob_path(digest)
    assert digest == sha256_of(gguf)  # the manifest names the file's real digest, as Ollama would
    assert blob.is_symlink() and blob.readlink() == gguf
    record = json.loads((store.links_dir / blob.name).read_text())
    assert record == {"path": str(gguf), "size": gguf.stat().st_size, "mtime_ns": gguf.stat().st_mtime_ns}
    manifest = json.loads(NAME.manifest_path(store.root).read_text())
    assert manifest["layers"] == [{"mediaType": "application/vnd.ollama.image.model", "digest": digest,
                                   "size": gguf.stat().st_size}]
    model = load_local_model(store, NAME)
    assert model.linked_file == gguf and model.gguf.architecture == "llama"
    assert store.verify() == []


def test_a_file_whose_mtime_changed_but_not_its_bytes_still_works(store: Store, gguf: Path) -> None:
    digest = linked_model(store, gguf)
    touch_later(gguf)
    assert load_local_model(store, NAME).linked_file == gguf
    record = json.loads((store.links_dir / store.blob_path(digest).name).read_text())
    assert record["mtime_ns"] == gguf.stat().st_mtime_ns  # hashed again once, then trusted again


@pytest.mark.parametrize("change", ["same size", "other size"])
def test_a_linked_file_replaced_by_another_is_refused(store: Store, gguf: Path, tmp_path: Path, change: str) -> None:
    linked_model(store, gguf)
    if change == "same size":
        flip_last_byte(gguf)
    else:
        tiny_model(tmp_path / "other.gguf", arch="qwen2").replace(gguf)
    with pytest.raises(LinkedFileError, match=f"model 'mine:latest' cannot be used: the linked file {gguf} changed"):
        load_local_model(store, NAME)
    assert any(f"{gguf} changed" in problem for problem in store.verify())


def test_a_deleted_linked_file_is_refused(store: Store, gguf: Path) -> None:
    linked_model(store, gguf)
    gguf.unlink()
    with pytest.raises(LinkedFileError, match=f"the linked file {gguf} no longer exists"):
        load_local_model(store, NAME)


def test_deleting_the_model_keeps_the_users_file(store: Store, gguf: Path) -> None:
    digest = linked_model(store, gguf)
    content = gguf.read_bytes()
    store.copy(NAME, ModelName.parse("mine2"))
    store.delete(NAME)
    assert store.blob_path(digest).is_symlink()  # still named by mine2
    store.delete(ModelName.parse("mine2"))
    assert not store.blob_path(digest).exists() and not store.blob_path(digest).is_symlink()
    assert not (store.links_dir / store.blob_path(digest).name).exists()
    assert gguf.read_bytes() == content


def test_an_unchanged_file_is_not_hashed_again(store: Store, gguf: Path) -> None:
    """Registering a linked file again trusts its record while size and mtime match (no second hash)."""
    digest = linked_model(store, gguf)
    flip_last_byte(gguf, keep_mtime=True)  # a change size and mtime cannot show: proves no rehash happened
    assert link_gguf(store, gguf)[0] == digest


def test_a_copy_of_the_same_bytes_replaces_the_link(store: Store, gguf: Path) -> None:
    digest = linked_model(store, gguf)
    with gguf.open("rb") as f:
        assert store.add_blob(f)[0] == digest
    assert not store.blob_path(digest).is_symlink()
    assert not (store.links_dir / store.blob_path(digest).name).exists()
    gguf.unlink()
    assert load_local_model(store, NAME).linked_file is None  # the store's own copy now


def test_a_link_no_manifest_names_goes_at_daemon_start_but_the_file_stays(store: Store, gguf: Path) -> None:
    """A create killed between linking its file and writing its manifest leaves a link; the next start drops it."""
    digest, _ = link_gguf(store, gguf)
    upload, _ = store.add_blob_bytes(b"uploaded, waiting for a create")
    store.remove_temporaries()
    assert not store.blob_path(digest).is_symlink() and not any(store.links_dir.iterdir())
    assert gguf.is_file() and store.has_blob(upload)


def test_names_taken_from_files() -> None:
    assert name_for_file(Path("/x/SmolLM2-135M-Instruct.Q4_1.gguf")).display == "smollm2-135m-instruct.q4_1:latest"
    assert name_for_file(Path("/x/..My Model (v2)...GGUF")).display == "my-model-v2-.:latest"
    assert name_for_file(Path("/x/-.gguf")).display == "model:latest"


# --- create and the API, in process ---------------------------------------------------


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(models_dir=tmp_path / "models", state_dir=tmp_path / "state", num_threads=1)


def test_create_from_a_file_links_it_and_show_names_it(settings: Settings, gguf: Path) -> None:
    async def scenario() -> None:
        async with in_process(settings) as client:
            created = await client.post("/api/create", json={
                "model": "mine", "modelfile": f"FROM ./{gguf.name}\nSYSTEM be brief\n",
                "path": str(gguf.parent / "Modelfile"), "stream": False})
            assert created.status_code == 200, created.text
            shown = (await client.post("/api/show", json={"model": "mine"})).json()
            assert f"\nFROM {gguf}\n" in shown["modelfile"]
            assert shown["system"] == "be brief"

    asyncio.run(scenario())
    blob = Store(settings.models_dir).blob_path(sha256_of(gguf))
    assert blob.readlink() == gguf


def test_changed_and_vanished_files_are_409_naming_the_file(settings: Settings, gguf: Path) -> None:
    async def scenario() -> None:
        async with in_process(settings) as client:
            assert (await client.post("/api/create", json={"model": "mine", "from": str(gguf),
                                                            "stream": False})).status_code == 200
            flip_last_byte(gguf)
            for path, body in (("/api/show", {"model": "mine"}),
                               ("/api/generate", {"model": "mine", "prompt": "hi", "stream": False}),
                               ("/v1/chat/completions", {"model": "mine", "messages": [{"role": "user",
                                                                                        "content": "hi"}]})):
                answer = await client.post(path, json=body)
                assert answer.status_code == 409, (path, answer.text)
                assert f"the linked file {gguf} changed since it was registered" in answer.text
            listed = (await client.get("/api/tags")).json()["models"]
            assert [m["name"] for m in listed] == ["mine:latest"]  # still listed, to be removed or fixed
            gguf.unlink()
            answer = await client.post("/api/show", json={"model": "mine"})
            assert answer.status_code == 409 and f"the linked file {gguf} no longer exists" in answer.text
            assert (await client.request("DELETE", "/api/delete", json={"model": "mine"})).status_code == 200
            assert (await client.get("/api/tags")).json()["models"] == []

    asyncio.run(scenario())


def test_a_failed_create_leaves_no_link_behind(settings: Settings, gguf: Path) -> None:
    async def scenario() -> None:
        async with in_process(settings) as client:
            answer = await client.post("/api/create", json={
                "model": "mine", "modelfile": f"FROM {gguf}\nADAPTER ./missing-adapter.gguf\n", "stream": False})
            assert answer.status_code == 400 and "ADAPTER" in answer.text and "no such file" in answer.text

    asyncio.run(scenario())
    store = Store(settings.models_dir)
    assert list(store.blobs_dir.iterdir()) == [] and store.list_models() == []
    assert gguf.is_file()


# --- localllm run ./model.gguf ---------------------------------------------------------


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliEnv]:
    env = CliEnv(tmp_path_factory.mktemp("links-cli"))
    process = env.start_daemon()
    yield env
    process.terminate()
    env.kill_daemons()


def test_run_a_file_registers_it_in_place_and_runs_it(cli: CliEnv, smollm2_path: Path) -> None:
    local = cli.root / "SmolLM2-135M-Instruct.Q4_1.gguf"
    os.link(smollm2_path, local)  # the user's file; never written by the test
    first = cli.run("run", f"./{local.name}", "Say hi.", "--keepalive", "0")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip()
    listed = cli.run("list")
    assert "smollm2-135m-instruct.q4_1:latest" in listed.stdout
    blob = cli.models_dir / "blobs" / f"sha256-{hashlib.sha256(local.read_bytes()).hexdigest()}"
    assert blob.readlink() == local
    shown = cli.run("show", "smollm2-135m-instruct.q4_1", "--modelfile")
    assert f"FROM {local}" in shown.stdout
    again = cli.run("run", str(local), "Say hi.", "--keepalive", "0")  # absolute path: the same model
    assert again.returncode == 0, again.stderr
    assert "success" not in again.stderr  # reused, not registered again
    removed = cli.run("rm", "smollm2-135m-instruct.q4_1")
    assert removed.returncode == 0, removed.stderr
    assert local.is_file() and not blob.is_symlink()


def test_run_a_changed_file_registers_it_again(cli: CliEnv) -> None:
    tiny = tiny_model(cli.root / "tiny.gguf")
    assert cli.run("create", "tiny", "-f", str(_modelfile(cli, "FROM ./tiny.gguf"))).returncode == 0
    flip_last_byte(tiny)
    refused = cli.run("show", "tiny")
    assert refused.returncode == 1 and f"the linked file {tiny} changed" in refused.stderr
    again = cli.run("run", "./tiny.gguf", "--keepalive", "0")  # 'tiny' was made from this file: renewed
    assert again.returncode == 0, again.stderr
    assert "success" in again.stderr
    assert cli.run("show", "tiny").returncode == 0


def test_run_never_takes_over_another_models_name(cli: CliEnv) -> None:
    tiny_model(cli.root / "base.gguf")
    tiny_model(cli.root / "other.gguf", arch="qwen2")
    assert cli.run("create", "other", "-f", str(_modelfile(cli, "FROM ./base.gguf"))).returncode == 0
    result = cli.run("run", "./other.gguf", "hi")
    assert result.returncode == 1
    assert "a model named 'other:latest' already exists and was not made from" in result.stderr
    shown = cli.run("show", "other", "--modelfile")
    assert f"FROM {cli.root / 'base.gguf'}" in shown.stdout


def test_run_a_missing_file_is_a_clear_error(cli: CliEnv) -> None:
    result = cli.run("run", "./nothing-here.gguf", "hi")
    assert result.returncode == 1 and f"no such file: {cli.root / 'nothing-here.gguf'}" in result.stderr


def _modelfile(cli: CliEnv, text: str) -> Path:
    path = cli.root / "Modelfile"
    path.write_text(text + "\n")
    return path
