"""Memory estimates and the GPU layer planner, on the real fixture models' headers and on device descriptions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.moe_models import qwen3moe_model, room_for

from localllm.gguf import read_gguf
from localllm.backends.ggml_devices import BackendDevice, backend_devices
from localllm.server.memory import (
    SAFETY_MARGIN_BYTES, Device, DoesNotFit, ModelFootprint, check_fits_in_ram, footprint, gpu_devices,
    gpu_offload, kv_geometry, plan_gpu_layers,
)
from localllm.backends.capabilities import STATE_CAPTURES
from localllm.runner.speculation import MAX_DRAFT

GIB = 1 << 30
MIB = 1 << 20


def test_footprint_of_smollm2(smollm2_path):
    need = footprint(read_gguf(smollm2_path), n_ctx=4096, n_parallel=4)
    assert need.n_layers == 30
    # SmolLM2-135M: 3 KV heads x 64 dims, K and V, F16: 768 bytes a token a layer.
    assert need.kv_per_layer == 4096 * 4 * 768
    weights = sum(need.layer_weights) + need.other_weights
    assert 0.9 * smollm2_path.stat().st_size < weights <= smollm2_path.stat().st_size


def test_footprint_grows_with_context(gemma3_path):
    gguf = read_gguf(gemma3_path)
    small, large = footprint(gguf, 2048, 1), footprint(gguf, 8192, 4)
    assert large.kv_per_layer == 16 * small.kv_per_layer
    assert large.total > small.total


def test_refuses_what_does_not_fit(smollm2_path):
    need = footprint(read_gguf(smollm2_path), 4096, 4)
    check_fits_in_ram(need, "smollm2", free=8 * GIB)
    with pytest.raises(DoesNotFit, match="num_ctx"):
        check_fits_in_ram(need, "smollm2", free=need.total)


def _model(layers=10, layer=100 * MIB, other=50 * MIB, kv=10 * MIB, compute=100 * MIB) -> ModelFootprint:
    return ModelFootprint((layer,) * layers, other, kv, compute)


def test_full_fit_offloads_every_layer_and_the_head():
    plan = plan_gpu_layers(_model(), [Device("gpu0", 8 * GIB)])
    assert plan.n_gpu_layers == 11 and plan.layers_per_device == (10,)
    assert plan.processor == "100% GPU"


def test_partial_fit():
    budget = SAFETY_MARGIN_BYTES + 100 * MIB + 4 * 110 * MIB + 5 * MIB
    plan = plan_gpu_layers(_model(), [Device("gpu0", budget)])
    assert plan.n_gpu_layers == 4
    assert "CPU/GPU" in plan.processor


def test_no_fit_and_no_gpu():
    assert plan_gpu_layers(_model(), [Device("gpu0", 200 * MIB)]).n_gpu_layers == 0
    plan = plan_gpu_layers(_model(), [])
    assert plan.n_gpu_layers == 0 and plan.processor == "100% CPU"


def test_several_gpus_split_layers_in_order():
    per_device = SAFETY_MARGIN_BYTES + 100 * MIB + 6 * 110 * MIB
    plan = plan_gpu_layers(_model(), [Device("gpu0", per_device), Device("gpu1", per_device)])
    assert plan.layers_per_device == (6, 4)
    assert plan.n_gpu_layers == 11


def test_num_gpu_overrides():
    plan = plan_gpu_layers(_model(), [Device("gpu0", 8 * GIB)], requested=3)
    assert plan.n_gpu_layers == 3
    assert plan_gpu_layers(_model(), [Device("gpu0", 8 * GIB)], requested=0).n_gpu_layers == 0


def test_llama_cpps_device_list_has_its_cpu_and_no_gpu_here():
    """The real ggml device API of this (CPU-only) llama.cpp build."""
    devices = backend_devices()
    cpu = next(d for d in devices if d.kind == "cpu")
    assert cpu.name == "CPU" and cpu.description and 0 < cpu.free_bytes <= cpu.total_bytes
    assert gpu_devices(devices) == [] and gpu_devices() == []


def test_described_devices_of_any_backend_plan_layers_and_honour_num_gpu(smollm2_path):
    described = [
        BackendDevice("CPU", "AMD EPYC", "cpu", 64 * GIB, 64 * GIB),
        BackendDevice("BLAS", "OpenBLAS", "accel", 0, 0),
        BackendDevice("ROCm0", "AMD Radeon RX 7900 XTX", "gpu", 20 * GIB, 24 * GIB),
        BackendDevice("Vulkan1", "Intel(R) Iris(R) Xe Graphics", "igpu", 2 * GIB, 8 * GIB),
    ]
    gpus = gpu_devices(described)
    assert [(d.name, d.free_bytes, d.on_request_only) for d in gpus] == [("ROCm0", 20 * GIB, False),
                                                                          ("Vulkan1", 2 * GIB, False)]
    need = footprint(read_gguf(smollm2_path), n_ctx=4096, n_parallel=1)
    assert plan_gpu_layers(need, gpus).n_gpu_layers == need.n_layers + 1  # all of it, output head included
    assert plan_gpu_layers(need, gpus, requested=5).n_gpu_layers == 5
    assert plan_gpu_layers(need, gpus, requested=0).n_gpu_layers == 0


LLVMPIPE = BackendDevice("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", 60 * GIB, 60 * GIB)
NVIDIA = BackendDevice("Vulkan1", "NVIDIA GeForce RTX 4090", "gpu", 20 * GIB, 24 * GIB)


def test_a_software_device_takes_layers_only_when_asked_for():
    gpus = gpu_devices([LLVMPIPE, NVIDIA])
    assert [d.on_request_only for d in gpus] == [True, False]
    plan = plan_gpu_layers(_model(), gpus)
    assert plan.layers_per_device == (0, 10) and plan.n_gpu_layers == 11  # the real GPU, never llvmpipe
    alone = gpu_devices([LLVMPIPE])
    assert plan_gpu_layers(_model(), alone).n_gpu_layers == 0  # never slower by default
    assert plan_gpu_layers(_model(), alone, requested=4).layers_per_device == (4,)  # asked for by num_gpu
    named = gpu_devices([LLVMPIPE], caps={"Vulkan0": 4 * GIB})  # asked for by name
    assert not named[0].on_request_only and plan_gpu_layers(_model(), named).n_gpu_layers == 11


def test_the_memory_cap_lowers_free_memory_per_device_or_for_all():
    assert [d.free_bytes for d in gpu_devices([NVIDIA], caps={"Vulkan1": 2 * GIB})] == [2 * GIB]
    assert [d.free_bytes for d in gpu_devices([NVIDIA], caps={"*": 1 * GIB})] == [1 * GIB]
    assert [d.free_bytes for d in gpu_devices([NVIDIA], caps={"Vulkan1": 64 * GIB})] == [20 * GIB]  # never above
    assert gpu_devices([NVIDIA], caps={"*": 1 * GIB})[0].on_request_only is False
    assert gpu_devices([LLVMPIPE], caps={"*": 1 * GIB})[0].on_request_only is True  # a size alone names none


def test_num_gpu_above_the_layer_count_is_clamped_with_a_note_and_minus_one_is_as_many_as_fit():
    gpus = [Device("gpu0", 8 * GIB)]
    plan = plan_gpu_layers(_model(), gpus, requested=99)
    assert plan.n_gpu_layers == 11 and "num_gpu 99" in plan.note and "clamped to 11" in plan.note
    small = [Device("gpu0", SAFETY_MARGIN_BYTES + 100 * MIB + 3 * 110 * MIB)]
    assert plan_gpu_layers(_model(), small, requested=-1).n_gpu_layers == 3  # what fits, not every layer
    assert plan_gpu_layers(_model(), [], requested=5).note == "num_gpu 5 asked, but there is no GPU device"


def test_the_kv_cache_on_the_device_is_counted(smollm2_path):
    gguf = read_gguf(smollm2_path)
    gpus = [Device("Vulkan0", SAFETY_MARGIN_BYTES + 200 * MIB)]
    short, long = (plan_gpu_layers(footprint(gguf, n_ctx, 1), gpus) for n_ctx in (512, 8192))
    assert 0 < long.n_gpu_layers < short.n_gpu_layers


def test_a_measured_load_scales_the_next_plans_estimates():
    budget = SAFETY_MARGIN_BYTES + 100 * MIB + 6 * 110 * MIB
    assert plan_gpu_layers(_model(), [Device("gpu0", budget)]).n_gpu_layers == 6
    assert plan_gpu_layers(_model(), [Device("gpu0", budget, cost_scale=2.0)]).n_gpu_layers == 3


def test_local_gpu_offload_names_the_planned_devices_with_the_head_on_the_last():
    gpus = [Device("Vulkan0", 60 * GIB, on_request_only=True), Device("Vulkan1", 8 * GIB)]
    split = gpu_offload(plan_gpu_layers(_model(), gpus), gpus)
    assert split.devices == ("Vulkan1",) and split.split == (11,) and split.n_gpu_layers == 11
    partial = gpu_offload(plan_gpu_layers(_model(), gpus, requested=4), gpus)
    assert partial.devices == ("Vulkan1",) and partial.split == (4,)  # num_gpu asks for a GPU: the real one


# --- mixture-of-experts models: the expert split ---------------------------------------------------------------

def _moe(layers=8, dense=20 * MIB, experts=200 * MIB, other=50 * MIB, kv=10 * MIB, compute=100 * MIB) -> ModelFootprint:
    """A MoE model's footprint: each layer ``dense`` bytes of attention, norms and router plus ``experts``."""
    return ModelFootprint((dense + experts,) * layers, other, kv, compute, 0, (experts,) * layers)


