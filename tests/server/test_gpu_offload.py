"""GPU offload on a real ggml GPU backend: a Vulkan build of llama.cpp on Mesa's software device (llvmpipe).

The Vulkan build is made once into the test cache (``support.vulkan``; minutes
the first time); where it cannot be made, these tests skip saying why. The
software device is a GPU to ggml (device buffers, its own arithmetic), so the
layer split, ``ps``, the planner's memory accounting and the fallbacks run
for real; it is slower than the CPU, which is why localllm only uses it when
asked for (``num_gpu``, or naming it in ``LOCALLLM_GPU_MEMORY``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.daemon import Daemon
from support.engine_builds import LLVMPIPE_ICD, EngineBuildUnavailable, vulkan_env, vulkan_site
from support.offload import (MOE_OPTIONS, check_experts_stay_on_the_cpu, check_the_last_layers_experts_fit,
                             cpu_experts, generate, layers_by_device, loaded_model, moe_model, moe_room,
                             runner_command, start_daemon, top_cosine, wait_for_log)
from support.workers import Worker

from localllm.config import SettingsError, parse_gpu_memory

# The first test builds the Vulkan engine (minutes on 2 cores) in its fixture: more than the suite's 300 s.
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def vulkan() -> dict[str, str]:
    """The environment that runs a daemon on the Vulkan build (built on first use)."""
    try:
        return vulkan_env(vulkan_site())
    except EngineBuildUnavailable as exc:
        pytest.skip(f"no Vulkan build of llama.cpp here: {exc}")


@pytest.fixture(scope="module")
def gpu_daemon(vulkan, smollm2_path, tmp_path_factory) -> Iterator[Daemon]:
    """A daemon on the Vulkan build, the software device listed and nothing asked of it."""
    daemon = start_daemon(tmp_path_factory.mktemp("gpu"), smollm2_path, **vulkan)
    try:
        yield daemon
    finally:
        daemon.stop()


def test_the_software_device_is_listed_with_its_memory_and_not_used_by_default(gpu_daemon):
    listed = wait_for_log(gpu_daemon, r"devices: Vulkan0 \((llvmpipe.*?), ([0-9.]+) GiB free, software")
    assert float(listed.group(2)) > 0
    generate(gpu_daemon)
    model = loaded_model(gpu_daemon)
    assert model["size_vram"] == 0 and model["processor"] == "100% CPU" and layers_by_device(model) == {"CPU": 30}
    assert "Vulkan0 is a software device" in model["engine_reason"]


def test_num_gpu_puts_that_many_layers_on_the_device_and_ps_shows_the_split(gpu_daemon):
    cpu = generate(gpu_daemon, engine="llama.cpp", num_gpu=0)
    # No layer on the GPU: llama.cpp is told to use none, not even for a prompt's batches (its op offload).
    assert "--no-gpu" in runner_command(gpu_daemon)
    half = generate(gpu_daemon, engine="llama.cpp", num_gpu=15)
    model = loaded_model(gpu_daemon)
    assert layers_by_device(model) == {"CPU": 15, "Vulkan0": 15}
    assert 0 < model["size_vram"] < model["size"] and model["processor"].endswith("CPU/GPU")
    assert half["response"] == cpu["response"]  # same greedy text with half the layers on the device
    ps = subprocess.run([sys.executable, "-m", "localllm", "ps"], capture_output=True, text=True, timeout=60,
                        env={**gpu_daemon.env})
    assert "LAYERS" in ps.stdout and "15 Vulkan0" in ps.stdout and "CPU/GPU" in ps.stdout, ps.stdout
    measured = wait_for_log(gpu_daemon, r"smol:latest on Vulkan0 took ([0-9]+) MiB, estimated ([0-9]+) MiB")
    assert 0 < int(measured.group(1)) <= model["size_vram"] >> 20  # within the plan's estimate


def test_every_layer_on_the_device_agrees_with_the_cpu_on_the_top_tokens(gpu_daemon):
    cpu = generate(gpu_daemon, engine="llama.cpp", num_gpu=0)
    full = generate(gpu_daemon, engine="llama.cpp", num_gpu=31)
    assert loaded_model(gpu_daemon)["processor"] == "100% GPU"
    # The software device's arithmetic differs from the CPU's: the first token and its distribution agree.
    assert full["logprobs"][0]["token"] == cpu["logprobs"][0]["token"]
    assert top_cosine(full["logprobs"][0], cpu["logprobs"][0]) > 0.99


def test_num_gpu_in_a_modelfile_is_honoured_and_clamped_to_the_layers_with_a_note(gpu_daemon, smollm2_path):
    gpu_daemon.create("smol-gpu", f"FROM {smollm2_path}\nPARAMETER num_gpu 99\nPARAMETER engine llama.cpp")
    generate(gpu_daemon, model="smol-gpu")
    model = loaded_model(gpu_daemon)
    assert layers_by_device(model) == {"Vulkan0": 30} and model["processor"] == "100% GPU"
    assert "num_gpu 99 is more than the model's 31 layers" in model["engine_reason"]
    generate(gpu_daemon, model="smol-gpu", num_gpu=4)  # the request's num_gpu over the Modelfile's: a reload
    assert layers_by_device(loaded_model(gpu_daemon)) == {"CPU": 26, "Vulkan0": 4}


def test_serve_logs_the_devices_of_a_cpu_build(daemon):
    wait_for_log(daemon, r"devices: no GPU device \(layers run on the CPU\)")  # the environment's own build


@pytest.mark.parametrize("option", ["num_gpu", "n_cpu_moe"])
@pytest.mark.parametrize("value, problem", [(-2, "must be -1"), (2.5, "whole number"), ("all", "whole number")])
def test_a_bad_layer_count_is_a_400_naming_it(daemon, option, value, problem):
    response = httpx.post(f"{daemon.url}/api/generate", timeout=60, json={
        "model": "smollm2:135m", "prompt": "Hi", "stream": False, "options": {option: value}})
    assert response.status_code == 400 and option in response.json()["error"]
    assert problem in response.json()["error"]


def test_a_device_named_with_a_memory_cap_gets_the_layers_that_fit_their_kv_counted(vulkan, smollm2_path, tmp_path):
    daemon = start_daemon(tmp_path, smollm2_path, LOCALLLM_GPU_MEMORY="Vulkan0=520M", **vulkan)
    try:
        generate(daemon, num_ctx=1024)
        short = layers_by_device(loaded_model(daemon))
        generate(daemon, num_ctx=8192)  # four times the KV cache: fewer layers fit the cap
        long = layers_by_device(loaded_model(daemon))
        assert 0 < long["Vulkan0"] < short["Vulkan0"] < 30 and long["CPU"] + long["Vulkan0"] == 30
        # a dense model: whole layers, as before there were experts to keep apart
        assert loaded_model(daemon)["placement"] == "" and "--cpu-experts" not in runner_command(daemon)
        assert 0 < loaded_model(daemon)["size_vram"] <= 520 << 20
        assert "software device" not in loaded_model(daemon)["engine_reason"]  # named, so used
        generate(daemon, num_gpu=0)  # no layer on the GPU: the engine is chosen as on a CPU-only machine
        cpu = loaded_model(daemon)
        assert layers_by_device(cpu) == {"CPU": 30} and "num_gpu 0 keeps every layer on the CPU" in cpu["engine_reason"]
        assert cpu["engine"] == "native" or "not measured faster" in cpu["engine_reason"]
    finally:
        daemon.stop()


def test_a_device_that_refuses_the_memory_mid_load_falls_back_to_the_cpu(vulkan, smollm2_path, tmp_path):
    # The device refuses every buffer over 1 KiB: the weights load, then llama.cpp's KV cache fails on it.
    daemon = start_daemon(tmp_path, smollm2_path, GGML_VK_FORCE_MAX_BUFFER_SIZE="1024", **vulkan)
    try:
        answer = generate(daemon, num_gpu=10)
        assert answer["response"]
        model = loaded_model(daemon)
        assert model["size_vram"] == 0 and "the GPU load failed" in model["engine_reason"]
        assert re.search(r"loading smol:latest with 10 layers on Vulkan0 failed: .*; loading it on the CPU instead",
                         daemon.log_path.read_text())
        generate(daemon, num_gpu=10)  # asked again: served by the runner on the CPU, not loaded again
        assert "the GPU load failed" in loaded_model(daemon)["engine_reason"]
    finally:
        daemon.stop()


def test_a_device_gone_between_listing_and_load_falls_back_to_the_cpu(vulkan, smollm2_path, tmp_path):
    icd = tmp_path / "lvp_icd.json"
    shutil.copy(LLVMPIPE_ICD, icd)
    daemon = start_daemon(tmp_path / "d", smollm2_path, **{**vulkan, "VK_ICD_FILENAMES": str(icd)})
    try:
        wait_for_log(daemon, r"devices: Vulkan0")  # listed while the driver was there
        icd.unlink()  # the driver goes away: the runner about to load finds no Vulkan device
        answer = generate(daemon, num_gpu=5)
        assert answer["response"] and loaded_model(daemon)["size_vram"] == 0
        assert "no device 'Vulkan0' here" in loaded_model(daemon)["engine_reason"]
    finally:
        daemon.stop()


def test_a_vulkan_build_without_a_vulkan_driver_runs_on_the_cpu(vulkan, smollm2_path, tmp_path):
    daemon = start_daemon(tmp_path, smollm2_path, **{**vulkan, "VK_ICD_FILENAMES": str(tmp_path / "no-driver.json")})
    try:
        wait_for_log(daemon, r"devices: no GPU device")
        on_vulkan_build = generate(daemon, engine="llama.cpp", num_gpu=8)
        model = loaded_model(daemon)
        assert model["size_vram"] == 0 and "no GPU device" in model["engine_reason"]
    finally:
        daemon.stop()
    cpu_build = start_daemon(tmp_path / "cpu", smollm2_path)  # the environment's own CPU build of llama.cpp
    try:
        assert generate(cpu_build, engine="llama.cpp")["response"] == on_vulkan_build["response"]
    finally:
        cpu_build.stop()


def test_gpu_layers_with_a_worker_keep_the_planned_device_order(vulkan, smollm2_path, tmp_path):
    worker = Worker(tmp_path)
    daemon = start_daemon(tmp_path / "d", smollm2_path, LOCALLLM_WORKERS=worker.address, **vulkan)
    try:
        cpu = generate(daemon, engine="llama.cpp", num_gpu=0, num_worker_layers=0)
        split = generate(daemon, num_gpu=10, num_worker_layers=5)
        layers = layers_by_device(loaded_model(daemon))
        assert layers == {"CPU": 15, "Vulkan0": 10, f"{worker.address}#0": 5}
        command = runner_command(daemon)
        devices = [command[i + 1] for i, arg in enumerate(command) if arg == "--device"]
        assert devices == [f"{worker.address}#0", "Vulkan0", "CPU"]  # workers, then the GPU, the head on the CPU
        assert command[command.index("--tensor-split") + 1] == "5,10,1"
        assert split["response"] == cpu["response"]
    finally:
        daemon.stop()
        worker.kill()


@pytest.mark.parametrize("text, problem", [
    ("Vulkan0=lots", "Vulkan0 must be a size"),
    ("6G,6G", "each device once"),
    ("Vulkan0=", "has no size"),
    ("bad name=1G", "NAME=SIZE"),
    ("Vulkan0=-1G", "must not be negative"),
])
def test_a_malformed_gpu_memory_cap_is_refused_naming_it(text, problem):
    with pytest.raises(SettingsError, match=re.escape(problem)):
        parse_gpu_memory(text)


def test_gpu_memory_caps_parse_by_device_or_for_all():
    assert parse_gpu_memory("CUDA0=6G, Vulkan1=1500M") == {"CUDA0": 6 << 30, "Vulkan1": 1500 << 20}
    assert parse_gpu_memory("2G") == {"*": 2 << 30}
    assert parse_gpu_memory("") == {}


def test_a_malformed_gpu_memory_cap_stops_the_daemon_naming_the_setting(tmp_path):
    with pytest.raises(RuntimeError, match="LOCALLLM_GPU_MEMORY: Vulkan0 must be a size"):
        Daemon(tmp_path, LOCALLLM_GPU_MEMORY="Vulkan0=lots").start()


# --- mixture-of-experts models: experts on the CPU, the rest on the device ------------------------------------

@pytest.fixture(scope="module")
def moe_path(smollm2_path, tmp_path_factory) -> Path:
    return moe_model(tmp_path_factory.mktemp("moe"), smollm2_path)


def test_a_moe_model_over_the_cap_keeps_its_experts_on_the_cpu_and_the_rest_on_the_device(vulkan, moe_path, tmp_path):
    check_experts_stay_on_the_cpu(tmp_path, moe_path, "Vulkan0", vulkan)


def test_a_cap_with_room_for_some_experts_puts_the_last_layers_experts_on_the_device(vulkan, moe_path, tmp_path):
    check_the_last_layers_experts_fit(tmp_path, moe_path, "Vulkan0", vulkan)


def test_n_cpu_moe_in_a_modelfile_or_a_request_fixes_the_first_layers_experts_on_the_cpu(vulkan, moe_path, tmp_path):
    daemon = start_daemon(tmp_path, moe_path, LOCALLLM_GPU_MEMORY="Vulkan0=4G", **vulkan)
    try:
        daemon.create("moe4", f"FROM {moe_path}\nPARAMETER n_cpu_moe 4")
        generate(daemon, model="moe4", **MOE_OPTIONS)
        model = loaded_model(daemon)
        assert model["placement"] == "GPU: attention all 6 layers, experts 2 of 6; CPU: experts 4 of 6"
        assert cpu_experts(daemon) == "0,1,2,3" and "(n_cpu_moe 4)" in model["engine_reason"]
        generate(daemon, model="moe4", n_cpu_moe=0, **MOE_OPTIONS)  # the request's over the Modelfile's: a reload
        assert loaded_model(daemon)["placement"] == "GPU: attention all 6 layers, experts all 6"
        assert cpu_experts(daemon) is None
    finally:
        daemon.stop()


def test_a_moe_model_that_needs_a_worker_splits_whole_layers(vulkan, moe_path, tmp_path):
    worker = Worker(tmp_path)
    daemon = start_daemon(tmp_path / "d", moe_path, LOCALLLM_WORKERS=worker.address,
                          LOCALLLM_GPU_MEMORY=f"Vulkan0={moe_room(moe_path, 0.5)}", **vulkan)
    try:
        cpu = generate(daemon, engine="llama.cpp", num_gpu=0, num_worker_layers=0, **MOE_OPTIONS)
        split = generate(daemon, num_worker_layers=2, **MOE_OPTIONS)
        model = loaded_model(daemon)
        layers = layers_by_device(model)
        assert layers[f"{worker.address}#0"] == 2 and layers["Vulkan0"] >= 1 and sum(layers.values()) == 6
        assert cpu_experts(daemon) is None and "the experts stay with their layers" in model["engine_reason"]
        assert split["response"] == cpu["response"]
    finally:
        daemon.stop()
        worker.kill()
