"""Crafted GGUF files reach the daemon through create and through a pull; none gets a name.

Each file breaks one rule of the header checker. Through ``/api/create`` (a
Modelfile ``FROM`` a path) the user's file is refused without copying it;
through a direct-URL pull the downloaded bytes are refused and kept in
``<models>/quarantine/sha256-<hex>`` for inspection. Either way the error
names the problem, nothing is registered, the store verifies and the daemon
keeps serving.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.daemon import Daemon
from support.gguf_builders import build_gguf, gguf_string, kv_string, kv_u8_array, tensor_info
from support.faults import assert_alive, assert_store_consistent, model_names, partial_files, stream_events
from support.registry_servers import PackageIndexServer

F32, Q4_0 = 0, 2

#: file stem -> (bytes, what the error must say)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "bad-magic": (build_gguf(magic=b"\x7fELF"), "not a GGUF file"),
    "bad-version": (build_gguf(version=7), "unsupported GGUF version 7"),
    "huge-tensor-count": (build_gguf(tensor_count=2**62), "claims 4611686018427387904 tensors, limit"),
    "huge-kv-count": (build_gguf(kv_count=2**40), "claims 1099511627776 metadata entries, limit"),
    "string-past-eof": (
        build_gguf(kv=[gguf_string("general.name") + struct.pack("<IQ", 8, 1_000_000)]), "file is truncated"
    ),
    "tensor-offset-past-eof": (
        build_gguf(tensors=[tensor_info("w", (32,), F32, 1 << 40)]), "extends beyond the end of the file"
    ),
    "unknown-tensor-type": (build_gguf(tensors=[tensor_info("w", (32,), 250, 0)]), "unknown ggml type 250"),
    "shape-larger-than-data": (
        build_gguf(tensors=[tensor_info("w", (4096, 4096), F32, 0)]), "extends beyond the end of the file"
    ),
    "shape-not-whole-blocks": (
        build_gguf(tensors=[tensor_info("w", (33,), Q4_0, 0)]), "not a multiple of Q4_0's block 32"
    ),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("hostile")
    for stem, (data, _problem) in HOSTILE.items():
        (directory / f"{stem}.gguf").write_bytes(data)
    return directory


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    instance = Daemon(tmp_path_factory.mktemp("hostile-daemon")).start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="module")
def file_server(files: Path) -> Iterator[PackageIndexServer]:
    with PackageIndexServer(files) as server:  # serves <url>/files/<name> with Range support
        yield server


@pytest.mark.parametrize("stem", sorted(HOSTILE))
def test_create_from_a_hostile_file_is_refused(daemon: Daemon, files: Path, stem: str) -> None:
    path = files / f"{stem}.gguf"
    events = stream_events(daemon, "/api/create", {"model": stem, "modelfile": f"FROM {path}"})
    error = events[-1].get("error", "")
    assert "not a valid GGUF file" in error and str(path) in error and HOSTILE[stem][1] in error, events
    assert stem + ":latest" not in model_names(daemon)
    assert_alive(daemon)


def test_create_refusal_without_streaming_is_a_client_error(daemon: Daemon, files: Path) -> None:
    path = files / "bad-magic.gguf"
    response = httpx.post(f"{daemon.url}/api/create", timeout=60,
                          json={"model": "bad-magic", "modelfile": f"FROM {path}", "stream": False})
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert "not a GGUF file" in response.json()["error"]


@pytest.mark.parametrize("stem", sorted(HOSTILE))
def test_pulled_hostile_file_is_quarantined(daemon: Daemon, file_server: PackageIndexServer, stem: str) -> None:
    data = HOSTILE[stem][0]
    quarantined = daemon.root / "models" / "quarantine" / f"sha256-{hashlib.sha256(data).hexdigest()}"
    events = stream_events(daemon, "/api/pull", {"model": f"{file_server.url}/files/{stem}.gguf"})
    error = events[-1].get("error", "")
    assert "not a valid GGUF model" in error and HOSTILE[stem][1] in error, events
    assert f"quarantined as {quarantined}" in error
    assert quarantined.read_bytes() == data
    assert stem + ":latest" not in model_names(daemon)
    store = assert_store_consistent(daemon)
    assert partial_files(store) == []
    assert not any(store.blobs_dir.iterdir())  # nothing hostile under a blob name
    assert_alive(daemon)


def test_a_file_llama_cpp_cannot_load_fails_the_request_not_the_daemon(daemon: Daemon, tmp_path: Path) -> None:
    """A header that passes our checks but lacks the hyperparameters llama.cpp needs."""
    path = tmp_path / "hollow.gguf"
    path.write_bytes(build_gguf(kv=[kv_string("general.architecture", "llama")]))
    daemon.create("hollow", f"FROM {path}")
    try:
        for _attempt in range(2):  # the failed load leaves nothing behind that breaks the next try
            response = httpx.post(f"{daemon.url}/api/generate", json={"model": "hollow", "prompt": "hi",
                                                                      "stream": False}, timeout=120)
            assert response.status_code >= 400
            assert "failed to load model hollow:latest" in response.json()["error"]
            assert "llama.context_length" in response.json()["error"]
            assert daemon.runner_pids() == []
        assert_alive(daemon)
    finally:
        httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "hollow"}, timeout=30)


def test_the_store_is_clean_after_every_refusal(daemon: Daemon) -> None:
    """Runs last in this module: after all the refusals above, no model and no blob."""
    assert model_names(daemon) == set()
    store = assert_store_consistent(daemon)
    assert store.list_models() == [] and partial_files(store) == []
    assert_alive(daemon)


def test_show_verbose_decodes_metadata_arrays_only_within_its_bound(daemon: Daemon, tmp_path: Path) -> None:
    """/api/show is reachable from other machines: a header claiming 16 M items must not become a 16 M-item
    list (128 MB, and 48 MB of JSON). Arrays come in full, in file order, up to 1,048,576 items in all."""
    path = tmp_path / "wide.gguf"
    path.write_bytes(build_gguf(kv=[kv_string("general.architecture", "llama"), kv_u8_array("small", 3, 7),
                                    kv_u8_array("first", 700_000, 1), kv_u8_array("hostile.items", 1 << 24),
                                    kv_u8_array("second", 700_000, 2), kv_u8_array("last", 2, 9)]))
    events = stream_events(daemon, "/api/create", {"model": "wide", "modelfile": f"FROM {path}"})
    assert events[-1] == {"status": "success"}, events
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "wide", "verbose": True}, timeout=120)
    assert shown.status_code == 200, shown.text[:300]
    info = shown.json()["model_info"]
    assert info["small"] == [7, 7, 7] and info["last"] == [9, 9]
    assert info["first"] == [1] * 700_000
    assert info["hostile.items"] is None  # 16 M items: past the bound, as without verbose
    assert info["second"] is None  # 700,000 more would pass 1,048,576 in all
    assert len(shown.content) < 4 << 20
    terse = httpx.post(f"{daemon.url}/api/show", json={"model": "wide"}, timeout=60).json()["model_info"]
    assert terse["small"] == [7, 7, 7] and terse["first"] is None and terse["hostile.items"] is None
    assert_alive(daemon)