def test_footprint_counts_each_layers_experts(tmp_path, smollm2_path):
    model = qwen3moe_model(tmp_path / "moe.gguf", smollm2_path, n_layer=3, n_embd=64, n_ff_exp=128)
    need = footprint(read_gguf(model), n_ctx=512, n_parallel=1)
    experts = 3 * 8 * 64 * 128 * 4  # gate, up and down of 8 experts, F32
    assert need.expert_weights == (experts,) * 3 and need.expert_layers == 3
    assert all(need.dense_weights(i) == need.layer_weights[i] - experts > 0 for i in range(3))
    assert footprint(read_gguf(smollm2_path), 512, 1).expert_layers == 0  # a dense model


def test_a_moe_model_that_does_not_fit_keeps_its_experts_on_the_cpu_and_the_rest_on_the_gpu():
    need = _moe()
    plan = plan_gpu_layers(need, [Device("gpu0", room_for(need, 0.5))])
    assert plan.n_gpu_layers == 9 and plan.layers_per_device == (8,)  # every layer and the head
    assert plan.cpu_expert_layers == tuple(range(8))
    assert plan.placement == "GPU: attention all 8 layers, experts 0 of 8; CPU: experts 8 of 8"
    assert plan.gpu_bytes <= room_for(need, 0.5) - SAFETY_MARGIN_BYTES


