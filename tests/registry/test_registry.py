"""Pull from and push to a Docker v2 registry as Ollama's, over loopback (tests/support/registry_servers.py).

The puller and pusher here are the daemon's own, run in-process against a real
HTTP registry; test_registry_daemon.py drives the same through the daemon,
the CLI and the ``ollama`` package.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gguf_builders import lora_adapter, tiny_model
from support.registry_servers import RegistryServer, new_puller, registry_errors, run

from localllm.config import SettingsError, load_settings
from localllm.registry.models import load_local_model
from localllm.registry.names import ModelName
from localllm.registry.pull import PullError, Puller
from localllm.registry.push import Pusher
from localllm.registry.remote import MAX_ANSWER_BYTES, RegistryError
from localllm.registry.store import (
    MEDIA_ADAPTER,
    MEDIA_LICENSE,
    MEDIA_MESSAGES,
    MEDIA_MODEL,
    MEDIA_PARAMS,
    MEDIA_PROJECTOR,
    MEDIA_SYSTEM,
    MEDIA_TEMPLATE,
)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryServer]:
    with RegistryServer(tmp_path / "registry") as server:
        monkeypatch.setenv("LOCALLLM_REGISTRY", server.url)
        monkeypatch.delenv("LOCALLLM_REGISTRY_TOKEN", raising=False)
        yield server


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return tiny_model(tmp_path / "tiny.gguf")


def tiny_digest(path: Path) -> str:
    return f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


def blob_gets(server: RegistryServer, since: int = 0) -> list[tuple[str, str | None]]:
    return [(path.rsplit("/", 1)[1], range_) for method, path, range_ in server.requests[since:]
            if method == "GET" and "/blobs/sha256:" in path]


def descriptors(manifest: bytes) -> list[dict[str, Any]]:
    parsed = json.loads(manifest)
    return [*parsed["layers"], parsed["config"]]


def push(pusher: Pusher, target: str, **kwargs: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [event async for event in pusher.push(ModelName.parse(target), **kwargs)]

    return asyncio.run(collect())


def store_files(puller: Puller) -> set[str]:
    return {str(p.relative_to(puller.store.root)) for p in puller.store.root.rglob("*") if p.is_file()}


def test_pull_keeps_every_layer_type_and_the_manifest_as_sent(tmp_path: Path, registry: RegistryServer,
                                                               tiny: Path) -> None:
    adapter = lora_adapter(tmp_path / "adapter.gguf", n_embd=64, layers=1)
    projector = tiny_model(tmp_path / "projector.gguf", arch="qwen2")  # a GGUF standing in for a projector
    manifest = registry.publish("library/tiny", "1b", [
        (MEDIA_MODEL, tiny), (MEDIA_TEMPLATE, b"{{ .System }} {{ .Prompt }}"), (MEDIA_SYSTEM, b"Be terse."),
        (MEDIA_PARAMS, b'{"temperature": 0.1, "stop": ["<end>"]}'),
        (MEDIA_MESSAGES, b'[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]'),
        (MEDIA_LICENSE, b"MIT"), (MEDIA_ADAPTER, adapter), (MEDIA_PROJECTOR, projector),
    ])  # fmt: skip
    layers = descriptors(manifest)
    # the model's GET is answered only once the template's has begun: layers are fetched at once, not in turn
    registry.gate(layers[0]["digest"], until=layers[1]["digest"])
    puller = new_puller(tmp_path / "store")

    events = run(puller, "tiny:1b", insecure=True)

    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    for layer in layers:
        progress = [e for e in events if e.get("digest") == layer["digest"]]
        assert {e["status"] for e in progress} == {f"pulling {layer['digest'][7:19]}"}
        assert progress[-1]["completed"] == progress[-1]["total"] == layer["size"]
    assert sorted(blob for blob, _range in blob_gets(registry)) == sorted(d["digest"] for d in layers)

    name = ModelName.parse("tiny:1b")
    store = puller.store
    assert name.manifest_path(store.root).read_bytes() == manifest  # byte for byte: Ollama's model ID
    assert store.manifest_digest(name) == hashlib.sha256(manifest).hexdigest()
    model = load_local_model(store, name)
    assert (model.template, model.system, model.license) == ("{{ .System }} {{ .Prompt }}", "Be terse.", ["MIT"])
    assert model.parameters == {"temperature": 0.1, "stop": ["<end>"]}
    assert model.messages[1] == {"role": "assistant", "content": "yo"}
    assert model.adapters == [store.blob_path(layers[6]["digest"])]
    assert model.projectors == [store.blob_path(layers[7]["digest"])]
    assert store.verify() == []
    assert [p for p in store.partial_dir.rglob("*") if p.is_file()] == []

    before = len(registry.requests)
    again = run(puller, "tiny:1b", insecure=True)
    assert again[-1] == {"status": "success"}
    assert blob_gets(registry, before) == []  # every blob is in the store already
    assert all(e["completed"] == e["total"] for e in again if "digest" in e)


def test_pulling_an_updated_tag_replaces_it_and_drops_the_blobs_only_it_named(
    tmp_path: Path, registry: RegistryServer, tiny: Path
) -> None:
    old = descriptors(registry.publish("library/tiny", "1b", [(MEDIA_MODEL, tiny), (MEDIA_SYSTEM, b"old")]))
    registry.publish("library/keep", "1b", [(MEDIA_MODEL, tiny)])
    puller = new_puller(tmp_path / "store")
    for name in ("tiny:1b", "keep:1b"):
        assert run(puller, name, insecure=True)[-1] == {"status": "success"}

    newer = tiny_model(tmp_path / "newer.gguf", head_dim=32)
    new = descriptors(registry.publish("library/tiny", "1b", [(MEDIA_MODEL, newer), (MEDIA_SYSTEM, b"new")]))
    assert run(puller, "tiny:1b", insecure=True)[-1] == {"status": "success"}

    store = puller.store
    assert load_local_model(store, ModelName.parse("tiny:1b")).system == "new"
    assert all(store.has_blob(d["digest"]) for d in new)
    assert store.has_blob(old[0]["digest"])  # the old model is still keep:1b's
    assert not store.has_blob(old[1]["digest"])  # the old system prompt: nothing names it now
    assert store.verify() == []


def test_a_name_with_a_host_goes_to_that_registry(tmp_path: Path, registry: RegistryServer, tiny: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_REGISTRY", "https://127.0.0.1:1")  # the default registry is not asked
    registry.publish("team/tiny", "v2", [(MEDIA_MODEL, tiny)])
    puller = new_puller(tmp_path / "store")
    assert run(puller, f"{registry.host}/team/tiny:v2", insecure=True)[-1] == {"status": "success"}
    (entry,) = puller.store.list_models()
    assert entry.name.display == f"{registry.host}/team/tiny:v2"


def test_plain_http_registry_needs_insecure(tmp_path: Path, registry: RegistryServer, tiny: Path) -> None:
    registry.publish("library/tiny", "1b", [(MEDIA_MODEL, tiny)])
    with pytest.raises(PullError) as excinfo:
        run(new_puller(tmp_path / "store"), "tiny:1b")
    assert excinfo.value.status == 400
    assert f"the registry {registry.url} speaks plain http; pass --insecure" in str(excinfo.value)
    assert registry.requests == []


def test_unknown_model_and_unknown_tag(tmp_path: Path, registry: RegistryServer, tiny: Path) -> None:
    registry.publish("library/tiny", "1b", [(MEDIA_MODEL, tiny)])
    puller = new_puller(tmp_path / "store")
    with pytest.raises(PullError) as excinfo:
        run(puller, "tiny:70b", insecure=True)
    assert excinfo.value.status == 404
    assert f"model 'tiny:70b' not found: the registry {registry.url} has no library/tiny:70b" in str(excinfo.value)
    with pytest.raises(PullError) as excinfo:
        run(puller, "nosuchmodel:7b", insecure=True)
    assert excinfo.value.status == 404
    message = str(excinfo.value)
    assert "has no model library/nosuchmodel (built in: smollm2:135m" in message and "hf.co/" in message
    assert puller.store.list_models() == [] and blob_gets(registry) == []


def test_unreachable_registry_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_REGISTRY", "127.0.0.1:1")
    with pytest.raises(PullError) as excinfo:
        run(new_puller(tmp_path), "nosuchmodel:7b")
    assert excinfo.value.status == 502
    assert "cannot pull 'nosuchmodel:7b': cannot reach the registry https://127.0.0.1:1" in str(excinfo.value)


@pytest.mark.parametrize(("variable", "value"), [
    ("LOCALLLM_REGISTRY", "ftp://example.com"), ("LOCALLLM_REGISTRY", "https://example.com/v2/library"),
    ("LOCALLLM_REGISTRY", "exa mple.com"), ("LOCALLLM_REGISTRY_TOKENS", "just-a-token"),
    ("LOCALLLM_REGISTRY_TOKENS", "https://example.com=token"),
])  # fmt: skip
def test_registry_settings_are_checked(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=f"{variable} must be"):
        load_settings()


def test_blob_with_another_digest_registers_nothing_and_keeps_what_was_there(
    tmp_path: Path, registry: RegistryServer, tiny: Path
) -> None:
    registry.publish("library/first", "latest", [(MEDIA_MODEL, tiny), (MEDIA_SYSTEM, b"first")])
    puller = new_puller(tmp_path / "store")
    assert run(puller, "first", insecure=True)[-1] == {"status": "success"}
    before = store_files(puller)

    other = tiny_model(tmp_path / "other.gguf", head_dim=32)
    manifest = registry.publish("library/second", "latest", [(MEDIA_MODEL, other)])
    model_digest = descriptors(manifest)[0]["digest"]
    registry.serve_instead(model_digest, tiny.read_bytes())  # a valid GGUF, but not the one named
    with pytest.raises(PullError) as excinfo:
        run(puller, "second", insecure=True)
    message = str(excinfo.value)
    assert excinfo.value.status == 502
    assert "sha256 mismatch" in message and model_digest in message and "discarded" in message

    assert [e.name.display for e in puller.store.list_models()] == ["first:latest"]
    assert not puller.store.has_blob(model_digest)
    assert before <= store_files(puller)  # nothing that was there is gone
    assert [p for p in puller.store.partial_dir.rglob("*") if p.is_file()] == []
    assert puller.store.verify() == []


def test_manifest_that_is_not_json(tmp_path: Path, registry: RegistryServer) -> None:
    registry.manifests[("library/broken", "latest")] = b"<html>Service Unavailable</html>"
    puller = new_puller(tmp_path / "store")
    with pytest.raises(PullError) as excinfo:
        run(puller, "broken", insecure=True)
    assert excinfo.value.status == 502
    assert f"the manifest of 'broken:latest' from {registry.url} is not JSON" in str(excinfo.value)
    assert puller.store.list_models() == [] and blob_gets(registry) == []


def test_layer_of_an_unknown_media_type(tmp_path: Path, registry: RegistryServer, tiny: Path) -> None:
    registry.publish("library/future", "latest", [(MEDIA_MODEL, tiny),
                                                  ("application/vnd.ollama.image.tensor", b"\0" * 64)])
    puller = new_puller(tmp_path / "store")
    with pytest.raises(PullError) as excinfo:
        run(puller, "future", insecure=True)
    message = str(excinfo.value)
    assert "a layer of media type 'application/vnd.ollama.image.tensor', which localllm cannot use" in message
    assert puller.store.list_models() == [] and blob_gets(registry) == []


def test_params_layer_that_is_not_json_is_refused(tmp_path: Path, registry: RegistryServer, tiny: Path) -> None:
    registry.publish("library/badparams", "latest", [(MEDIA_MODEL, tiny), (MEDIA_PARAMS, b"temperature 0.1")])
    puller = new_puller(tmp_path / "store")
    with pytest.raises(PullError, match=r"the application/vnd.ollama.image.params layer is not JSON"):
        run(puller, "badparams", insecure=True)
    assert puller.store.list_models() == []


def test_registry_that_stops_mid_blob_is_resumed_with_range(tmp_path: Path, registry: RegistryServer,
                                                            tiny: Path) -> None:
    manifest = registry.publish("library/tiny", "1b", [(MEDIA_MODEL, tiny)])
    model_digest = descriptors(manifest)[0]["digest"]
    cut = tiny.stat().st_size // 3
    registry.cut_next(model_digest, cut)
    puller = new_puller(tmp_path / "store")
    with pytest.raises(PullError, match="interrupted after .* pull again to resume") as excinfo:
        run(puller, "tiny:1b", insecure=True)
    assert excinfo.value.status == 502
    assert puller.store.list_models() == []
    partial = puller.store.partial_dir / f"registry-{model_digest[7:]}.part"
    kept = partial.stat().st_size
    assert 0 < kept <= cut

    events = run(puller, "tiny:1b", insecure=True)
    assert events[-1] == {"status": "success"}
    assert [r for blob, r in blob_gets(registry) if blob == model_digest] == [None, f"bytes={kept}-"]
    completed = [e["completed"] for e in events if e.get("digest") == model_digest]
    assert completed[0] >= kept and completed[-1] == tiny.stat().st_size
    assert puller.store.verify() == [] and not partial.exists()


@pytest.mark.parametrize("exchange", [True, False], ids=["token-exchange", "direct-token"])
def test_registry_that_demands_a_token(tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch,
                                       exchange: bool) -> None:
    monkeypatch.delenv("LOCALLLM_REGISTRY_TOKEN", raising=False)
    with RegistryServer(tmp_path / "registry", token="s3cret", exchange=exchange) as server:
        monkeypatch.setenv("LOCALLLM_REGISTRY", server.url)
        server.publish("library/private", "latest", [(MEDIA_MODEL, tiny)])
        puller = new_puller(tmp_path / "store")
        with pytest.raises(PullError) as excinfo:
            run(puller, "private", insecure=True)
        assert excinfo.value.status == 403
        assert "refused to send the manifest: unauthorized" in str(excinfo.value)
        assert "set LOCALLLM_REGISTRY_TOKEN" in str(excinfo.value)

        monkeypatch.setenv("LOCALLLM_REGISTRY_TOKEN", "wrong")
        with pytest.raises(PullError, match="the token from LOCALLLM_REGISTRY_TOKEN was not accepted"):
            run(new_puller(tmp_path / "store"), "private", insecure=True)

        monkeypatch.setenv("LOCALLLM_REGISTRY_TOKEN", "s3cret")
        puller = new_puller(tmp_path / "store")
        assert run(puller, "private", insecure=True)[-1] == {"status": "success"}
        assert puller.store.verify() == []
        if exchange:
            assert server.token_requests == [None, "Bearer wrong", "Bearer s3cret"]


@pytest.fixture
def target(tmp_path: Path) -> Iterator[RegistryServer]:
    with RegistryServer(tmp_path / "target") as server:
        yield server


def pulled(tmp_path: Path, registry: RegistryServer, tiny: Path) -> Puller:
    """A store holding tiny:1b (model, template and params layers) pulled from ``registry``."""
    registry.publish("library/tiny", "1b", [(MEDIA_MODEL, tiny), (MEDIA_TEMPLATE, b"{{ .Prompt }}"),
                                            (MEDIA_PARAMS, b'{"temperature": 0}')])
    puller = new_puller(tmp_path / "store")
    assert run(puller, "tiny:1b", insecure=True)[-1] == {"status": "success"}
    return puller


def test_push_uploads_blobs_then_the_manifest_and_skips_what_the_registry_has(
    tmp_path: Path, registry: RegistryServer, target: RegistryServer, tiny: Path
) -> None:
    puller = pulled(tmp_path, registry, tiny)
    name = f"{target.host}/me/tiny:v1"
    puller.store.copy(ModelName.parse("tiny:1b"), ModelName.parse(name))
    local = puller.store.read_manifest_bytes(ModelName.parse(name))
    pusher = Pusher(puller.store, load_settings())

    events = push(pusher, name, insecure=True)

    statuses = [e["status"] for e in events]
    assert statuses[0] == "retrieving manifest" and statuses[-2:] == ["pushing manifest", "success"]
    for descriptor in descriptors(local):
        progress = [e for e in events if e.get("digest") == descriptor["digest"]]
        assert {e["status"] for e in progress} == {f"pushing {descriptor['digest'][7:19]}"}
        assert progress[-1]["completed"] == progress[-1]["total"] == descriptor["size"]
        assert target.has_blob(descriptor["digest"])
    assert target.manifests[("me/tiny", "v1")] == local
    methods = [(method, path.split("/blobs/")[-1][:7]) for method, path, _ in target.requests]
    assert methods.count(("POST", "uploads")) == len(descriptors(local))

    before = len(target.requests)
    assert push(pusher, name, insecure=True)[-1] == {"status": "success"}
    assert {method for method, _path, _range in target.requests[before:]} == {"HEAD", "PUT"}  # blobs skipped

    fresh = new_puller(tmp_path / "fresh")  # and what was pushed pulls back as the same model
    assert run(fresh, name, insecure=True)[-1] == {"status": "success"}
    assert fresh.store.manifest_digest(ModelName.parse(name)) == puller.store.manifest_digest(ModelName.parse(name))


def test_push_to_a_registry_that_refuses(tmp_path: Path, registry: RegistryServer, target: RegistryServer,
                                         tiny: Path) -> None:
    puller = pulled(tmp_path, registry, tiny)
    name = f"{target.host}/me/tiny:v1"
    puller.store.copy(ModelName.parse("tiny:1b"), ModelName.parse(name))
    target.refuse_push = True
    before = store_files(puller)
    with pytest.raises(RegistryError) as excinfo:
        push(Pusher(puller.store, load_settings()), name, insecure=True)
    assert excinfo.value.status == 403
    assert f"the registry http://{target.host} (me/tiny) denied the request to start an upload" in str(excinfo.value)
    assert target.manifests == {}
    assert store_files(puller) == before


def test_push_takes_the_token_configured_for_its_host_only(tmp_path: Path, registry: RegistryServer, tiny: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    puller = pulled(tmp_path, registry, tiny)
    with RegistryServer(tmp_path / "private", token="s3cret") as private:
        name = f"{private.host}/me/tiny:v1"
        puller.store.copy(ModelName.parse("tiny:1b"), ModelName.parse(name))
        monkeypatch.setenv("LOCALLLM_REGISTRY_TOKEN", "s3cret")  # the default registry's: not sent elsewhere
        with pytest.raises(RegistryError) as excinfo:
            push(Pusher(puller.store, load_settings()), name, insecure=True)
        assert excinfo.value.status == 403
        assert f"refused to check blob {tiny_digest(tiny)[7:19]}: unauthorized; set LOCALLLM_REGISTRY_TOKENS " \
               f"({private.host}=<token>)" in str(excinfo.value)  # a HEAD's 401 has no body to quote
        assert private.manifests == {} and private.token_requests == [None]

        monkeypatch.setenv("LOCALLLM_REGISTRY_TOKENS", f"example.com=other, {private.host}=s3cret")
        assert push(Pusher(puller.store, load_settings()), name, insecure=True)[-1] == {"status": "success"}
        assert ("me/tiny", "v1") in private.manifests
        assert private.token_requests[1:] == ["Bearer s3cret"] * (len(private.token_requests) - 1)


def test_push_of_a_model_that_is_not_there(tmp_path: Path, registry: RegistryServer) -> None:
    with pytest.raises(RegistryError) as excinfo:
        push(Pusher(new_puller(tmp_path).store, load_settings()), "missing:1b", insecure=True)
    assert excinfo.value.status == 404 and "model 'missing:1b' not found" in str(excinfo.value)


HUGE = 64 << 20  # bytes of a hostile answer: read whole, it shows in the peak memory


def peak_memory_of(action: Callable[[], object]) -> tuple[BaseException | None, int]:
    """What ``action`` raised (None if nothing), and the most memory Python held while it ran."""
    tracemalloc.start()
    try:
        action()
        raised = None
    except Exception as exc:  # noqa: BLE001 - the caller checks what it is
        raised = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return raised, peak


ERROR = json.dumps(registry_errors("UNKNOWN", "it broke")).encode()


def test_a_huge_error_body_is_read_only_to_its_bound(tmp_path: Path, registry: RegistryServer) -> None:
    registry.answer_padded("/v2/library/tiny/manifests/1b", 500, ERROR, HUGE)  # valid JSON: spaces may follow
    raised, peak = peak_memory_of(lambda: run(new_puller(tmp_path / "store"), "tiny:1b", insecure=True))
    assert isinstance(raised, PullError), raised
    assert f"could not send the manifest: HTTP 500: (an answer larger than {MAX_ANSWER_BYTES} bytes, not read " \
           "further)" in str(raised)
    assert peak < 16 << 20, f"the pull held {peak} bytes"


@pytest.mark.parametrize("exchange", [True, False], ids=["token-exchange", "direct-token"])
def test_a_huge_challenge_is_read_only_to_its_bound(tmp_path: Path, registry: RegistryServer, exchange: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx reads a 401's body before answering the challenge: that read is bounded too."""
    monkeypatch.setenv("LOCALLLM_REGISTRY_TOKEN", "s3cret")
    challenge = f'Bearer realm="{registry.url}/token",service="x"' if exchange else 'Bearer error="invalid_token"'
    registry.answer_padded("/v2/library/tiny/manifests/1b", 401, ERROR, HUGE, {"WWW-Authenticate": challenge})
    registry.answer_padded("/token", 200, b'{"token": "granted"}', 100)
    raised, peak = peak_memory_of(lambda: run(new_puller(tmp_path / "store"), "tiny:1b", insecure=True))
    assert isinstance(raised, PullError), raised
    assert "refused to send the manifest: unauthorized" in str(raised)
    assert f"larger than {MAX_ANSWER_BYTES} bytes" in str(raised)
    assert peak < 16 << 20, f"the pull held {peak} bytes"


