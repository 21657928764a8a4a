"""One model over several machines: `localllm worker` processes (ggml's RPC server) on loopback ports.

The workers, the daemon, its runners and the model are all real; the only
stand-ins are the faults: a port nobody listens on, and a tiny TCP server
that answers ggml's HELLO with another protocol version.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.daemon import Daemon, free_port
from support.workers import Worker

from localllm.config import SettingsError, parse_worker_address, parse_workers
from localllm.server.engine_choice import EngineRefused, choose_engine
from localllm.server.memory import Device, GpuPlan, ModelFootprint, plan_worker_layers, worker_offload
from localllm.workers.probe import WorkerDevice, WorkerUnreachable, probe
from localllm.backends.rpc import protocol_version

MIB = 1 << 20
GIB = 1 << 30
RPC_CMD_HELLO = 14
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"


@pytest.fixture()
def two_workers(tmp_path: Path) -> Iterator[list[Worker]]:
    workers = [Worker(tmp_path), Worker(tmp_path)]
    try:
        yield workers
    finally:
        for worker in workers:
            worker.kill()


def _daemon_with(root: Path, model: Path, workers: str, **env: str) -> Daemon:
    daemon = Daemon(root, LOCALLLM_WORKERS=workers, LOCALLLM_KEEP_ALIVE="10m", **env).start()
    daemon.create("smol", f"FROM {model}")
    return daemon


def _long_stream(daemon: Daemon, after_first_event) -> list[dict]:
    """Stream a long greedy count with 20 layers on workers; ``after_first_event()`` runs once tokens flow."""
    body = {"model": "smol", "prompt": COUNTING, "raw": True, "stream": True,
            "options": {"temperature": 0, "num_predict": 400, "num_worker_layers": 20}}
    events = []
    with httpx.stream("POST", f"{daemon.url}/api/generate", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.strip():
                events.append(json.loads(line))
                if len(events) == 1:
                    after_first_event()
    return events


def _generate(daemon: Daemon, **options) -> dict:
    body = {"model": "smol", "prompt": "Why is the sky blue?", "stream": False,
            "options": {"temperature": 0, "num_predict": 24, **options}}
    response = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def _unload(daemon: Daemon) -> None:
    httpx.post(f"{daemon.url}/api/generate", json={"model": "smol", "keep_alive": 0}, timeout=60).raise_for_status()
    deadline = time.monotonic() + 30
    while _loaded(daemon):
        assert time.monotonic() < deadline, "the model did not unload"
        time.sleep(0.1)


def _loaded(daemon: Daemon) -> list[dict]:
    return httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]


def _split(daemon: Daemon) -> dict[str, int]:
    """Layers per machine of the one loaded model."""
    (model,) = _loaded(daemon)
    return {entry["host"]: entry["layers"] for entry in model["split"]}


@pytest.mark.slow
def test_layers_on_two_workers_give_the_single_machine_tokens(tmp_path, smollm2_path, two_workers):
    w1, w2 = two_workers
    daemon = _daemon_with(tmp_path / "d", smollm2_path, f"{w1.address},{w2.address}")
    try:
        local = _generate(daemon, engine="llama.cpp")  # it fits here: no worker is used unless asked
        assert _split(daemon) == {"local": 30}
        _unload(daemon)
        before = [w1.rss(), w2.rss()]
        clients = [w.log().count("Accepted client connection") for w in two_workers]

        split = _generate(daemon, num_worker_layers=20)
        (model,) = _loaded(daemon)
        assert _split(daemon) == {"local": 10, w1.address: 10, w2.address: 10}
        assert model["engine"] == "llama.cpp" and w1.address in model["engine_reason"]
        assert split["context"] == local["context"]  # prompt and generated token ids, one for one
        assert split["response"] == local["response"] and split["eval_count"] == 24

        # The workers themselves: each took a client and holds its layers' weights and KV in its memory.
        for worker, rss_before, clients_before in zip(two_workers, before, clients):
            entry = next(e for e in model["split"] if e["host"] == worker.address)
            assert worker.log().count("Accepted client connection") > clients_before
            assert worker.rss() - rss_before > entry["size"] // 4, (worker.rss(), rss_before, entry)

        ps = subprocess.run([sys.executable, "-m", "localllm", "ps"], env=daemon.env, capture_output=True,
                            text=True, timeout=60)
        assert ps.returncode == 0, ps.stderr
        assert "LAYERS" in ps.stdout and f"10 {w1.address}" in ps.stdout and f"10 {w2.address}" in ps.stdout
    finally:
        daemon.stop()


@pytest.mark.slow
def test_a_worker_killed_mid_generation_fails_that_request_and_the_next_load_plans_without_it(
        tmp_path, smollm2_path, two_workers):
    w1, w2 = two_workers
    daemon = _daemon_with(tmp_path / "d", smollm2_path, f"{w1.address},{w2.address}")
    try:
        started = time.monotonic()
        events = _long_stream(daemon, w2.kill)
        assert time.monotonic() - started < 60
        assert len(events) >= 2 and not events[-1].get("done"), events[-3:]
        error = events[-1]["error"]
        assert "runner" in error and w2.address in error, error

        assert httpx.get(daemon.url, timeout=10).text == "localllm is running"
        again = _generate(daemon, num_worker_layers=20)
        assert again["eval_count"] == 24
        assert _split(daemon) == {"local": 10, w1.address: 20}
        assert f"worker {w2.address} is unreachable" in daemon.log()
    finally:
        daemon.stop()


@pytest.mark.slow
def test_a_worker_that_stops_answering_ends_the_request_after_the_worker_timeout(tmp_path, smollm2_path, two_workers):
    w1, w2 = two_workers
    daemon = _daemon_with(tmp_path / "d", smollm2_path, f"{w1.address},{w2.address}", LOCALLLM_WORKER_TIMEOUT="3s")
    try:
        started = time.monotonic()
        events = _long_stream(daemon, lambda: w2.process.send_signal(signal.SIGSTOP))  # frozen: connected, silent
        assert time.monotonic() - started < 40
        error = events[-1]["error"]
        assert "took over 3 s (LOCALLLM_WORKER_TIMEOUT)" in error and w2.address in error, error
        assert httpx.get(daemon.url, timeout=10).text == "localllm is running"
    finally:
        w2.process.send_signal(signal.SIGCONT)
        daemon.stop()


def test_a_model_over_the_memory_limit_spills_layers_onto_the_workers(tmp_path, smollm2_path, two_workers):
    w1, w2 = two_workers
    daemon = _daemon_with(tmp_path / "d", smollm2_path, f"{w1.address},{w2.address}", LOCALLLM_MEMORY_LIMIT="400M")
    try:
        assert _generate(daemon)["eval_count"] == 24  # no option: the limit alone sends layers away
        (model,) = _loaded(daemon)
        layers = _split(daemon)
        assert 0 < layers["local"] < 30 and layers[w1.address] > 0 and layers[w2.address] > 0
        local_bytes = next(e["size"] for e in model["split"] if e["host"] == "local")
        assert local_bytes <= 400 * MIB < model["size"]
        assert "layers on workers" in model["engine_reason"]
    finally:
        daemon.stop()


class OtherVersionWorker:
    """Answers ggml's HELLO like an RPC server of protocol 3.0.0, then hangs up."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with client:
                command = client.recv(1)
                (size,) = struct.unpack("<Q", _read(client, 8))
                _read(client, size)  # the client's transport capabilities
                if command == bytes([RPC_CMD_HELLO]):  # major, minor, patch, padding, then as many capability bytes
                    client.sendall(struct.pack("<Q", 4 + size) + bytes([3, 0, 0, 0]) + bytes(size))

    def close(self) -> None:
        self.server.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture()