def test_the_experts_that_fit_go_to_the_gpu_by_layer_the_last_first():
    need = _moe()
    plan = plan_gpu_layers(need, [Device("gpu0", room_for(need, 3.5))])
    assert plan.cpu_expert_layers == (0, 1, 2, 3, 4)  # as llama.cpp's --n-cpu-moe 5
    assert plan.placement == "GPU: attention all 8 layers, experts 3 of 8; CPU: experts 5 of 8"


def test_a_moe_model_that_fits_or_a_dense_one_is_planned_by_whole_layers():
    fits = plan_gpu_layers(_moe(), [Device("gpu0", 8 * GIB)])
    assert fits.n_gpu_layers == 9 and fits.cpu_expert_layers == ()
    assert fits.placement == "GPU: attention all 8 layers, experts all 8"
    dense = ModelFootprint((220 * MIB,) * 8, 50 * MIB, 10 * MIB, 100 * MIB)
    budget = room_for(_moe(), 3.5)
    plan = plan_gpu_layers(dense, [Device("gpu0", budget)])
    assert plan.cpu_expert_layers == () and plan.placement == ""
    assert plan.n_gpu_layers == (budget - SAFETY_MARGIN_BYTES - 100 * MIB) // (230 * MIB)


def test_num_gpu_alone_keeps_whole_layers_and_n_cpu_moe_fixes_the_first_layers_experts_on_the_cpu():
    need = _moe()
    whole = plan_gpu_layers(need, [Device("gpu0", room_for(need, 0.5))], requested=3)
    assert whole.n_gpu_layers == 3 and whole.cpu_expert_layers == ()
    assert whole.placement == ("GPU: attention 3 of 8 layers, experts 3 of 8; "
                               "CPU: attention 5 of 8 layers, experts 5 of 8")
    forced = plan_gpu_layers(need, [Device("gpu0", 8 * GIB)], n_cpu_moe=6)
    assert forced.n_gpu_layers == 9 and forced.cpu_expert_layers == (0, 1, 2, 3, 4, 5)
    both = plan_gpu_layers(need, [Device("gpu0", 8 * GIB)], requested=4, n_cpu_moe=6)
    assert both.n_gpu_layers == 4 and both.cpu_expert_layers == (4, 5)  # the last 4 layers, 2 of them without
    over = plan_gpu_layers(need, [Device("gpu0", 8 * GIB)], n_cpu_moe=20)
    assert over.cpu_expert_layers == tuple(range(8)) and "n_cpu_moe 20 is more than the model's 8 layers" in over.note
    assert plan_gpu_layers(need, [Device("gpu0", room_for(need, 0.5))], n_cpu_moe=-1) == plan_gpu_layers(
        need, [Device("gpu0", room_for(need, 0.5))])  # -1: planned
    dense = ModelFootprint((220 * MIB,) * 8, 50 * MIB, 10 * MIB, 100 * MIB)
    assert "has no expert tensors" in plan_gpu_layers(dense, [Device("gpu0", 8 * GIB)], n_cpu_moe=2).note


