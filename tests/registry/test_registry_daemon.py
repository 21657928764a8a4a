"""Registry models through the real daemon: the ``ollama`` package and the CLI pull, show, run,
list in ps, push and delete a model kept on a loopback registry (tests/support/registry_servers.py).

The daemon's LOCALLLM_REGISTRY is that registry, over plain http, so every pull and
push says ``insecure`` and nothing reaches the internet.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest
from support.daemon import Daemon
from support.registry_servers import RegistryServer

from localllm.registry.store import MEDIA_MODEL, MEDIA_PARAMS

PARAMS = b'{"stop": ["<|im_start|>", "<|im_end|>"], "num_predict": 8}'


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Iterator[RegistryServer]:
    with RegistryServer(tmp_path_factory.mktemp("registry")) as server:
        server.publish("library/smolreg", "135m", [(MEDIA_MODEL, smollm2_path), (MEDIA_PARAMS, PARAMS)])
        yield server


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    with RegistryServer(tmp_path_factory.mktemp("target")) as server:
        yield server


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, registry: RegistryServer) -> Iterator[Daemon]:
    instance = Daemon(tmp_path_factory.mktemp("daemon"), LOCALLLM_REGISTRY=registry.url,
                      LOCALLLM_KEEP_ALIVE="10m").start()
    try:
        yield instance
    finally:
        instance.stop()


def cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "localllm", *args], env=daemon.env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_ollama_client_pulls_shows_runs_pushes_and_deletes(daemon: Daemon, registry: RegistryServer,
                                                           target: RegistryServer) -> None:
    client = ollama.Client(host=daemon.url)
    with pytest.raises(ollama.ResponseError) as refused:
        client.pull("smolreg:135m")
    assert refused.value.status_code == 400 and "plain http; pass --insecure" in refused.value.error

    progress = list(client.pull("smolreg:135m", insecure=True, stream=True))
    statuses = [p.status for p in progress]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert "verifying sha256 digest" in statuses and "writing manifest" in statuses
    model_events = [p for p in progress if p.total == 98_362_432]
    assert model_events and model_events[-1].completed == model_events[-1].total
    assert model_events[-1].status == f"pulling {model_events[-1].digest[7:19]}"

    shown = client.show("smolreg:135m")
    assert shown.details.family == "llama" and shown.details.quantization_level == "Q4_1"
    assert "num_predict" in (shown.parameters or "")
    assert client.generate("smolreg:135m", "Hi").done
    assert "smolreg:135m" in [m.model for m in client.ps().models]

    pushed_name = f"{target.host}/me/smolreg:v1"
    client.copy("smolreg:135m", pushed_name)
    pushing = list(client.push(pushed_name, insecure=True, stream=True))
    assert pushing[0].status == "retrieving manifest" and pushing[-1].status == "success"
    assert "pushing manifest" in [p.status for p in pushing]
    local_id = next(m.digest for m in client.list().models if m.model == pushed_name)
    assert target.manifests[("me/smolreg", "v1")]
    assert client.push(pushed_name, insecure=True).status == "success"  # again: every blob is there already

    client.delete("smolreg:135m")
    names = [m.model for m in client.list().models]
    assert "smolreg:135m" not in names and pushed_name in names
    assert client.generate(pushed_name, "Hi").done  # the copy still has its blobs
    assert hashlib.sha256(target.manifests[("me/smolreg", "v1")]).hexdigest() == local_id


def test_api_errors_from_the_registry(daemon: Daemon, target: RegistryServer) -> None:
    client = ollama.Client(host=daemon.url)
    with pytest.raises(ollama.ResponseError) as missing:
        client.pull("smolreg:70b", insecure=True)
    assert missing.value.status_code == 404 and "has no library/smolreg:70b" in missing.value.error
    with pytest.raises(ollama.ResponseError) as gone:
        client.push("never-made:1b", insecure=True)
    assert gone.value.status_code == 404 and "never-made" in gone.value.error
    response = httpx.post(f"{daemon.url}/api/push", json={"model": "../../x"})
    assert response.status_code == 400


def test_cli_pull_and_push(daemon: Daemon, target: RegistryServer) -> None:
    refused = cli(daemon, "pull", "smolreg:135m")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("Error: ") and "--insecure" in refused.stderr

    pulled = cli(daemon, "pull", "--insecure", "smolreg:135m")
    assert pulled.returncode == 0, pulled.stderr
    assert "pulling manifest" in pulled.stderr and "success" in pulled.stderr
    assert "smolreg:135m" in cli(daemon, "list").stdout

    name = f"{target.host}/cli/smolreg:latest"
    assert cli(daemon, "cp", "smolreg:135m", name).returncode == 0
    pushed = cli(daemon, "push", "--insecure", name)
    assert pushed.returncode == 0, pushed.stderr
    assert "retrieving manifest" in pushed.stderr and "pushing manifest" in pushed.stderr
    assert ("cli/smolreg", "latest") in target.manifests

    target.refuse_push = True
    try:
        refused = cli(daemon, "push", "--insecure", f"{target.host}/cli/smolreg:latest")
    finally:
        target.refuse_push = False
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "denied" in refused.stderr and "Traceback" not in refused.stderr
