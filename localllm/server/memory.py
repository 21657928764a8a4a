"""Will a model fit? Memory estimates from the GGUF header, and the GPU and worker layer plans.

Estimated before loading, so that a model too large for the machine is refused
with a message instead of swapping the machine to death, so that on a GPU
build the most layers that fit in free VRAM are offloaded, and so that a model
too large for this machine spills layers onto RPC workers. A mixture-of-experts
model that a GPU cannot hold whole keeps its expert tensors (most of its bytes,
few of them read a token) on the CPU and everything else on the GPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..backends.capabilities import NATIVE_BLOCK_SIZE, STATE_CAPTURES
from ..config import ALL_DEVICES
from ..gguf import EXPERT_TENSORS, GGUFFile
from ..workers.probe import WorkerDevice
from ..backends.ggml_devices import BackendDevice, backend_devices
from ..runner.speculation import MAX_DRAFT

if TYPE_CHECKING:
    from ..backends.native.archs.base import LayerKv
    from ..backends.native.model import NativeMemory

#: KV cache bytes an element, by LOCALLLM_KV_CACHE_TYPE (llama.cpp's default is F16).
KV_BYTES_PER_ELEMENT = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # ggml blocks of 32: scale + codes
#: Kept free on every device, as llama.cpp's own fitting does, for fragmentation and the OS.
SAFETY_MARGIN_BYTES = 256 << 20
_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
_EXPERT_RE = re.compile(EXPERT_TENSORS)


@dataclass(frozen=True)
class ModelFootprint:
    """Bytes a model needs, split the way offloading splits them."""

    layer_weights: tuple[int, ...]  # per repeating layer
    other_weights: int  # embeddings, output head, final norm
    kv_per_layer: int  # an attention layer's KV for the whole context (ctx x parallel); the largest where they differ
    compute_buffer: int
    logits_buffer: int = 0  # the part of compute_buffer that holds logits: only the output head's device needs it
    expert_weights: tuple[int, ...] = ()  # per repeating layer, the part of layer_weights in expert tensors
    # hybrid and recurrent models: each layer's kind, "a" attention (KV), "r" recurrent (a state a sequence),
    # "-" neither (a feed-forward-only layer); "" when every layer is attention
    layer_kinds: str = ""
    state_per_layer: int = 0  # a recurrent layer's state for all sequences (independent of the context)
    # native engine: its sequences' states as its context holds them (all their layers', not split by layer: its
    # state_per_layer is 0) and the copy a drafting step saves of each
    sequence_states: int = 0
    # native engine: host RAM its prefix cache may give to copies of a sequence's state, and the copies a batch
    # takes before they are kept
    snapshots: int = 0
    # each layer's KV where layers differ (head sizes, KV heads, sliding windows, layers sharing an earlier one's);
    # () when every attention layer holds kv_per_layer
    kv_layers: tuple[int, ...] = ()
    repack_growth: int = 0  # native engine: what the repacked copies of the weights add to their GGUF bytes
    lookup_tables: int = 0  # native engine: embedding tables read a row a token, paged in as tokens come (not counted)

    @property
    def n_layers(self) -> int:
        return len(self.layer_weights)

    @property
    def expert_layers(self) -> int:
        """Layers with expert tensors: 0 for a dense model."""
        return sum(1 for n in self.expert_weights if n)

    def cache(self, layer: int) -> int:
        """The bytes ``layer`` keeps per context: its KV (attention), its sequences' states (recurrent), or none."""
        kind = self.layer_kinds[layer] if self.layer_kinds else "a"
        if kind == "a":
            return self.kv_layers[layer] if self.kv_layers else self.kv_per_layer
        return self.state_per_layer if kind == "r" else 0

    @property
    def kv_bytes(self) -> int:
        """The KV of every attention layer: what grows with the context."""
        return sum(self.cache(i) for i in range(self.n_layers) if not self.layer_kinds or self.layer_kinds[i] == "a")

    def dense_weights(self, layer: int) -> int:
        """A layer's weights but its experts: attention, norms, router, shared experts."""
        return self.layer_weights[layer] - (self.expert_weights[layer] if self.expert_weights else 0)

    @property
    def parts(self) -> dict[str, int]:
        """:attr:`total` by what holds it, as ``ps`` shows it: the weights (with what repacking adds), the attention
        layers' KV, the recurrent layers' states, the compute buffers, the host-RAM budget for snapshots of states
        (it fills as prefixes are cached)."""
        caches = sum(self.cache(i) for i in range(self.n_layers))
        return {"weights": self.weights, "kv": self.kv_bytes, "states": caches - self.kv_bytes + self.sequence_states,
                "compute": self.compute_buffer, "snapshots": self.snapshots}

    @property
    def weights(self) -> int:
        """The weights held in memory: the file's, as repacked, but the tables only looked up a row at a time."""
        return sum(self.layer_weights) + self.other_weights + self.repack_growth - self.lookup_tables

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def footprint(gguf: GGUFFile, n_ctx: int, n_parallel: int, n_batch: int = 512,
              kv_cache_type: str = "f16", kv_tokens: int = 0, snapshot_budget: int = 0,
              native: NativeMemory | None = None) -> ModelFootprint:
    """Estimate weights per layer, KV = positions (``kv_tokens``, else ctx x parallel) x (K+V dims) x type size
    for each attention layer with KV of its own (:func:`kv_geometry`), a recurrent state a sequence for each
    recurrent layer (:func:`layer_kinds`), compute buffer; and for the native engine (``native``: what its loader
    reads of the model), what its context of that geometry allocates (:meth:`NativeMemory.context`: its pool of
    ``kv_tokens``, the rings that hold each sequence's sliding layers' window instead where it trims them, its
    sequences' states, its scratch), the logits rows of a step's samples and drafts, the repacked weights'
    growth, the embedding tables it only looks rows up in left out (paged in from the file as tokens come, and
    reclaimable), and the snapshots of a sequence's state (a hybrid's recurrent layers, a trimmed window) its
    prefix cache keeps in host RAM: ``snapshot_budget``, or one a block where the pool holds fewer, with the
    copies a batch takes (STATE_CAPTURES)."""
    n_layers = int(gguf.arch_value("block_count", 0) or 0)
    layers = [0] * n_layers
    experts = [0] * n_layers
    other = 0
    for tensor in gguf.tensors:
        match = _LAYER_RE.match(tensor.name)
        if match and int(match.group(1)) < n_layers:
            layers[int(match.group(1))] += tensor.nbytes
            if _EXPERT_RE.search(tensor.name):
                experts[int(match.group(1))] += tensor.nbytes
        else:
            other += tensor.nbytes
    n_embd = int(gguf.arch_value("embedding_length", 0) or 0)
    n_head = int(gguf.arch_value("attention.head_count", 1) or 1)
    positions = kv_tokens or n_ctx * n_parallel
    blocks = -(-positions // NATIVE_BLOCK_SIZE)
    trained = int(gguf.arch_value("context_length", 0) or 0) or 4096  # the native loader's default
    context = native.context(blocks, n_parallel, n_batch, max(n_ctx, trained), kv_cache_type) if native else None
    geometry = native.kv_layers if native else kv_geometry(gguf, n_layers)
    per_position = [int(2 * layer.width * KV_BYTES_PER_ELEMENT[kv_cache_type]) for layer in geometry]
    if context:  # the pool's blocks, or a sliding layer's ring a sequence where the context trims the window
        held = [(n_parallel * context.ring_blocks if context.ring_blocks and layer.sliding else blocks)
                * NATIVE_BLOCK_SIZE for layer in geometry]
    else:
        held = [positions] * len(geometry)
    kv_layers = tuple(n * size for n, size in zip(held, per_position))
    kv_layers += (0,) * (n_layers - len(kv_layers))  # layers the native forward does not run (qwen35's MTP)
    n_vocab = _vocab_size(gguf)
    n_ff = gguf.arch_value("feed_forward_length", 4 * n_embd) or 4 * n_embd
    n_ff = max(n_ff, default=0) if isinstance(n_ff, list) else int(n_ff)  # per-layer widths: the widest
    kinds = layer_kinds(gguf, n_layers)
    if context:  # logits of every sequence's sample and its draft's (at most a batch), the context's scratch
        logits = 4 * max(n_parallel, min(n_batch, n_parallel * (1 + MAX_DRAFT))) * n_vocab
        compute = logits + context.scratch + context.experts
        one_state = context.state_bytes
        # and a drafting step's copy of the state it may go back to, where only restoring it takes a sequence back
        sequence_states = context.states + (n_parallel * one_state if native.recurrent else 0)
    else:  # llama.cpp: logits for a full batch plus activations of the widest layer and the attention scores, in F32
        logits = 4 * n_batch * n_vocab
        compute = logits + 4 * n_batch * 4 * max(n_embd, n_ff) + 4 * n_head * n_batch * min(n_ctx, 4096)
        one_state = recurrent_state_bytes(gguf) * kinds.count("r")  # all recurrent layers of a sequence
        sequence_states = 0  # in the layers' caches (state_per_layer)
    snapshots = min(snapshot_budget, one_state * blocks) + (STATE_CAPTURES * one_state if context else 0)
    return ModelFootprint(tuple(layers), other, max(kv_layers, default=0), compute, logits,
                          tuple(experts) if any(experts) else (), kinds if kinds != "a" * n_layers else "",
                          recurrent_state_bytes(gguf) * n_parallel if "r" in kinds and not native else 0,
                          sequence_states, snapshots,
                          kv_layers if len(set(kv_layers)) > 1 else (), native.repack_growth if native else 0,
                          native.lookup_bytes if native else 0)


def kv_geometry(gguf: GGUFFile, n_layers: int) -> tuple[LayerKv, ...]:
    """Each layer's K and V width a position, as the native loader reads the model where it knows the architecture
    (per-layer head sizes and KV heads, layers sharing an earlier one's KV: llama.cpp lays them out the same), else
    from the metadata: each layer's KV heads (a per-layer ``head_count_kv``) times ``key_length``."""
    from ..backends.native.archs.base import LayerKv
    from ..backends.native.lib import NativeError
    from ..backends.native.model import architecture, hyperparameters

    try:
        return architecture(gguf).kv_layers(gguf, hyperparameters(gguf))
    except NativeError:  # an architecture (or a variant) the native engine does not load
        pass
    n_head = int(gguf.arch_value("attention.head_count", 1) or 1)
    n_head_kv = gguf.arch_value("attention.head_count_kv", n_head)
    per_layer = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layers
    head_dim = int(gguf.arch_value("embedding_length", 0) or 0) // n_head
    k_head = int(gguf.arch_value("attention.key_length", head_dim) or head_dim)
    v_head = int(gguf.arch_value("attention.value_length", head_dim) or head_dim)
    return tuple(LayerKv(int(kv) * (k_head + v_head) // 2) for kv in per_layer)


#: Architectures whose every layer is recurrent (no KV at all).
RECURRENT_ARCHITECTURES = ("mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7")
#: Hybrids whose recurrent layers llama.cpp reads as Qwen 3.5's loader does (``archs/qwen35.recurrent_layers``).
QWEN_HYBRIDS = ("qwen35", "qwen35moe", "qwen3next")


def layer_kinds(gguf: GGUFFile, n_layers: int) -> str:
    """Each layer's kind as llama.cpp's hybrid memory assigns it: "a" attention, "r" recurrent, "-" neither.

    A per-layer ``head_count_kv`` makes a layer with none recurrent (Nemotron-H, Granite 4, LFM2, Jamba),
    unless a per-layer ``feed_forward_length`` gives it a feed-forward (Nemotron-H's MLP layers); the Qwen
    hybrids (Qwen 3.5, Qwen3-Next) name their recurrent layers as their loader reads them
    (``attention.recurrent_layers``, else all but every ``full_attention_interval``-th), and another
    architecture's ``full_attention_interval`` makes every layer but each n-th recurrent."""
    if (gguf.architecture or "") in RECURRENT_ARCHITECTURES:
        return "r" * n_layers
    if (gguf.architecture or "") in QWEN_HYBRIDS:
        from ..backends.native.archs.qwen35 import recurrent_layers
        from ..backends.native.lib import NativeError

        try:
            return "".join("r" if recurrent else "a" for recurrent in recurrent_layers(gguf, n_layers))
        except NativeError:  # metadata the load refuses, saying so
            return "a" * n_layers
    n_head_kv = gguf.arch_value("attention.head_count_kv")
    if isinstance(n_head_kv, list):
        ff = gguf.arch_value("feed_forward_length")
        ff = ff if isinstance(ff, list) else []
        kinds = ["a" if i < len(n_head_kv) and n_head_kv[i] else "-" if i < len(ff) and ff[i] else "r"
                 for i in range(n_layers)]
        return "".join(kinds)
    interval = int(gguf.arch_value("full_attention_interval", 0) or 0)
    if interval:
        return "".join("a" if (i + 1) % interval == 0 else "r" for i in range(n_layers))
    return "a" * n_layers


def recurrent_state_bytes(gguf: GGUFFile) -> int:
    """One sequence's state in one recurrent layer, in F32 as llama.cpp keeps it: the convolution's last
    inputs (Mamba, Gated DeltaNet: ``ssm.*`` keys; LFM2: ``shortconv.l_cache``) and the SSM state; RWKV's
    token shifts and WKV state."""
    n_embd = int(gguf.arch_value("embedding_length", 0) or 0)
    head_size = int(gguf.arch_value("wkv.head_size", 0) or 0)
    if head_size:
        return 4 * (2 * n_embd + n_embd * head_size)
    l_cache = int(gguf.arch_value("shortconv.l_cache", 0) or 0)
    if l_cache:
        return 4 * n_embd * (l_cache - 1)
    d_conv = int(gguf.arch_value("ssm.conv_kernel", 0) or 0)
    d_inner = int(gguf.arch_value("ssm.inner_size", 0) or 0)
    d_state = int(gguf.arch_value("ssm.state_size", 0) or 0)
    n_group = int(gguf.arch_value("ssm.group_count", 0) or 0)
    return 4 * (max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state) + d_state * d_inner)


def _vocab_size(gguf: GGUFFile) -> int:
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    length = getattr(tokens, "length", None) or (len(tokens) if isinstance(tokens, list) else 0)
    output = gguf.tensor("output.weight") or gguf.tensor("token_embd.weight")
    return int(length or (output.shape[-1] if output else 32000))


#: The least context a load gets unless ``num_ctx`` asks for less: Ollama's CPU default, and llama.cpp's floor
#: when it fits a context to memory.
MIN_DEFAULT_CTX = 4096


@dataclass(frozen=True)
class ContextChoice:
    """A load's context (tokens a sequence holds) and why it is that, as ``ps`` and ``show`` say it."""

    n_ctx: int
    reason: str

    def __str__(self) -> str:
        return f"context {self.n_ctx}: {self.reason}"


def asked_context(num_ctx: int) -> ContextChoice:
    return ContextChoice(num_ctx, "num_ctx asked")


def least_context(trained: int, why: str) -> ContextChoice:
    """The least default context: MIN_DEFAULT_CTX, or the model's ``trained`` length if shorter; ``why``:
    the reason a longer trained length is not taken."""
    if trained <= 0:
        return ContextChoice(MIN_DEFAULT_CTX, "the default, as the model states no trained length")
    if trained <= MIN_DEFAULT_CTX:
        return ContextChoice(trained, "the model's trained length")
    return ContextChoice(MIN_DEFAULT_CTX, why)


def default_context(trained: int, fits: Callable[[int], bool]) -> ContextChoice:
    """The context of a load no ``num_ctx`` asks for: the model's ``trained`` length where ``fits`` (the memory
    plan at that context) says it fits, else the longest halving of it that fits, never below
    MIN_DEFAULT_CTX (a load that does not fit even then fails as it would have)."""
    least = least_context(trained, f"what memory fits of {trained} trained")
    if least.n_ctx >= trained:
        return least
    if fits(trained):
        return ContextChoice(trained, "the model's trained length")
    n_ctx = trained // 2
    while n_ctx > MIN_DEFAULT_CTX and not fits(n_ctx):
        n_ctx //= 2
    return ContextChoice(n_ctx, least.reason) if n_ctx > MIN_DEFAULT_CTX else least


class DoesNotFit(RuntimeError):
    """The model with this context would not fit in memory."""


def available_ram() -> int:
    """Bytes the kernel says a new process could use without swapping (MemAvailable)."""
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("MemAvailable missing from /proc/meminfo")


def check_fits_in_ram(need: ModelFootprint, name: str, free: int, offloaded_bytes: int = 0,
                      workers_note: str = "") -> None:
    """Refuse a load whose CPU share would not fit in free RAM with the margin.

    Weights are memory-mapped, so they count in full: running from a model
    that is paged in and out on every token is no better than swapping.
    ``offloaded_bytes`` are on GPUs and workers; ``workers_note`` says what the workers could not take.
    """
    cpu_bytes = need.total - offloaded_bytes
    if cpu_bytes + SAFETY_MARGIN_BYTES > free:
        raise DoesNotFit(
            f"model {name} needs about {_gib(cpu_bytes)} of memory on this machine (weights, KV cache for the "
            f"context, compute buffer) but only {_gib(free)} is available{workers_note}; close other programs, "
            "unload models (localllm stop), add workers (LOCALLLM_WORKERS), or lower num_ctx / LOCALLLM_NUM_PARALLEL"
        )


@dataclass(frozen=True)
class Device:
    """A GPU as llama.cpp reports it: what the layer planner needs of it."""

    name: str
    free_bytes: int  # what ggml reports free, lowered to its LOCALLLM_GPU_MEMORY cap
    description: str = ""
    on_request_only: bool = False  # a software device (llvmpipe): slower than the CPU, used only when asked for
    cost_scale: float = 1.0  # measured / estimated bytes of its last load: the planner's correction


#: Software Vulkan drivers: ggml lists them as GPUs, yet they compute on the CPU, slower than the CPU backend.
SOFTWARE_DEVICES = ("llvmpipe", "lavapipe", "swiftshader", "softpipe")


@dataclass(frozen=True)
class GpuPlan:
    """How many repeating layers go to the GPUs, and to which; for a mixture-of-experts model, which of those
    layers keep their expert tensors on the CPU."""

    n_gpu_layers: int
    layers_per_device: tuple[int, ...]
    gpu_bytes: int  # weights + KV + buffers placed on GPUs
    total_bytes: int
    note: str = ""  # what the plan could not do as asked (num_gpu clamped, no device for it)
    device_bytes: tuple[int, ...] = ()  # the estimate for each device (uncorrected), for the measurement to check
    cpu_expert_layers: tuple[int, ...] = ()  # offloaded layers whose experts stay on the CPU (tensor overrides)
    placement: str = ""  # a MoE model's attention and experts by processor, in words ("" for a dense model)

    @property
    def processor(self) -> str:
        """``ps``'s PROCESSOR column: "100% CPU", "100% GPU" or "48%/52% CPU/GPU"."""
        if self.gpu_bytes <= 0 or self.total_bytes <= 0:
            return "100% CPU"
        gpu_share = round(100 * self.gpu_bytes / self.total_bytes)
        if gpu_share >= 100:
            return "100% GPU"
        return f"{100 - gpu_share}%/{gpu_share}% CPU/GPU"


def plan_gpu_layers(need: ModelFootprint, devices: list[Device], requested: int | None = None,
                    n_cpu_moe: int | None = None, split_experts: bool = True) -> GpuPlan:
    """Offload as many layers as fit in free VRAM with their KV and a compute buffer per device.

    Layers are filled into devices in order (llama.cpp's layer split); the
    output head follows the last layer only when every layer is offloaded.
    ``requested`` (the ``num_gpu`` option, -1 or None: as many as fit) overrides the count, clamped to the
    model's layers with a note. Software devices take layers only when ``num_gpu`` asks for some and no
    other GPU is there. A mixture-of-experts model that does not fit whole gets the expert split
    (:func:`_expert_split`) unless ``num_gpu`` alone asks for whole layers, or ``split_experts`` is off (layers
    on workers are whole); ``n_cpu_moe`` (-1 or None: chosen here) forces how many of its first layers keep their
    experts on the CPU.
    """
    if requested is not None and requested < 0:
        requested = None
    if n_cpu_moe is not None and n_cpu_moe < 0:
        n_cpu_moe = None
    hardware = [not d.on_request_only for d in devices]
    usable = hardware if any(hardware) else [bool(requested)] * len(devices)
    if not any(usable) or need.n_layers == 0 or requested == 0:
        note = f"num_gpu {requested} asked, but there is no GPU device" if requested and not devices else ""
        return GpuPlan(0, tuple(0 for _ in devices), 0, need.total, note)
    notes = []
    if requested is not None and requested > need.n_layers + 1:
        notes.append(f"num_gpu {requested} is more than the model's {need.n_layers + 1} layers (with the output "
                     f"layer): clamped to {need.n_layers + 1}")
    if n_cpu_moe is not None and not need.expert_layers:
        notes.append(f"n_cpu_moe {n_cpu_moe} asked, but the model has no expert tensors (it is not a "
                     "mixture of experts)")
    elif n_cpu_moe is not None and n_cpu_moe > need.n_layers:
        notes.append(f"n_cpu_moe {n_cpu_moe} is more than the model's {need.n_layers} layers: every layer's "
                     "experts are on the CPU")
    note = "; ".join(notes)
    budgets = [max(0, int((d.free_bytes - SAFETY_MARGIN_BYTES - need.compute_buffer) / d.cost_scale)) if ok else 0
               for d, ok in zip(devices, usable)]
    whole = _whole_layers(need, usable, budgets, requested, note)
    fits_whole = whole.n_gpu_layers > need.n_layers
    if not need.expert_layers or not split_experts or (n_cpu_moe is None and (requested is not None or fits_whole)):
        return whole
    return _expert_split(need, usable, budgets, requested, min(n_cpu_moe, need.n_layers) if n_cpu_moe is not None
                         else None, note)


def _whole_layers(need: ModelFootprint, usable: list[bool], budgets: list[int], requested: int | None,
                  note: str) -> GpuPlan:
    """Whole layers (each with its KV) into the devices in order, the output head after the last layer."""
    placed = [0] * len(usable)
    used = [0] * len(usable)
    target = need.n_layers if requested is None else min(requested, need.n_layers + 1)
    device = usable.index(True)
    layer = 0
    while layer < min(target, need.n_layers) and device < len(usable):
        cost = need.layer_weights[layer] + need.cache(layer)
        if usable[device] and (used[device] + cost <= budgets[device] or requested is not None):
            used[device] += cost
            placed[device] += 1
            layer += 1
        else:
            device += 1
    n_gpu = layer
    if n_gpu == need.n_layers and (requested is None or requested > need.n_layers):
        last = max(i for i, count in enumerate(placed) if count) if any(placed) else 0
        if used[last] + need.other_weights <= budgets[last] or requested is not None:
            used[last] += need.other_weights
            n_gpu += 1  # llama.cpp counts the output layer as one more
    per_device = tuple(u + need.compute_buffer if c else 0 for u, c in zip(used, placed))
    on_gpu = range(need.n_layers - sum(placed), need.n_layers)
    return GpuPlan(n_gpu, tuple(placed), sum(per_device), need.total, note, per_device,
                   placement=_placement(need, sum(placed), sum(1 for i in on_gpu if need.expert_weights[i]))
                   if need.expert_layers and n_gpu else "")


def _expert_split(need: ModelFootprint, usable: list[bool], budgets: list[int], requested: int | None,
                  n_cpu_moe: int | None, note: str) -> GpuPlan:
    """A mixture-of-experts model's layers on the GPUs without (some of) their experts.

    Per token every layer's attention, norms, router and shared experts are
    read in full, but of its experts only the few the router picks: those bytes
    pay off least on a GPU. So the last layers go to the devices (llama.cpp
    offloads the last ones) as far as their dense part and KV fit, the output
    head next, then, on each device from its last layer back, the experts that
    still fit; the rest stay in a CPU buffer (llama.cpp's tensor buffer
    overrides, as its ``--n-cpu-moe``). ``n_cpu_moe`` instead fixes the
    experts of the first layers on the CPU and the others with their layer;
    ``requested`` (``num_gpu``) fixes the count of layers, fit or not.
    A device that computes with CPU-held experts copies one layer's of them for a prompt's batch (ggml's op
    offload): its compute buffer counts that copy.
    """
    n_layers = need.n_layers
    copy = max(need.expert_weights)
    budgets = [max(0, b - copy) for b in budgets]

    def cost(layer: int, experts: bool) -> int:
        return need.dense_weights(layer) + need.cache(layer) + (need.expert_weights[layer] if experts else 0)

    def with_experts(layer: int) -> bool:  # when n_cpu_moe fixes them
        return n_cpu_moe is not None and layer >= n_cpu_moe

    if requested is not None:
        count = min(requested, n_layers)
        placed = _spread([cost(i, with_experts(i)) for i in range(n_layers - count, n_layers)], usable, budgets,
                         forced=True)
    else:
        count, placed = 0, [0] * len(usable)
        for n in range(n_layers, 0, -1):
            spread = _spread([cost(i, with_experts(i)) for i in range(n_layers - n, n_layers)], usable, budgets)
            if spread is not None:
                count, placed = n, spread
                break
    first = n_layers - count
    owner = [d for d, n in enumerate(placed) for _ in range(n)]  # the device of each offloaded layer, in order
    used = [0] * len(usable)
    for i in range(first, n_layers):
        used[owner[i - first]] += cost(i, with_experts(i))
    n_gpu = count
    if count == n_layers and (requested is None or requested > n_layers):
        last = owner[-1]
        if used[last] + need.other_weights <= budgets[last] or requested is not None:
            used[last] += need.other_weights
            n_gpu += 1
    gpu_experts = {i for i in range(first, n_layers) if with_experts(i)}
    if n_cpu_moe is None:
        for i in reversed(range(first, n_layers)):
            device = owner[i - first]
            if used[device] + need.expert_weights[i] <= budgets[device]:
                used[device] += need.expert_weights[i]
                gpu_experts.add(i)
    cpu_experts = tuple(i for i in range(first, n_layers) if need.expert_weights[i] and i not in gpu_experts)
    holds_cpu_experts = {owner[i - first] for i in cpu_experts}
    per_device = tuple(u + need.compute_buffer + (copy if d in holds_cpu_experts else 0) if c else 0
                       for d, (u, c) in enumerate(zip(used, placed)))
    n_gpu_experts = sum(1 for i in gpu_experts if need.expert_weights[i])
    return GpuPlan(n_gpu, tuple(placed), sum(per_device), need.total, note, per_device, cpu_experts,
                   _placement(need, count, n_gpu_experts) if count else "")


def _spread(costs: list[int], usable: list[bool], budgets: list[int], forced: bool = False) -> list[int] | None:
    """Layers (their ``costs`` in order) per device, in device order: in proportion to the devices' budgets, so
    that each keeps room in proportion for experts; else filled in order; None when they do not fit.
    ``forced``: the proportional split, fit or not."""
    weights = [b if ok else 0 for b, ok in zip(budgets, usable)]
    if not any(weights):
        if not forced:
            return None if costs else [0] * len(usable)
        weights = [1 if ok else 0 for ok in usable]
    shares = _shares(len(costs), weights)
    if forced or _fits(costs, shares, budgets):
        return shares
    placed, device, used = [0] * len(usable), 0, 0
    for layer_cost in costs:
        while device < len(usable) and (not usable[device] or used + layer_cost > budgets[device]):
            device, used = device + 1, 0
        if device == len(usable):
            return None
        placed[device] += 1
        used += layer_cost
    return placed


def _fits(costs: list[int], shares: list[int], budgets: list[int]) -> bool:
    first = 0
    for share, budget in zip(shares, budgets):
        if sum(costs[first:first + share]) > budget:
            return False
        first += share
    return True


def _placement(need: ModelFootprint, gpu_layers: int, gpu_experts: int) -> str:
    """Where a MoE model's layers are, in words: "GPU: attention all 48 layers, experts 12 of 48; CPU: experts
    36 of 48" ("attention": each layer's tensors but its experts)."""
    n, experts = need.n_layers, need.expert_layers
    gpu = [f"attention all {n} layers" if gpu_layers == n else f"attention {gpu_layers} of {n} layers",
           f"experts all {experts}" if gpu_experts == experts else f"experts {gpu_experts} of {experts}"]
    cpu = ([f"attention {n - gpu_layers} of {n} layers"] if gpu_layers < n else []) + (
        [f"experts {experts - gpu_experts} of {experts}"] if gpu_experts < experts else [])
    return f"GPU: {', '.join(gpu)}" + (f"; CPU: {', '.join(cpu)}" if cpu else "")


@dataclass(frozen=True)
class WorkerPlan:
    """Repeating layers on workers' devices: one block right after the CPU's layers, in the workers' order."""

    devices: tuple[WorkerDevice, ...] = ()  # only those that get layers
    layers: tuple[int, ...] = ()
    layer_bytes: tuple[int, ...] = ()  # each device's share of the weights and KV (no longer on this machine)
    compute_bytes: int = 0  # the compute buffer each device adds (activations, no logits)

    @property
    def n_layers(self) -> int:
        return sum(self.layers)

    @property
    def moved_bytes(self) -> int:
        """Weights and KV that are on workers instead of this machine."""
        return sum(self.layer_bytes)

    @property
    def total_bytes(self) -> int:
        """All the workers hold: their layers and a compute buffer each."""
        return self.moved_bytes + self.compute_bytes * len(self.devices)


NO_WORKERS = WorkerPlan()


def plan_worker_layers(need: ModelFootprint, gpu: GpuPlan, workers: list[WorkerDevice], free_ram: int,
                       requested: int | None = None) -> WorkerPlan:
    """Move layers off this machine's CPU onto workers, spread over them by free memory.

    None move while the CPU's share fits in ``free_ram`` (a model that fits
    this machine stays here, where no network is in the way), else as many of
    the CPU's last layers as free enough RAM, each with its KV (none if the
    workers have not that much room together). ``requested`` (the
    ``num_worker_layers`` option) moves that many instead, fit or not.
    """
    cpu_layers = need.n_layers - sum(gpu.layers_per_device)
    costs = [need.layer_weights[i] + need.cache(i) for i in range(cpu_layers)]
    compute = need.compute_buffer - need.logits_buffer
    if requested is not None and requested >= 0:
        count = min(requested, cpu_layers)
        weights = [w.free_bytes for w in workers]
    else:
        excess = shortfall(need, gpu, free_ram)
        count = 0
        while count < cpu_layers and excess > 0:
            excess -= costs[cpu_layers - 1 - count]
            count += 1
        weights = [max(0, w.free_bytes - SAFETY_MARGIN_BYTES - compute) for w in workers]
        if sum(costs[cpu_layers - count:]) > sum(weights):
            return NO_WORKERS  # the workers cannot take enough: the load fails saying so
    if count == 0 or sum(weights) == 0:
        return NO_WORKERS
    shares = _shares(count, weights)
    placed, layers, used = [], [], []
    first = cpu_layers - count
    for worker, share in zip(workers, shares):
        if share:
            placed.append(worker)
            layers.append(share)
            used.append(sum(costs[first:first + share]))
            first += share
    return WorkerPlan(tuple(placed), tuple(layers), tuple(used), compute)


def shortfall(need: ModelFootprint, gpu: GpuPlan, free_ram: int) -> int:
    """Bytes the CPU's share of a load lacks in free RAM (with the margin); 0 or less when it fits."""
    return need.total - gpu.gpu_bytes + SAFETY_MARGIN_BYTES - free_ram


def _shares(count: int, weights: list[int]) -> list[int]:
    """``count`` split in proportion to ``weights``, the remainders to the largest fractions."""
    total = sum(weights)
    exact = [count * w / total for w in weights]
    shares = [int(x) for x in exact]
    by_fraction = sorted(range(len(weights)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in by_fraction[: count - sum(shares)]:
        shares[i] += 1
    return shares


@dataclass(frozen=True)
class DeviceSplit:
    """What llama.cpp is told when layers leave this machine: offload devices in order, repeating layers
    (the last one: the output head) on each, as its ``devices``, ``tensor_split`` and ``n_gpu_layers``."""

    devices: tuple[str, ...]  # a worker's "host:port#index", a local ggml device name ("CUDA0", "CPU")
    split: tuple[int, ...]

    @property
    def n_gpu_layers(self) -> int:
        return sum(self.split)


def worker_offload(gpu: GpuPlan, gpus: list[Device], workers: WorkerPlan) -> DeviceSplit:
    """The device list for a load with worker layers.

    llama.cpp keeps the first layers on the CPU and gives the rest, output
    head included, to the devices in order: workers first, then the GPUs,
    then the CPU again for the head alone, so that logits (vocabulary-sized)
    never cross the network, only activations (embedding-sized) do.
    """
    local = _local_layers(gpu, gpus)
    devices = [w.spec for w in workers.devices] + [name for name, _ in local] + ["CPU"]
    return DeviceSplit(tuple(devices), (*workers.layers, *(n for _, n in local), 1))


def gpu_offload(gpu: GpuPlan, gpus: list[Device]) -> DeviceSplit:
    """The device list for a load on local GPUs alone: the planned devices by name (never one the plan
    left out, such as a software device), the output head on the last when the plan offloads it."""
    local = _local_layers(gpu, gpus)
    split = [n for _, n in local]
    if local and gpu.n_gpu_layers > sum(split):
        split[-1] += gpu.n_gpu_layers - sum(split)
    return DeviceSplit(tuple(name for name, _ in local), tuple(split))


def _local_layers(gpu: GpuPlan, gpus: list[Device]) -> list[tuple[str, int]]:
    return [(d.name, n) for d, n in zip(gpus, gpu.layers_per_device) if n]


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def gpu_devices(devices: list[BackendDevice] | None = None, caps: dict[str, int] | None = None) -> list[Device]:
    """GPUs llama.cpp could offload layers to, with their free memory; empty on a CPU build.

    From ggml's device list (``devices``, or the live one), so CUDA, ROCm,
    Vulkan and Metal builds all plan layers; integrated GPUs count (their
    memory is host memory, as ggml reports it), CPUs and accelerators
    (BLAS, AMX) hold no offloaded layers. ``caps`` (LOCALLLM_GPU_MEMORY) lowers a device's free memory;
    a software device is kept for ``num_gpu`` only, unless ``caps`` names it.
    """
    if devices is None:
        devices = backend_devices()
    caps = caps or {}
    found = []
    for d in devices:
        if d.kind not in ("gpu", "igpu"):
            continue
        cap = caps.get(d.name, caps.get(ALL_DEVICES))
        software = any(word in d.description.lower() for word in SOFTWARE_DEVICES)
        found.append(Device(d.name, d.free_bytes if cap is None else min(cap, d.free_bytes), d.description,
                            on_request_only=software and d.name not in caps))
    return found


def describe_devices(devices: list[Device]) -> str:
    """One line for the log: each device, its free memory and whether it is used by default."""
    if not devices:
        return "no GPU device (layers run on the CPU)"
    software = ", software: used only when asked for by num_gpu or LOCALLLM_GPU_MEMORY"
    return "; ".join(f"{d.name} ({d.description}, {_gib(d.free_bytes)} free{software if d.on_request_only else ''})"
                     for d in devices)