def test_forced_experts_that_do_not_all_fit_leave_the_first_layers_on_the_cpu():
    need = _moe()
    plan = plan_gpu_layers(need, [Device("gpu0", room_for(need, 3.5))], n_cpu_moe=2)
    # layers 2-7 would need their experts on the GPU: only the last ones fit, each with its experts
    assert plan.n_gpu_layers < 8 and plan.cpu_expert_layers == tuple(i for i in range(8 - plan.n_gpu_layers, 2))
    assert plan.gpu_bytes <= room_for(need, 3.5)


def test_a_gpu_too_small_for_every_layers_attention_takes_the_last_layers_without_experts():
    need = _moe()
    plan = plan_gpu_layers(need, [Device("gpu0", SAFETY_MARGIN_BYTES + 100 * MIB + 200 * MIB + 3 * 30 * MIB)])
    assert plan.n_gpu_layers == 3 and plan.cpu_expert_layers == (5, 6, 7)
    assert plan.placement == ("GPU: attention 3 of 8 layers, experts 0 of 8; "
                              "CPU: attention 5 of 8 layers, experts 8 of 8")


def test_several_gpus_share_the_layers_by_free_memory_and_each_holds_the_experts_it_can():
    need = _moe()
    # each: its half of the layers' attention and KV (4 x 30 MiB), the head, and 1.5 layers' experts
    room = SAFETY_MARGIN_BYTES + 100 * MIB + 200 * MIB + 4 * 30 * MIB + 50 * MIB + 300 * MIB
    gpus = [Device("gpu0", room), Device("gpu1", room)]
    plan = plan_gpu_layers(need, gpus)
    assert plan.layers_per_device == (4, 4) and plan.n_gpu_layers == 9
    # each device holds the experts of its last layer (gpu1 the head too): layers 3 and 7
    assert plan.cpu_expert_layers == (0, 1, 2, 4, 5, 6)
    assert plan.placement == "GPU: attention all 8 layers, experts 2 of 8; CPU: experts 6 of 8"
    assert all(b <= room - SAFETY_MARGIN_BYTES for b in plan.device_bytes) and len(plan.device_bytes) == 2
    split = gpu_offload(plan, gpus)
    assert split.devices == ("gpu0", "gpu1") and split.split == (4, 5)  # the head on the last


@pytest.mark.parametrize("family", ["qwen35", "lfm2", "nemotron_h"])
def test_a_hybrid_models_estimate_counts_attention_kv_and_recurrent_states(tmp_path, family):
    """Only attention layers keep KV; recurrent layers keep a state a sequence, whatever the context. The
    estimate equals what llama.cpp holds for one sequence: its state's growth a token is the attention layers'
    K and V (and 12 to 24 bytes of cell bookkeeping in the saved state), what is there before any token the
    recurrent states (and a few headers)."""
    import llama_cpp
    from support import arch_models

    vocab = arch_models.byte_vocabulary(tmp_path / "vocab.gguf")
    path = {"qwen35": lambda: arch_models.qwen_hybrid(tmp_path / "m.gguf", vocab, "qwen35"),
            "lfm2": lambda: arch_models.lfm2(tmp_path / "m.gguf", vocab),
            "nemotron_h": lambda: arch_models.nemotron_h(tmp_path / "m.gguf", vocab)}[family]()
    sizes = {}
    for n in (64, 192):
        llm = llama_cpp.Llama(str(path), n_ctx=256, n_batch=256, n_threads=1, verbose=False)
        llm.eval([3 + i % 200 for i in range(n)])
        sizes[n] = llama_cpp.llama_state_seq_get_size(llm.ctx, 0)
        llm.close()
    per_token = (sizes[192] - sizes[64]) / 128
    before_any = sizes[64] - 64 * per_token
    need = footprint(read_gguf(path), n_ctx=1, n_parallel=1)
    kinds = {"qwen35": "rrra", "lfm2": "ra", "nemotron_h": "ra-r"}[family]
    assert need.layer_kinds == kinds
    assert need.kv_bytes == need.kv_per_layer * kinds.count("a") and need.kv_bytes + 12 <= per_token <= need.kv_bytes + 24
    states = need.state_per_layer * kinds.count("r")
    assert states <= before_any <= states + 256
    assert sum(need.cache(i) for i in range(need.n_layers)) == need.kv_bytes + states
    assert footprint(read_gguf(path), n_ctx=1, n_parallel=4).state_per_layer == 4 * need.state_per_layer  # a sequence each