def other_version() -> Iterator[OtherVersionWorker]:
    fake = OtherVersionWorker()
    yield fake
    fake.close()


def test_a_worker_of_another_protocol_version_is_named_with_both_versions(other_version):
    with pytest.raises(WorkerUnreachable) as refused:
        _run(probe(other_version.address))
    assert f"worker {other_version.address} speaks ggml RPC protocol 3.0.0" in str(refused.value)
    assert protocol_version() in str(refused.value)


def test_a_port_nobody_listens_on_is_unreachable():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(WorkerUnreachable, match=f"worker {address} is unreachable"):
        _run(probe(address))


def _run(coroutine):
    return asyncio.run(coroutine)


def test_unusable_workers_are_skipped_with_a_warning_and_the_model_loads_here(tmp_path, smollm2_path, other_version):
    dead = f"127.0.0.1:{free_port()}"
    daemon = _daemon_with(tmp_path, smollm2_path, f"{dead},{other_version.address}")
    try:
        answer = _generate(daemon, num_worker_layers=10)
        assert answer["eval_count"] == 24
        assert _split(daemon) == {"local": 30}
        log = daemon.log()
        assert f"worker {dead} is unreachable" in log and "planning smol:latest without it" in log
        assert f"worker {other_version.address} speaks ggml RPC protocol 3.0.0" in log
    finally:
        daemon.stop()


@pytest.mark.parametrize("text, problem", [
    ("localhost", "is not host:port"),
    ("host:port", "no valid port"),
    ("host:70000", "no valid port"),
    ("[::1]:50052", "IPv6"),
    (":50052", "is not host:port"),
])  # fmt: skip
def test_worker_addresses_that_do_not_parse_are_named(text, problem):
    with pytest.raises(SettingsError, match=problem) as refused:
        parse_worker_address(text)
    assert repr(text) in str(refused.value)


def test_worker_list_is_normalised():
    assert parse_workers(" 10.0.0.2:50052, host.lan:07 ,10.0.0.2:50052") == ("10.0.0.2:50052", "host.lan:7")
    assert parse_workers("") == ()


