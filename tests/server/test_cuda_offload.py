"""GPU offload on an NVIDIA GPU: a CUDA build of llama.cpp made ahead, named by ``$LOCALLLM_CUDA_SITE``.

No machine of the suite's has a GPU, so these tests skip (saying why) unless
that variable names a CUDA build and ``nvidia-smi`` lists a device; they run
on a lent GPU machine through ``scripts/device/cuda_check.sh`` (which builds
llama-cpp-python for CUDA there, then runs this module and the offload
benchmark). Unlike Vulkan's software device, a CUDA device is used by default:
every layer that fits goes to it. Its arithmetic differs from the CPU's, so
the first greedy token and the top-token distribution are what must agree.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import Daemon
from support.engine_builds import EngineBuildUnavailable, cuda_env
from support.offload import (check_experts_stay_on_the_cpu, check_the_last_layers_experts_fit, generate,
                             layers_by_device, loaded_model, moe_model, runner_command, start_daemon, top_cosine,
                             wait_for_log)

LAYERS = 30  # SmolLM2-135M's repeating layers; num_gpu counts the output head as one more


@pytest.fixture(scope="module")
def cuda() -> dict[str, str]:
    """The environment that runs a daemon on the CUDA build."""
    try:
        return cuda_env()
    except EngineBuildUnavailable as exc:
        pytest.skip(f"no CUDA build of llama.cpp with a CUDA device here: {exc}")


@pytest.fixture(scope="module")
def cuda_daemon(cuda, smollm2_path, tmp_path_factory) -> Iterator[Daemon]:
    """A daemon on the CUDA build with nothing asked of the device."""
    daemon = start_daemon(tmp_path_factory.mktemp("cuda"), smollm2_path, **cuda)
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def on_cpu(cuda_daemon) -> dict:
    """The greedy completion with every layer on the CPU (``num_gpu 0``), the reference for the device's."""
    answer = generate(cuda_daemon, engine="llama.cpp", num_gpu=0)
    # No layer on the GPU: llama.cpp is told to use none, not even for a prompt's batches (its op offload).
    assert "--no-gpu" in runner_command(cuda_daemon)
    assert layers_by_device(loaded_model(cuda_daemon)) == {"CPU": LAYERS}
    return answer


def _agree(device: dict, cpu: dict, label: str) -> None:
    """The first greedy token and its top-10 distribution agree with the CPU's (printed for the record)."""
    cosine = top_cosine(device["logprobs"][0], cpu["logprobs"][0])
    print(f"\n{label}: {device['response']!r}; CPU: {cpu['response']!r}; same text: "
          f"{device['response'] == cpu['response']}; first-token top-10 cosine {cosine:.6f}")
    assert device["logprobs"][0]["token"] == cpu["logprobs"][0]["token"]
    assert cosine > 0.99


def test_the_cuda_device_is_listed_and_takes_every_layer_by_default(cuda_daemon):
    listed = wait_for_log(cuda_daemon, r"devices: CUDA0 \(([^,]*), ([0-9.]+) GiB free\)")
    print(f"\nlisted: {listed.group(0)}")
    assert float(listed.group(2)) > 1
    assert generate(cuda_daemon)["response"]
    model = loaded_model(cuda_daemon)
    print(f"ps: {model}")
    assert layers_by_device(model) == {"CUDA0": LAYERS} and model["processor"] == "100% GPU"
    assert 0 < model["size_vram"] <= model["size"]
    assert model["engine"] == "llama.cpp" and "layers offloaded to a GPU" in model["engine_reason"]
    measured = wait_for_log(cuda_daemon, r"smol:latest on CUDA0 took ([0-9]+) MiB, estimated ([0-9]+) MiB")
    print(f"measured: {measured.group(0)}")
    assert int(measured.group(1)) > 0


def test_every_layer_on_the_device_agrees_with_the_cpu_on_the_top_tokens(cuda_daemon, on_cpu):
    full = generate(cuda_daemon, engine="llama.cpp", num_gpu=LAYERS + 1)
    model = loaded_model(cuda_daemon)
    assert model["processor"] == "100% GPU" and layers_by_device(model) == {"CUDA0": LAYERS}
    _agree(full, on_cpu, "all layers on CUDA0")


def test_num_gpu_splits_the_layers_and_ps_shows_the_split(cuda_daemon, on_cpu):
    half = generate(cuda_daemon, engine="llama.cpp", num_gpu=15)
    model = loaded_model(cuda_daemon)
    assert layers_by_device(model) == {"CPU": 15, "CUDA0": 15}
    assert 0 < model["size_vram"] < model["size"] and model["processor"].endswith("CPU/GPU")
    _agree(half, on_cpu, "15 layers on CUDA0")
    ps = subprocess.run([sys.executable, "-m", "localllm", "ps"], capture_output=True, text=True, timeout=60,
                        env={**cuda_daemon.env})
    print(ps.stdout)
    assert "LAYERS" in ps.stdout and "15 CUDA0" in ps.stdout and "CPU/GPU" in ps.stdout, ps.stdout


def test_a_memory_cap_on_the_device_gets_the_layers_that_fit_their_kv_counted(cuda, smollm2_path, tmp_path):
    daemon = start_daemon(tmp_path, smollm2_path, LOCALLLM_GPU_MEMORY="CUDA0=520M", **cuda)
    try:
        generate(daemon, num_ctx=1024)
        short = layers_by_device(loaded_model(daemon))
        generate(daemon, num_ctx=8192)  # four times the KV cache: fewer layers fit the cap
        long = layers_by_device(loaded_model(daemon))
        print(f"\nunder a 520M cap: {short} at 1024 tokens, {long} at 8192")
        assert 0 < long["CUDA0"] < short["CUDA0"] < LAYERS and long["CPU"] + long["CUDA0"] == LAYERS
        assert 0 < loaded_model(daemon)["size_vram"] <= 520 << 20
        log = daemon.log_path.read_text(errors="replace")
        print("\n".join(re.findall(r".*on CUDA0 took .*", log)))
    finally:
        daemon.stop()


# --- a mixture-of-experts model over the cap: the experts on the CPU, the rest on the device ---------------------

@pytest.fixture(scope="module")
def moe_path(smollm2_path, tmp_path_factory) -> Path:
    return moe_model(tmp_path_factory.mktemp("moe"), smollm2_path)


def test_a_moe_model_over_the_cap_keeps_its_experts_on_the_cpu_and_the_rest_on_the_device(cuda, moe_path, tmp_path):
    check_experts_stay_on_the_cpu(tmp_path, moe_path, "CUDA0", cuda)


def test_a_cap_with_room_for_some_experts_puts_the_last_layers_experts_on_the_device(cuda, moe_path, tmp_path):
    check_the_last_layers_experts_fit(tmp_path, moe_path, "CUDA0", cuda)
