"""What the GPU offload tests share, whatever the GPU backend (Vulkan's software device, CUDA): a daemon with
SmolLM2 as ``smol``, a greedy completion with its top logprobs, what ``ps``, the runner and the log say, and the
checks of a mixture-of-experts model's expert split (the experts on the CPU, the rest on the device)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from support.daemon import Daemon
from support.moe_models import qwen3moe_model, room_for

from localllm.gguf import read_gguf
from localllm.server.memory import footprint

PROMPT = "The capital of France is"
MOE_OPTIONS = {"num_ctx": 512, "num_batch": 32}  # a small compute buffer: the experts are most of the bytes


def start_daemon(root: Path, model: Path, **env: str) -> Daemon:
    """A daemon (one model loaded at a time, so ``ps`` shows the last load) with ``model`` as ``smol``."""
    daemon = Daemon(root, LOCALLLM_KEEP_ALIVE="10m", LOCALLLM_MAX_LOADED_MODELS="1", **env).start()
    try:
        daemon.create("smol", f"FROM {model}")
    except BaseException:
        daemon.stop()
        raise
    return daemon


def generate(daemon: Daemon, model: str = "smol", **options) -> dict:
    body = {"model": model, "prompt": PROMPT, "raw": True, "stream": False, "logprobs": True, "top_logprobs": 10,
            "options": {"temperature": 0, "num_predict": 8, **options}}
    response = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return response.json()


def loaded_model(daemon: Daemon) -> dict:
    (model,) = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    return model


def layers_by_device(model: dict) -> dict[str, int]:
    return {entry["device"]: entry["layers"] for entry in model["split"] if entry["layers"]}


def runner_command(daemon: Daemon) -> list[str]:
    """The command line of the daemon's one runner."""
    (pid,) = daemon.runner_pids()
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def wait_for_log(daemon: Daemon, pattern: str) -> re.Match:
    deadline = time.monotonic() + 60
    while not (match := re.search(pattern, daemon.log_path.read_text(errors="replace"))):
        assert time.monotonic() < deadline, daemon.log()
        time.sleep(0.2)
    return match


def top_cosine(a: dict, b: dict) -> float:
    """Cosine of two top-logprob lists as probability vectors over the tokens either names."""
    p = {alt["token"]: math.exp(alt["logprob"]) for alt in a["top_logprobs"]}
    q = {alt["token"]: math.exp(alt["logprob"]) for alt in b["top_logprobs"]}
    tokens = set(p) | set(q)
    dot = sum(p.get(t, 0.0) * q.get(t, 0.0) for t in tokens)
    return dot / math.sqrt(sum(v * v for v in p.values()) * sum(v * v for v in q.values()))



# --- mixture-of-experts models ----------------------------------------------------------------------------------

def moe_model(directory: Path, vocab_from: Path) -> Path:
    """A six-layer qwen3moe model with SmolLM2's vocabulary: 25 MiB of experts a layer, 26 MiB for the rest."""
    return qwen3moe_model(directory / "moe.gguf", vocab_from, n_ff_exp=2048)


def moe_room(model: Path, expert_layers: float) -> int:
    """A memory cap for all of ``model`` but its experts, and ``expert_layers`` layers' experts, at MOE_OPTIONS
    (the daemon's four sequences)."""
    return room_for(footprint(read_gguf(model), MOE_OPTIONS["num_ctx"], 4, MOE_OPTIONS["num_batch"]), expert_layers)


def cpu_experts(daemon: Daemon) -> str | None:
    """The layers whose experts the runner was told to keep on the CPU (``--cpu-experts``), or None."""
    command = runner_command(daemon)
    return command[command.index("--cpu-experts") + 1] if "--cpu-experts" in command else None


def check_experts_stay_on_the_cpu(root: Path, model_path: Path, device: str, env: dict[str, str]) -> None:
    """Under a cap with room for everything but the experts, every layer goes to ``device`` with its experts on
    the CPU, llama.cpp allocates no more than the estimate, ``ps`` says so, and the text is the CPU's."""
    daemon = start_daemon(root, model_path, LOCALLLM_GPU_MEMORY=f"{device}={moe_room(model_path, 0.5)}", **env)
    try:
        split = generate(daemon, **MOE_OPTIONS)
        model = loaded_model(daemon)
        assert model["placement"] == "GPU: attention all 6 layers, experts 0 of 6; CPU: experts 6 of 6"
        assert layers_by_device(model) == {device: 6} and model["engine"] == "llama.cpp"
        assert model["placement"] in model["engine_reason"] and "the experts that still fit" in model["engine_reason"]
        assert cpu_experts(daemon) == "0,1,2,3,4,5"
        # what llama.cpp allocated on the device: within the estimate, which has no expert in it
        measured = wait_for_log(daemon, rf"smol:latest on {device} took ([0-9]+) MiB, estimated ([0-9]+) MiB")
        experts = sum(footprint(read_gguf(model_path), 512, 4).expert_weights)
        print(f"\n{device}: experts on the CPU; the device took {measured.group(1)} MiB, "
              f"estimated {measured.group(2)} MiB; experts {experts >> 20} MiB")
        assert 0 < int(measured.group(1)) <= model["size_vram"] >> 20 < experts >> 20
        ps = subprocess.run([sys.executable, "-m", "localllm", "ps"], capture_output=True, text=True, timeout=60,
                            env={**daemon.env})
        assert f"6 {device}" in ps.stdout and "experts 0 of 6; CPU: experts 6 of 6" in ps.stdout, ps.stdout
        cpu = generate(daemon, engine="llama.cpp", num_gpu=0, **MOE_OPTIONS)
        assert loaded_model(daemon)["size_vram"] == 0
        assert split["response"] == cpu["response"]
    finally:
        daemon.stop()


def check_the_last_layers_experts_fit(root: Path, model_path: Path, device: str, env: dict[str, str]) -> None:
    """Under a cap with room for two and a half layers' experts, the last two layers' experts go to ``device``."""
    daemon = start_daemon(root, model_path, LOCALLLM_GPU_MEMORY=f"{device}={moe_room(model_path, 2.5)}", **env)
    try:
        generate(daemon, **MOE_OPTIONS)
        model = loaded_model(daemon)
        assert model["placement"] == "GPU: attention all 6 layers, experts 2 of 6; CPU: experts 4 of 6"
        assert cpu_experts(daemon) == "0,1,2,3"  # as llama.cpp's --n-cpu-moe 4
        measured = wait_for_log(daemon, rf"smol:latest on {device} took ([0-9]+) MiB")
        assert 0 < int(measured.group(1)) <= model["size_vram"] >> 20
    finally:
        daemon.stop()