def test_a_bad_worker_address_stops_the_daemon_and_serve_with_its_name(tmp_path):
    with pytest.raises(RuntimeError, match="LOCALLLM_WORKERS: worker address 'nonsense' is not host:port"):
        Daemon(tmp_path, LOCALLLM_WORKERS="127.0.0.1:50052,nonsense").start()
    serve = subprocess.run([sys.executable, "-m", "localllm", "serve", "--worker", "h:x"], capture_output=True,
                           text=True, timeout=60)
    assert serve.returncode == 1 and "Error: worker address 'h:x' has no valid port" in serve.stderr
    assert "Traceback" not in serve.stderr


def test_num_worker_layers_without_workers_is_a_400_naming_the_option(daemon):
    response = httpx.post(f"{daemon.url}/api/generate", timeout=60, json={
        "model": "smollm2:135m", "prompt": "hi", "stream": False, "options": {"num_worker_layers": 4}})
    assert response.status_code == 400
    assert "num_worker_layers" in response.json()["error"] and "LOCALLLM_WORKERS" in response.json()["error"]


@pytest.mark.parametrize("args, problem", [
    (["--host", "0.0.0.0"], "--allow-remote"),
    (["--device", "NoSuchGPU"], "no device named NoSuchGPU; this machine has: CPU"),
    (["--port", "0"], "--port must be 1-65535"),
])  # fmt: skip
def test_worker_refuses_what_it_cannot_do_safely(args, problem):
    worker = subprocess.run([sys.executable, "-m", "localllm", "worker", *args], capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert worker.returncode == 1 and problem in worker.stderr and "Traceback" not in worker.stderr


# --- the plan, on a model described by numbers ---------------------------------------------------------------


def _model(layers: int = 10, layer: int = 100 * MIB, kv: int = 10 * MIB) -> ModelFootprint:
    return ModelFootprint((layer,) * layers, 50 * MIB, kv, 100 * MIB, 60 * MIB)


NO_GPU = GpuPlan(0, (), 0, 0)


def _worker(port: int, free: int) -> WorkerDevice:
    return WorkerDevice(f"10.0.0.{port}:50052", 0, free, free)


def test_a_model_that_fits_here_stays_here_unless_asked():
    need, workers = _model(), [_worker(1, 8 * GIB)]
    assert plan_worker_layers(need, NO_GPU, workers, free_ram=8 * GIB).n_layers == 0
    asked = plan_worker_layers(need, NO_GPU, workers, free_ram=8 * GIB, requested=4)
    assert asked.layers == (4,) and asked.moved_bytes == 4 * 110 * MIB


def test_what_does_not_fit_moves_to_workers_by_their_free_memory():
    need = _model()  # 1,100 MiB of layers and KV, 150 MiB more
    free_ram = need.total + 256 * MIB - 300 * MIB  # 300 MiB short: three layers must go
    plan = plan_worker_layers(need, NO_GPU, [_worker(1, 3 * GIB), _worker(2, 1 * GIB)], free_ram)
    assert plan.n_layers == 3 and plan.layers == (2, 1)
    assert plan.compute_bytes == 40 * MIB  # activations only: the logits stay with the output head here


def test_workers_too_small_for_the_rest_take_nothing():
    need = _model()
    small = [_worker(1, 256 * MIB + 40 * MIB + 150 * MIB)]  # room for one layer, three needed
    assert plan_worker_layers(need, NO_GPU, small, free_ram=need.total - 300 * MIB).n_layers == 0


def test_the_device_list_ends_with_the_cpu_holding_the_output_head():
    need = _model()
    plan = plan_worker_layers(need, NO_GPU, [_worker(1, GIB), _worker(2, GIB)], free_ram=0, requested=6)
    offload = worker_offload(NO_GPU, [], plan)
    assert offload.devices == ("10.0.0.1:50052#0", "10.0.0.2:50052#0", "CPU")
    assert offload.split == (3, 3, 1) and offload.n_gpu_layers == 7


def test_with_a_gpu_the_workers_take_cpu_layers_and_come_first_in_the_device_list():
    need = _model()
    gpus = [Device("CUDA0", 0)]
    gpu = GpuPlan(3, (3,), 3 * 110 * MIB, need.total)  # the last three layers on the GPU
    plan = plan_worker_layers(need, gpu, [_worker(1, GIB)], free_ram=0, requested=50)
    assert plan.layers == (7,)  # every layer the CPU had, none of the GPU's
    offload = worker_offload(gpu, gpus, plan)
    assert offload.devices == ("10.0.0.1:50052#0", "CUDA0", "CPU") and offload.split == (7, 3, 1)


def test_forcing_the_native_engine_onto_workers_is_refused(smollm2_path):
    with pytest.raises(EngineRefused, match="layers on workers need llama.cpp's RPC backend"):
        choose_engine(smollm2_path, "native", False, False, 0, None, "4 layers on workers (10.0.0.1:50052#0 4)")
