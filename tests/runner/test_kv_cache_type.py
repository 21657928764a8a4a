"""LOCALLLM_KV_CACHE_TYPE and LOCALLLM_FLASH_ATTENTION on both engines, through the real daemon."""

from __future__ import annotations

import httpx
import pytest

from support.daemon import Daemon
from localllm.gguf import read_gguf
from localllm.server.memory import footprint

MODEL = "smollm2:135m"
GENERATE = {"model": MODEL, "prompt": "The capital of France is", "stream": False,
            "options": {"num_predict": 8, "temperature": 0}}


def _loaded(root, smollm2_path, **env: str) -> tuple[dict, str]:
    """What /api/ps says of the model after one answer, and the answer."""
    daemon = Daemon(root, LOCALLLM_NUM_PARALLEL="1", **env).start()
    try:
        daemon.create(MODEL, f"FROM {smollm2_path}")
        answer = httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120)
        assert answer.status_code == 200, answer.text
        return httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"][0], answer.json()["response"]
    finally:
        daemon.stop()


def test_a_q8_0_cache_with_flash_attention_generates_and_is_counted_smaller(tmp_path, smollm2_path):
    f16, f16_text = _loaded(tmp_path / "f16", smollm2_path, LOCALLLM_ENGINE="llama.cpp")
    q8, q8_text = _loaded(tmp_path / "q8", smollm2_path, LOCALLLM_KV_CACHE_TYPE="q8_0", LOCALLLM_FLASH_ATTENTION="1")
    assert "apply to llama.cpp only" in q8["engine_reason"]  # flash attention takes the model to the engine that has it
    assert q8_text.strip() and f16_text.strip()
    plan = footprint(read_gguf(smollm2_path), f16["context_length"], 1)
    kv_f16 = plan.kv_per_layer * plan.n_layers
    assert f16["size"] - q8["size"] == pytest.approx(kv_f16 * (1 - 34 / 64), rel=0.01)


def test_a_q8_0_cache_stays_on_the_native_engine_and_is_counted_smaller(tmp_path, smollm2_path):
    f16, f16_text = _loaded(tmp_path / "f16", smollm2_path, LOCALLLM_KV_TOKENS="8192")
    q8, q8_text = _loaded(tmp_path / "q8", smollm2_path, LOCALLLM_KV_TOKENS="8192", LOCALLLM_KV_CACHE_TYPE="q8_0")
    assert f16["engine"] == q8["engine"] == "native"
    assert q8_text.strip() and f16_text.strip()
    plan = footprint(read_gguf(smollm2_path), f16["context_length"], 1, kv_tokens=8192)
    assert f16["size"] - q8["size"] == pytest.approx(plan.kv_per_layer * plan.n_layers * (1 - 34 / 64), rel=0.01)


def test_a_q8_0_cache_without_flash_attention_is_refused_on_llama_cpp(tmp_path, smollm2_path):
    daemon = Daemon(tmp_path, LOCALLLM_ENGINE="llama.cpp", LOCALLLM_KV_CACHE_TYPE="q8_0").start()
    try:
        daemon.create(MODEL, f"FROM {smollm2_path}")
        answer = httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120)
        assert 400 <= answer.status_code < 600 and "LOCALLLM_FLASH_ATTENTION=1" in answer.text, answer.text
        assert httpx.get(f"{daemon.url}/api/version", timeout=30).status_code == 200  # the daemon lives on
    finally:
        daemon.stop()


@pytest.mark.parametrize("env,message", [
    ({"LOCALLLM_KV_CACHE_TYPE": "q4_0"}, "LOCALLLM_KV_CACHE_TYPE=q4_0 needs LOCALLLM_FLASH_ATTENTION=1"),
    ({"LOCALLLM_KV_CACHE_TYPE": "f8"}, "LOCALLLM_KV_CACHE_TYPE must be one of f16, q8_0, q4_0"),
    ({"LOCALLLM_FLASH_ATTENTION": "maybe"}, "LOCALLLM_FLASH_ATTENTION must be 1 or 0"),
])
def test_a_cache_setting_that_cannot_be_honoured_stops_the_daemon_with_a_message(tmp_path, env, message):
    with pytest.raises(RuntimeError, match="daemon exited") as info:
        Daemon(tmp_path, **env).start(timeout=60)
    assert message in str(info.value)


def test_parameter_kv_cache_type_loads_a_q8_0_native_runner_and_an_option_reloads_it(tmp_path, smollm2_path):
    daemon = Daemon(tmp_path, LOCALLLM_NUM_PARALLEL="1", LOCALLLM_KV_TOKENS="8192").start()
    try:
        daemon.create(MODEL, f"FROM {smollm2_path}")
        daemon.create("q8", f"FROM {smollm2_path}\nPARAMETER kv_cache_type q8_0\n")

        def ps() -> dict:
            return httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"][0]

        def generate(model: str, **options: str) -> str:
            body = {**GENERATE, "model": model, "options": {**GENERATE["options"], **options}}
            answer = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            return answer.json()["response"]

        assert generate("q8").strip()
        q8 = ps()
        assert q8["engine"] == "native" and "KV blocks of 16" in daemon.log() and ", q8_0)" in daemon.log()
        assert generate(MODEL, kv_cache_type="f16").strip()  # the same weights asked with another KV type
        assert "kv_cache_type f16 is not the q8_0 it was loaded with" in daemon.log()
        f16 = ps()
        assert f16["engine"] == "native"
        plan = footprint(read_gguf(smollm2_path), f16["context_length"], 1, kv_tokens=8192)
        assert f16["size"] - q8["size"] == pytest.approx(plan.kv_per_layer * plan.n_layers * (1 - 34 / 64), rel=0.01)
    finally:
        daemon.stop()


@pytest.mark.parametrize("options,message", [
    ({"kv_cache_type": "f8"}, "option 'kv_cache_type' must be one of f16, q8_0, q4_0, got 'f8'"),
    ({"kv_cache_type": "q4_0"}, "option 'kv_cache_type' q4_0 needs LOCALLLM_FLASH_ATTENTION=1"),
    ({"kv_cache_type": "q8_0", "engine": "llama.cpp"}, "option 'kv_cache_type' q8_0 needs LOCALLLM_FLASH_ATTENTION=1"),
])
def test_a_kv_cache_type_option_that_cannot_be_honoured_is_a_400_naming_it(daemon, options, message):
    body = {**GENERATE, "options": {**GENERATE["options"], **options}}
    answer = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=120)
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text
