"""Which engine runs a model: native by default where it runs the model exactly, llama.cpp otherwise.

Through the real daemon: ``/api/ps`` and its log say which engine a model got
and why; ``PARAMETER engine`` forces either; forcing the native engine where
it cannot run the model is a 400; ``/metrics`` reports the native engine's
KV blocks and cache hit rate.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest

from support.gguf_builders import lora_adapter, tiny_model
from localllm.backends.native import kernels
from localllm.server.engine_choice import MEASURED_ISAS, EngineRefused, choose_engine

SMOLLM2_EMBD, SMOLLM2_LAYERS = 576, 30
BODY = {"prompt": "Name a planet.", "stream": False, "options": {"temperature": 0, "num_predict": 8}}

pytestmark = pytest.mark.skipif(kernels.isa() not in MEASURED_ISAS, reason="the native engine is opt-in on this CPU")


def generate(daemon, model: str, **extra) -> httpx.Response:
    return httpx.post(f"{daemon.url}/api/generate", json={**BODY, "model": model, **extra}, timeout=300)


def loaded(daemon, model: str) -> dict:
    """The generating runner of ``model`` in /api/ps (an embedding runner of the same weights may be there too)."""
    models = httpx.get(f"{daemon.url}/api/ps").json()["models"]
    return next(m for m in models if m["name"] in (model, f"{model}:latest")
                and not m["engine_reason"].startswith("embeddings"))


def test_the_default_model_runs_on_the_native_engine(daemon) -> None:
    assert generate(daemon, "smollm2:135m").status_code == 200
    entry = loaded(daemon, "smollm2:135m")
    assert entry["engine"] == "native"
    assert "runs this model exactly" in entry["engine_reason"]
    assert entry["kv_blocks"]["total"] > 0 and entry["kv_blocks"]["block_size"] == 16
    assert "loading smollm2:135m on native (the native forward runs this model exactly" in daemon.log_path.read_text()
    metrics = httpx.get(f"{daemon.url}/metrics").text
    assert 'localllm_kv_blocks{model="smollm2:135m",engine="native",state="cached"}' in metrics
    assert 'localllm_prefix_cache_hit_ratio{model="smollm2:135m",engine="native"}' in metrics


@pytest.mark.parametrize("fixture", ["qwen3moe_path", "gpt_oss_path"])
def test_a_mixture_of_experts_model_runs_on_the_native_engine(daemon, fixture: str, request) -> None:
    """qwen3moe (Qwen3-30B-A3B, Qwen3-Coder) and gpt-oss (MXFP4 experts) are no longer sent to llama.cpp for their
    experts: /api/ps says why."""
    name = f"tiny-{fixture.removesuffix('_path').replace('_', '-')}"
    daemon.create(name, f"FROM {request.getfixturevalue(fixture)}\n")
    assert generate(daemon, name).status_code == 200
    entry = loaded(daemon, name)
    assert entry["engine"] == "native" and "runs this model exactly" in entry["engine_reason"]


def test_parameter_engine_forces_llama_cpp(daemon, smollm2_path: Path) -> None:
    daemon.create("smollm2-on-llama", f"FROM {smollm2_path}\nPARAMETER engine llama.cpp\n")
    assert generate(daemon, "smollm2-on-llama").status_code == 200
    entry = loaded(daemon, "smollm2-on-llama")
    assert entry["engine"] == "llama.cpp" and entry["engine_reason"] == "forced by the engine setting"
    assert entry["kv_blocks"] == {}


def test_a_lora_adapter_means_llama_cpp_and_forcing_native_is_refused(daemon, smollm2_path: Path, tmp_path: Path) -> None:
    adapter = lora_adapter(tmp_path / "lora.gguf", SMOLLM2_EMBD, SMOLLM2_LAYERS, scale=0.07)  # not test_adapters' bytes
    daemon.create("smollm2-adapted", f"FROM {smollm2_path}\nADAPTER {adapter}\n")
    assert generate(daemon, "smollm2-adapted").status_code == 200
    entry = loaded(daemon, "smollm2-adapted")
    assert entry["engine"] == "llama.cpp" and "LoRA" in entry["engine_reason"]
    refused = generate(daemon, "smollm2-adapted", options={"engine": "native"})
    assert refused.status_code == 400
    assert "native engine cannot run this model" in refused.json()["error"]
    assert "LoRA" in refused.json()["error"]


@pytest.mark.parametrize("scaling", ["linear", "yarn"])
def test_rope_scaling_the_native_forward_lacks_means_llama_cpp(daemon, tmp_path: Path, scaling: str) -> None:
    """A key that changes the maths and that the native forward does not implement means llama.cpp,
    never a silently different model; forcing the native engine on it is refused, naming the key."""
    def scaled(w: gguf.GGUFWriter) -> None:
        w.add_rope_scaling_type(gguf.RopeScalingType(scaling))
        w.add_rope_scaling_factor(4.0)

    path = tiny_model(tmp_path / f"{scaling}.gguf", extra=scaled)
    choice = choose_engine(path, forced=None, adapters=False, embedding=False, gpu_layers=0)
    assert choice.engine == "llama.cpp" and "llama.rope.scaling" in choice.reason
    daemon.create(f"tiny-{scaling}", f"FROM {path}\n")
    refused = generate(daemon, f"tiny-{scaling}", raw=True, options={"engine": "native"})
    assert refused.status_code == 400 and "llama.rope.scaling" in refused.json()["error"]


def test_llama3_rope_factors_and_plain_models_get_the_native_engine(tmp_path: Path, gemma3_path: Path) -> None:
    factors = np.array([1.0, 1.0, 1.5, 2.0, 4.0, 8.0, 8.0, 32.0], dtype=np.float32)
    llama3 = tiny_model(tmp_path / "llama3.gguf", extra=lambda w: w.add_tensor("rope_freqs.weight", factors))
    for path in (llama3, tiny_model(tmp_path / "qwen3.gguf", "qwen3"), gemma3_path):
        assert choose_engine(path, forced=None, adapters=False, embedding=False, gpu_layers=0).engine == "native"
    assert choose_engine(llama3, None, adapters=False, embedding=True, gpu_layers=0).engine == "native"
    assert choose_engine(llama3, None, adapters=False, embedding=False, gpu_layers=4).engine == "llama.cpp"
    with pytest.raises(EngineRefused, match="LoRA"):
        choose_engine(llama3, "native", adapters=True, embedding=False, gpu_layers=0)
