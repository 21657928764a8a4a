"""LOCALLLM_KV_CACHE_TYPE and LOCALLLM_FLASH_ATTENTION on the llama.cpp engine, through the real daemon."""

from __future__ import annotations

import httpx
import pytest

from support.daemon import Daemon
from localllm.gguf import read_gguf
from localllm.server.memory import footprint

MODEL = "smollm2:135m"
GENERATE = {"model": MODEL, "prompt": "The capital of France is", "stream": False,
            "options": {"num_predict": 8, "temperature": 0}}


def _loaded_size_and_text(root, smollm2_path, **env: str) -> tuple[int, int, str, str]:
    daemon = Daemon(root, LOCALLLM_NUM_PARALLEL="1", **env).start()
    try:
        daemon.create(MODEL, f"FROM {smollm2_path}")
        answer = httpx.post(f"{daemon.url}/api/generate", json=GENERATE, timeout=120)
        assert answer.status_code == 200, answer.text
        loaded = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"][0]
        return loaded["size"], loaded["context_length"], answer.json()["response"], loaded["engine_reason"]
    finally:
        daemon.stop()


def test_a_q8_0_cache_with_flash_attention_generates_and_is_counted_smaller(tmp_path, smollm2_path):
    f16_size, context, f16_text, _ = _loaded_size_and_text(tmp_path / "f16", smollm2_path, LOCALLLM_ENGINE="llama.cpp")
    q8_size, _, q8_text, why = _loaded_size_and_text(tmp_path / "q8", smollm2_path, LOCALLLM_KV_CACHE_TYPE="q8_0",
                                                     LOCALLLM_FLASH_ATTENTION="1")
    assert "apply to llama.cpp only" in why  # the setting takes the model to the engine that honours it
    assert q8_text.strip() and f16_text.strip()
    f16 = footprint(read_gguf(smollm2_path), context, 1)
    kv_f16 = f16.kv_per_layer * f16.n_layers
    assert f16_size - q8_size == pytest.approx(kv_f16 * (1 - 34 / 64), rel=0.01)


@pytest.mark.parametrize("env,message", [
    ({"LOCALLLM_KV_CACHE_TYPE": "q8_0"}, "LOCALLLM_KV_CACHE_TYPE=q8_0 needs LOCALLLM_FLASH_ATTENTION=1"),
    ({"LOCALLLM_KV_CACHE_TYPE": "f8"}, "LOCALLLM_KV_CACHE_TYPE must be one of f16, q8_0, q4_0"),
    ({"LOCALLLM_FLASH_ATTENTION": "maybe"}, "LOCALLLM_FLASH_ATTENTION must be 1 or 0"),
])
def test_a_cache_setting_that_cannot_be_honoured_stops_the_daemon_with_a_message(tmp_path, env, message):
    with pytest.raises(RuntimeError, match="daemon exited") as info:
        Daemon(tmp_path, **env).start(timeout=60)
    assert message in str(info.value)