def test_a_huge_token_answer_is_refused_naming_the_bound(tmp_path: Path, registry: RegistryServer) -> None:
    registry.answer_padded("/v2/library/tiny/manifests/1b", 401, ERROR, len(ERROR),
                           {"WWW-Authenticate": f'Bearer realm="{registry.url}/token",service="x"'})
    registry.answer_padded("/token", 200, b'{"token": "granted"', HUGE)  # never closed: no end to wait for
    raised, peak = peak_memory_of(lambda: run(new_puller(tmp_path / "store"), "tiny:1b", insecure=True))
    assert isinstance(raised, PullError), raised
    assert f"the registry's token service {registry.url}/token sent an answer larger than {MAX_ANSWER_BYTES} " \
           "bytes" in str(raised)
    assert peak < 16 << 20, f"the pull held {peak} bytes"


def test_a_huge_answer_to_a_push_is_read_only_to_its_bound(tmp_path: Path, registry: RegistryServer,
                                                          target: RegistryServer, tiny: Path) -> None:
    puller = pulled(tmp_path, registry, tiny)
    name = f"{target.host}/me/tiny:v1"
    puller.store.copy(ModelName.parse("tiny:1b"), ModelName.parse(name))
    target.answer_padded("/v2/me/tiny/blobs/uploads/", 500, ERROR, HUGE)
    raised, peak = peak_memory_of(lambda: push(Pusher(puller.store, load_settings()), name, insecure=True))
    assert isinstance(raised, RegistryError), raised
    assert f"could not start an upload: HTTP 500: (an answer larger than {MAX_ANSWER_BYTES} bytes" in str(raised)
    assert peak < 16 << 20, f"the push held {peak} bytes"
    assert target.manifests == {}
