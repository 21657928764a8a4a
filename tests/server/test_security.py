"""Access rules of the daemon: Host header, browser origins, API key, body size."""

from __future__ import annotations

import httpx
import ollama
import openai
import pytest

from support.daemon import Daemon


def test_dns_rebinding_host_is_refused(daemon):
    response = httpx.get(f"{daemon.url}/api/tags", headers={"Host": "evil.example.com"})
    assert response.status_code == 403
    assert "evil.example.com" in response.json()["error"]
    assert httpx.get(f"{daemon.url}/api/tags", headers={"Host": f"localhost:{daemon.port}"}).status_code == 200


def test_foreign_origin_is_refused_and_localhost_allowed(daemon):
    refused = httpx.post(f"{daemon.url}/api/show", json={"model": "smollm2:135m"},
                         headers={"Origin": "https://evil.example.com"})
    assert refused.status_code == 403
    assert "LOCALLLM_ORIGINS" in refused.json()["error"]
    allowed = httpx.get(f"{daemon.url}/api/tags", headers={"Origin": "http://localhost:3000"})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_preflight_for_allowed_origin(daemon):
    response = httpx.options(f"{daemon.url}/api/chat", headers={
        "Origin": "http://127.0.0.1:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "http://127.0.0.1:5173"


def test_body_over_limit_is_413(daemon):
    response = httpx.post(f"{daemon.url}/api/chat", content=b"x" * (33 << 20),
                          headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == 413
    assert "LOCALLLM_MAX_BODY_BYTES" in response.json()["error"]


@pytest.fixture(scope="module")
def keyed_daemon(tmp_path_factory):
    instance = Daemon(tmp_path_factory.mktemp("keyed"), LOCALLLM_API_KEY="s3cret",
                      LOCALLLM_ORIGINS="https://app.example.org").start()
    yield instance
    instance.stop()


def test_api_key_required_except_root(keyed_daemon):
    url = keyed_daemon.url
    assert httpx.get(url).status_code == 200
    assert httpx.get(f"{url}/api/tags").status_code == 401
    assert httpx.get(f"{url}/api/tags", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/api/tags", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert httpx.get(f"{url}/v1/models").json()["error"]["type"] == "authentication_error"


def test_clients_send_the_key(keyed_daemon):
    client = ollama.Client(host=keyed_daemon.url, headers={"Authorization": "Bearer s3cret"})
    assert client.list().models == []
    oai = openai.OpenAI(base_url=f"{keyed_daemon.url}/v1", api_key="s3cret", max_retries=0)
    assert oai.models.list().data == []
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{keyed_daemon.url}/v1", api_key="nope", max_retries=0).models.list()


def test_configured_origin_is_allowed(keyed_daemon):
    response = httpx.get(f"{keyed_daemon.url}/api/tags",
                         headers={"Origin": "https://app.example.org", "Authorization": "Bearer s3cret"})
    assert response.status_code == 200


def test_chunked_body_over_limit_is_413(daemon):
    def chunks():
        for _ in range(40):
            yield b"x" * (1 << 20)

    response = httpx.post(f"{daemon.url}/api/chat", content=chunks(), headers={"content-type": "application/json"},
                          timeout=60)
    assert response.status_code == 413
    assert "LOCALLLM_MAX_BODY_BYTES" in response.json()["error"]


@pytest.fixture(scope="module")
def small_limits_daemon(tmp_path_factory):
    instance = Daemon(tmp_path_factory.mktemp("limits"), LOCALLLM_MAX_BODY_BYTES=str(1 << 20),
                      LOCALLLM_MAX_AUDIO_BYTES=str(4 << 20)).start()
    yield instance
    instance.stop()


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_recordings_have_their_own_larger_limit(small_limits_daemon, chunked):
    """An hour of speech is larger than any chat request: /v1/audio/ takes up to LOCALLLM_MAX_AUDIO_BYTES."""
    url = small_limits_daemon.url

    def upload(size: int) -> httpx.Response:
        recording = b"RIFF" + b"\0" * (size - 4)
        body = (b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nnosuch:1b\r\n--b\r\n"
                b"Content-Disposition: form-data; name=\"file\"; filename=\"talk.wav\"\r\n\r\n" + recording +
                b"\r\n--b--\r\n")
        content = (body[i:i + (1 << 20)] for i in range(0, len(body), 1 << 20)) if chunked else body
        return httpx.post(f"{url}/v1/audio/transcriptions", content=content,
                          headers={"content-type": "multipart/form-data; boundary=b"}, timeout=60)

    past_the_chat_limit = upload(2 << 20)
    assert past_the_chat_limit.status_code != 413 and "nosuch" in past_the_chat_limit.text
    too_long = upload(5 << 20)
    assert too_long.status_code == 413 and "LOCALLLM_MAX_AUDIO_BYTES" in too_long.json()["error"]["message"]
    chat = httpx.post(f"{url}/api/chat", content=b"x" * (2 << 20), headers={"content-type": "application/json"})
    assert chat.status_code == 413 and "LOCALLLM_MAX_BODY_BYTES" in chat.json()["error"]
