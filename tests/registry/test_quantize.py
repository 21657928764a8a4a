"""``create --quantize``: llama.cpp's quantizer on an unquantized model, through the daemon."""

from __future__ import annotations

import tracemalloc

import httpx
import pytest

from support.gguf_builders import F16, build_gguf, kv_string, kv_u8_array, kv_u32, tiny_model
from localllm.gguf import read_gguf
from localllm.registry.quantize import QuantizeError, quantize_gguf


def test_quantize_f16_model_to_q8_0(daemon, tmp_path):
    source = tiny_model(tmp_path / "tiny-f16.gguf", file_type=F16)
    response = httpx.post(f"{daemon.url}/api/create", timeout=120, json={
        "model": "tiny-q8", "modelfile": f"FROM {source}\n", "quantize": "q8_0", "stream": False})
    assert response.status_code == 200, response.text
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "tiny-q8"}).json()
    assert shown["details"]["quantization_level"] == "Q8_0"
    assert read_gguf(source).metadata["general.file_type"] == F16  # the user's file is untouched


def test_quantizing_a_quantized_model_is_refused(daemon, smollm2_path):
    response = httpx.post(f"{daemon.url}/api/create", timeout=120, json={
        "model": "requant", "modelfile": f"FROM {smollm2_path}\n", "quantize": "q4_K_M", "stream": False})
    assert response.status_code == 400
    assert "already quantized" in response.json()["error"]


def test_unknown_quantization_is_refused(daemon, smollm2_path):
    response = httpx.post(f"{daemon.url}/api/create", json={
        "model": "x", "modelfile": f"FROM {smollm2_path}\n", "quantize": "q9_XL"})
    assert response.status_code == 400
    assert "q4_k_m" in response.json()["error"]


def test_the_quantizer_reads_no_metadata_array_whole(tmp_path):
    """A header with a 16 M-item array costs the quantizer's check a few bytes, not a 128 MB list."""
    source = tmp_path / "hostile.gguf"
    source.write_bytes(build_gguf(kv=[kv_string("general.architecture", "llama"), kv_u32("general.file_type", 2),
                                      kv_u8_array("hostile.items", 1 << 24)]))
    tracemalloc.start()
    try:
        with pytest.raises(QuantizeError, match="already quantized"):
            quantize_gguf(source, tmp_path / "out.gguf", "q8_0")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"the check took {peak} bytes"