def test_the_native_plan_of_a_hybrid_model_counts_each_sequences_state_and_the_snapshots(qwen35_path, smollm2_path):
    """The native runner keeps a state for each of its sequences, a copy of it for each drafting step to go back to,
    and its prefix cache copies of states in host RAM up to a budget (or one a block where the pool holds fewer)
    with the copies a batch takes before they are kept: the plan counts them all, at the size the native context
    reports."""
    from localllm.backends.native.backend import Context, Model
    from localllm.backends.native.model import native_memory

    model = Model(qwen35_path)
    try:
        ctx = Context(model, n_blocks=64, block_size=16, max_seq_len=256, n_seq=3, n_batch=16, n_threads=1)
        one, held = ctx.state_bytes, ctx.memory.states
        ctx.close()
    finally:
        model.close()
    g, native = read_gguf(qwen35_path), native_memory(qwen35_path)
    need = footprint(g, n_ctx=256, n_parallel=3, n_batch=16, kv_tokens=1024, snapshot_budget=1 << 30, native=native)
    assert held == 3 * one and need.parts["states"] == held + 3 * one
    assert need.snapshots == (1024 // 16 + STATE_CAPTURES) * one  # one a block: fewer than the budget holds
    small = footprint(g, n_ctx=256, n_parallel=3, n_batch=16, kv_tokens=1024, snapshot_budget=MIB // 2, native=native)
    assert small.snapshots == MIB // 2 + STATE_CAPTURES * one
    assert small.total - need.total == small.snapshots - need.snapshots
    assert footprint(read_gguf(smollm2_path), 256, 3, kv_tokens=1024, snapshot_budget=GIB).snapshots == 0


# --- the native engine's own layout: per-layer KV, sliding windows, expert scratch, repacked weights ------------

def _native_kv(path, n_blocks: int = 8, n_seq: int = 2, n_batch: int = 16) -> int:
    """Bytes of KV the native context allocates for a pool of ``n_blocks`` blocks of 16."""
    from localllm.backends.native.backend import Context, Model

    model = Model(path)
    try:
        ctx = Context(model, n_blocks=n_blocks, block_size=16, max_seq_len=64, n_seq=n_seq, n_batch=n_batch,
                      n_threads=1)
        allocated = n_blocks * ctx.block_bytes
        ctx.close()
    finally:
        model.close()
    return allocated


@pytest.mark.parametrize("fixture", ["gemma4_e_path", "gemma4_path", "gpt_oss_path", "qwen35_path", "qwen3moe_path"])
def test_the_kv_is_counted_as_the_native_context_lays_it_out(request, fixture):
    """Each layer at its own head size and KV heads, none for layers that read an earlier layer's KV (Gemma 4 E)
    or keep a recurrent state (qwen35): the plan of a pool whose every layer holds every position (sliding ones
    too, as llama.cpp's full-size SWA cache) equals the bytes the native context allocates."""
    from localllm.backends.native.model import native_memory

    path = request.getfixturevalue(fixture)
    need = footprint(read_gguf(path), n_ctx=64, n_parallel=2, kv_tokens=8 * 16)
    assert need.kv_bytes == _native_kv(path)
    native = native_memory(path)
    assert [layer.width for layer in native.kv_layers] == [layer.width for layer in kv_geometry(read_gguf(path), 0)]


@pytest.mark.parametrize("fixture", ["gemma3_path", "qwen3moe_path", "gpt_oss_path", "gemma4_path", "gemma4_e_path",
                                     "qwen35_path", "qwen35moe_path"])
def test_the_native_plan_is_what_the_runners_context_allocates(request, fixture):
    """The plan of a native load is read from the kernels (llk_ctx_plan: llk_ctx_new's own steps, on the file's
    description) and equals, part by part, what a runner's context of the same geometry allocates over the loaded
    (repacked) weights: the pool, the rings, the states, the scratch (a hybrid's DeltaNet buffers, a gated query's,
    a shared expert's among them), the experts'. The runner's logits rows hold a step's samples and drafts."""
    from localllm.backends.native.backend import Context, Model
    from localllm.backends.native.model import native_memory

    path = request.getfixturevalue(fixture)
    g, native = read_gguf(path), native_memory(path)
    trained = g.arch_value("context_length")
    model = Model(path)
    try:
        ctx = Context(model, n_blocks=64, block_size=16, max_seq_len=trained, n_seq=3, n_batch=32, n_threads=2,
                      window_kv=native.trims_window)
        held = {name: getattr(ctx.memory, name) for name, _ in ctx.memory._fields_}
        assert held["state_bytes"] == ctx.state_bytes and held["ring_blocks"] == ctx.ring_blocks
        ctx.close()
    finally:
        model.close()
    planned = native.context(64, 3, 32, trained, n_threads=2)
    assert {name: getattr(planned, name) for name, _ in planned._fields_} == held
    assert held["scratch"] > 0 and (held["experts"] > 0) == bool(g.arch_value("expert_count"))
    need = footprint(g, trained, 3, n_batch=32, kv_tokens=64 * 16, native=native)
    logits = 4 * 32 * model.vocab.n_vocab  # 3 sequences drafting up to MAX_DRAFT tokens: a whole batch of 32
    assert 3 * (1 + MAX_DRAFT) > 32 and need.logits_buffer == logits
    assert need.compute_buffer == logits + held["scratch"] + held["experts"]
    assert need.kv_bytes == held["kv"] + held["rings"]
    assert need.parts["states"] == held["states"] + (3 * held["state_bytes"] if "r" in need.layer_kinds else 0)


def test_gemma4s_shared_layers_and_narrow_sliding_heads_hold_no_kv_of_the_widest_geometry(gemma4_e_path):
    """The E-style fixture: 4 layers with KV of their own (3 sliding of 2 heads x 16, 1 global of 1 head x 32),
    2 reading theirs: 4 layers of 32 + 32 elements a position in f16, not 6 layers of the widest 2 heads x 32."""
    need = footprint(read_gguf(gemma4_e_path), n_ctx=1024, n_parallel=1)
    assert need.kv_bytes == 1024 * 4 * (32 + 32) * 2
    assert need.kv_layers[4:] == (0, 0)


def test_the_native_plan_bounds_the_sliding_layers_to_their_window(gpt_oss_path):
    """A native runner of gpt-oss keeps each sequence's sliding layers in a ring of the blocks over its last
    window + n_batch positions and one partial block, outside the pool, and its prefix cache keeps snapshots of
    the window; the global layers hold the whole pool. Where the ring would hold a whole sequence, the sliding
    layers stay in the pool."""
    from localllm.backends.native.model import native_memory

    g, native = read_gguf(gpt_oss_path), native_memory(gpt_oss_path)
    window = g.arch_value("attention.sliding_window")
    assert native.sliding_window == window and native.trims_window and any(k.sliding for k in native.kv_layers)
    full = footprint(g, n_ctx=8192, n_parallel=4, n_batch=64, kv_tokens=16384)
    bounded = footprint(g, n_ctx=8192, n_parallel=4, n_batch=64, kv_tokens=16384, native=native,
                        snapshot_budget=GIB)
    context = native.context(16384 // 16, 4, 64, 8192)
    ring = context.ring_blocks
    assert 0 < ring * 16 <= -(-(window + 64) // 16) * 16 + 16  # the contract: window + n_batch and one partial block
    sliding_bytes = 0
    for il, layer in enumerate(native.kv_layers):
        size = 2 * layer.width * 2  # K and V, f16
        assert bounded.cache(il) == (4 * ring * 16 if layer.sliding else 16384) * size
        assert full.cache(il) == 16384 * size
        sliding_bytes += size if layer.sliding else 0
    assert bounded.kv_bytes == context.kv + context.rings
    snapshot = context.state_bytes  # the position counts, the blocks over the window and one partial
    assert 64 + (-(-window // 16)) * 16 * sliding_bytes < snapshot <= 64 + ring * 16 * sliding_bytes
    assert bounded.snapshots == snapshot * (16384 // 16 + STATE_CAPTURES) and full.snapshots == 0
    assert native.context(64, 4, 512, 256).ring_blocks == 0  # a ring longer than a sequence: the pool keeps them


def test_the_native_plan_counts_the_expert_scratch_and_the_repacked_weights(qwen3moe_path, gemma3_path):
    """The expert FFN's scratch grows with the batch and the experts used (kernels/moe.c); a K-quant's repacked
    16-row groups are larger than its GGUF blocks, and the plan counts what the loader's copies add."""
    from localllm.backends.native.model import NativeWeights, hyperparameters, native_memory

    g, native = read_gguf(qwen3moe_path), native_memory(qwen3moe_path)
    small, large = (footprint(g, 512, 1, n_batch, native=native) for n_batch in (32, 512))
    h = hyperparameters(g)
    at_32, at_512 = (native.context(512 // 16, 1, n_batch, max(512, h.n_ctx_train)) for n_batch in (32, 512))
    # each of a token's experts: gate and up products and the down product in F32, at least
    assert at_512.experts > 512 * h.n_expert_used * 4 * (2 * h.n_ff_exp + h.n_embd)
    assert large.total - small.total == large.compute_buffer - small.compute_buffer == (
        at_512.scratch + at_512.experts - at_32.scratch - at_32.experts)
    assert native_memory(gemma3_path).context(32, 1, 512, 4096).experts == 0
    assert native.repack_growth > 0  # its Q4_K matrices
    for path in (qwen3moe_path, gemma3_path):
        native = native_memory(path)
        described, loaded = NativeWeights(path, lay_out=False), NativeWeights(path)
        try:
            assert loaded.nbytes - described.nbytes == native.repack_growth
        finally:
            described.close()
            loaded.close()
        gguf = read_gguf(path)
        file_bytes = sum(t.nbytes for t in gguf.tensors)
        assert footprint(gguf, 512, 1, native=native).weights == file_bytes + native.repack_growth - native.lookup_bytes


def test_qwen35s_recurrent_layers_are_read_as_the_loader_reads_them(tmp_path, smollm2_path):
    """attention.recurrent_layers wins over full_attention_interval, as in llama.cpp's and our loader: the plan's
    layer kinds are the loader's (one function), and its states those the native context keeps."""
    from support import arch_models

    from localllm.backends.native.backend import Context, Model
    from localllm.backends.native.model import hyperparameters

    path = arch_models.qwen_hybrid(tmp_path / "m.gguf", smollm2_path, "qwen35", extra_keys={
        "@full_attention_interval": 2, "@attention.recurrent_layers": np.array([True, True, True, False])})
    g = read_gguf(path)
    need = footprint(g, 64, 2, kv_tokens=4 * 16)
    assert need.layer_kinds == "rrra"
    assert tuple(kind == "r" for kind in need.layer_kinds) == hyperparameters(g).recurrent
    model = Model(path)
    try:
        ctx = Context(model, n_blocks=4, block_size=16, max_seq_len=64, n_seq=2, n_batch=16, n_threads=1)
        assert need.kv_bytes == 4 * ctx.block_bytes
        assert 2 * ctx.state_bytes - 2 * 64 <= need.state_per_layer * 3 <= 2 * ctx.state_bytes  # and a header
        ctx.close()
    finally:
        model.close()


#: MemAvailable of an idle 24 GB machine (this one's 23.4 GiB of RAM report 22 GiB available)
FREE_ON_24_GB = 22 * GIB


def _native_plan(path, n_ctx: int) -> ModelFootprint:
    """The plan the scheduler makes for a native load of ``n_ctx`` (its default pool, sequences and host cache)."""
    from localllm.backends.capabilities import HOST_CACHE_MB, native_parallel, native_pool_tokens
    from localllm.backends.native.model import native_memory

    pool = native_pool_tokens(n_ctx)
    return footprint(read_gguf(path), n_ctx, native_parallel(pool), kv_tokens=pool,
                     snapshot_budget=HOST_CACHE_MB << 20, native=native_memory(path))


def test_qwen3_30b_a3b_at_q4_k_m_loads_on_a_24_gb_machine_and_twice_its_size_is_refused(tmp_path, smollm2_path):
    """The real Qwen3-30B-A3B shape in llama.cpp's Q4_K_M mix (17 GiB of weights; a sparse file: only its header
    is read) fits an idle 24 GB machine with its KV at the default context, experts, scratch and repacked
    growth counted; the same model with twice the layers is refused before loading, saying what it needs
    and what is available."""
    from localllm.server.memory import default_context
    from support.moe_models import QWEN3_30B_A3B

    path = qwen3moe_model(tmp_path / "30b.gguf", smollm2_path, QWEN3_30B_A3B, quantized=True, k_quants=True,
                          sparse=True)
    assert 16.5 * GIB < path.stat().st_size < 17.5 * GIB
    trained = read_gguf(path).arch_value("context_length")
    context = default_context(trained, lambda n: _native_plan(path, n).total + SAFETY_MARGIN_BYTES <= FREE_ON_24_GB)
    need = _native_plan(path, context.n_ctx)
    check_fits_in_ram(need, "qwen3:30b-a3b", FREE_ON_24_GB)
    assert context.n_ctx == trained == 40960 and sum(need.layer_weights) + need.other_weights == sum(
        t.nbytes for t in read_gguf(path).tensors)
    assert need.expert_layers == 48 and need.kv_bytes >= 48 * 4096 * 2 * 4 * 128 * 2  # at least 4,096 positions
    assert need.repack_growth > 0 and need.compute_buffer > 512 * 8 * 768 * 4 * 2  # the experts' gate and up products

    double = qwen3moe_model(tmp_path / "60b.gguf", smollm2_path, dataclasses.replace(QWEN3_30B_A3B, n_layer=96),
                            quantized=True, k_quants=True, sparse=True)
    too_large = _native_plan(double, 4096)
    with pytest.raises(DoesNotFit) as refused:
        check_fits_in_ram(too_large, "twice", FREE_ON_24_GB)
    message = str(refused.value)
    assert f"needs about {too_large.total / GIB:.1f} GiB" in message and "only 22.0 GiB is available" in message
    assert too_large.total > 34 * GIB


def test_embedding_tables_read_a_row_a_token_are_left_in_the_file(gemma4_e_path, qwen3moe_path):
    """Gemma 4's per-layer embeddings (and an embedding apart from the output head) are read a row a token: the
    native plan leaves them out of the weights it holds, as the loader leaves them out of what it streams;
    an embedding tied to the output head is streamed whole, and counted."""
    from localllm.backends.native.model import native_memory

    g = read_gguf(gemma4_e_path)
    table = g.tensor("per_layer_token_embd.weight").nbytes
    native = native_memory(gemma4_e_path)
    assert native.lookup_bytes == table + g.tensor("token_embd.weight").nbytes * bool(g.tensor("output.weight"))
    need = footprint(g, 512, 1, native=native)
    assert need.weights == sum(t.nbytes for t in g.tensors) + native.repack_growth - native.lookup_bytes
    assert need.parts["weights"] == need.weights and sum(need.parts.values()) == need.total
    assert native_memory(qwen3moe_path).lookup_bytes == 0  # tied: the output head reads the whole table


@pytest.mark.parametrize("fixture", ["gpt_oss_path", "gemma4_path", "gemma4_e_path"])
def test_the_native_plan_of_window_rings_equals_what_the_context_allocates(request, fixture):
    """Where the native context keeps the sliding layers' window in rings (window_kv), the plan's KV is the pool of
    the other layers plus a ring a sequence, and its snapshot of a state the context's state."""
    from localllm.backends.native.backend import Context, Model
    from localllm.backends.native.model import native_memory

    path = request.getfixturevalue(fixture)
    g = read_gguf(path)
    trained = g.arch_value("context_length")
    model = Model(path)
    try:
        ctx = Context(model, n_blocks=64, block_size=16, max_seq_len=trained, n_seq=3, n_batch=32, n_threads=1,
                      window_kv=True)
        allocated = 64 * ctx.block_bytes + 3 * ctx.ring_blocks * ctx.ring_block_bytes
        state = ctx.state_bytes
        ctx.close()
    finally:
        model.close()
    need = footprint(g, trained, 3, n_batch=32, kv_tokens=64 * 16, snapshot_budget=GIB, native=native_memory(path))
    assert need.kv_bytes == allocated
    assert need.snapshots == state * (64 + STATE_CAPTURES)
