"""Model-changing endpoints answer only clients on this machine (or with the API key); no error echoes a file.

Requests "from another machine" come from 203.0.113.9 through httpx's ASGI
transport (support/asgi.py): nothing is sent over a network.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from localllm.config import Settings
from localllm.registry.models import import_gguf, register_model
from localllm.registry.names import ModelName
from localllm.registry.store import Store

from support.asgi import LOOPBACK, REMOTE, in_process
from support.gguf_builders import tiny_model

SECRET = "root:x:0:0:SECRET-7f3a9c:/root:/bin/bash\n"


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    return tiny_model(tmp_path / "tiny.gguf")


@pytest.fixture
def settings(tmp_path: Path, gguf: Path) -> Settings:
    """A store holding one model, ``base``."""
    store = Store(tmp_path / "models")
    register_model(store, ModelName.parse("base"), import_gguf(store, gguf)[0])
    return Settings(models_dir=store.root, state_dir=tmp_path / "state", num_threads=1)


def store_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def call(settings: Settings, method: str, path: str, body: object = None, *, client=REMOTE,
         headers: dict[str, str] | None = None, content: bytes | None = None):
    async def request():
        async with in_process(settings, client, headers) as http:
            if content is not None:
                return await http.request(method, path, content=content)
            return await http.request(method, path, json=body)

    return asyncio.run(request())


DATA = b"some blob"
DATA_DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()
CHANGES = [
    ("POST", "/api/pull", {"model": "smollm2:135m"}, None),
    ("POST", "/api/push", {"model": "base"}, None),
    ("POST", "/api/create", {"model": "other", "from": "base"}, None),
    ("POST", "/api/copy", {"source": "base", "destination": "other"}, None),
    ("POST", "/api/copy/", {"source": "base", "destination": "other"}, None),
    ("DELETE", "/api/delete", {"model": "base"}, None),
    ("POST", f"/api/blobs/{DATA_DIGEST}", None, DATA),
]


@pytest.mark.parametrize(("method", "path", "body", "content"), CHANGES, ids=[c[1] for c in CHANGES])
def test_remote_clients_cannot_change_models(settings: Settings, method, path, body, content) -> None:
    before = store_snapshot(settings.models_dir)
    answer = call(settings, method, path, body, content=content)
    assert answer.status_code == 403, answer.text
    message = answer.json()["error"]
    assert "answers only clients on the daemon's own machine" in message
    assert "LOCALLLM_API_KEY" in message and "LOCALLLM_ALLOW_REMOTE_CHANGES=1" in message
    assert store_snapshot(settings.models_dir) == before


def test_remote_clients_still_read(settings: Settings) -> None:
    assert [m["name"] for m in call(settings, "GET", "/api/tags").json()["models"]] == ["base:latest"]
    assert call(settings, "POST", "/api/show", {"model": "base"}).status_code == 200
    assert call(settings, "HEAD", f"/api/blobs/{DATA_DIGEST}").status_code == 404


def test_the_same_requests_from_loopback_are_answered(settings: Settings) -> None:
    assert call(settings, "POST", "/api/copy", {"source": "base", "destination": "other"},
                client=LOOPBACK).status_code == 200
    assert call(settings, "POST", f"/api/blobs/{DATA_DIGEST}", content=DATA, client=LOOPBACK).status_code == 201


def test_an_api_key_opens_model_changes_to_remote_clients(settings: Settings, gguf: Path) -> None:
    keyed = replace(settings, api_key="k-123")
    assert call(keyed, "POST", "/api/copy", {"source": "base", "destination": "other"}).status_code == 401
    answer = call(keyed, "POST", "/api/copy", {"source": "base", "destination": "other"},
                  headers={"Authorization": "Bearer k-123"})
    assert answer.status_code == 200, answer.text
    created = call(keyed, "POST", "/api/create", {"model": "third", "from": str(gguf), "stream": False},
                   headers={"Authorization": "Bearer k-123"})
    assert created.status_code == 200, created.text  # a key holder may name files on the server


def test_allowed_remote_changes_still_never_read_server_files(settings: Settings, gguf: Path) -> None:
    opened = replace(settings, allow_remote_changes=True)
    assert call(opened, "POST", "/api/copy", {"source": "base", "destination": "other"}).status_code == 200
    before = store_snapshot(settings.models_dir)
    for body in ({"model": "x", "from": str(gguf)},
                 {"model": "x", "modelfile": f"FROM {gguf}"},
                 {"model": "x", "modelfile": "FROM ./tiny.gguf", "path": str(gguf.parent / "Modelfile")},
                 {"model": "x", "modelfile": f"FROM base\nADAPTER {gguf}"}):
        answer = call(opened, "POST", "/api/create", dict(body, stream=False))
        assert answer.status_code == 403, (body, answer.text)
        assert "only by a client on that machine or one holding LOCALLLM_API_KEY" in answer.json()["error"]
        assert "POST /api/blobs/<digest>" in answer.json()["error"]
    assert store_snapshot(settings.models_dir) == before
    # what the message suggests works: upload the file, then create from the uploaded blob
    digest = "sha256:" + hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert call(opened, "POST", f"/api/blobs/{digest}", content=gguf.read_bytes()).status_code == 201
    created = call(opened, "POST", "/api/create", {"model": "x", "files": {"tiny.gguf": digest}, "stream": False})
    assert created.status_code == 200, created.text
    assert call(opened, "POST", "/api/show", {"model": "x"}).status_code == 200


@pytest.mark.parametrize("name", ["secret.txt", "secret.gguf"])
def test_no_error_echoes_a_files_bytes(settings: Settings, tmp_path: Path, name: str) -> None:
    secret = tmp_path / name
    secret.write_text(SECRET)
    before = store_snapshot(settings.models_dir)
    for body in ({"model": "x", "from": str(secret)},
                 {"model": "x", "modelfile": f"FROM {secret}"},
                 {"model": "x", "modelfile": f"FROM base\nADAPTER {secret}"}):
        answer = call(settings, "POST", "/api/create", dict(body, stream=False), client=LOOPBACK)
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]
        assert "not a valid GGUF file: not a GGUF file" in message and str(secret) in message
        assert "root" not in message.replace(str(secret), "") and "SECRET" not in message
        streamed = call(settings, "POST", "/api/create", dict(body, stream=True), client=LOOPBACK)
        last = json.loads(streamed.text.strip().splitlines()[-1])
        assert "not a GGUF file" in last["error"] and "SECRET" not in streamed.text
    assert store_snapshot(settings.models_dir) == before
