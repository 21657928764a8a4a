"""llama.cpp through llama-cpp-python's low-level ctypes API.

Why low-level: the engine batches many sequences into one ``llama_decode`` and
will share KV cells between sequences (``llama_memory_seq_cp``); the
high-level ``Llama`` class hides both. This module is the only place that
touches ctypes: the engine sees a :class:`Model`, a :class:`Context` and a
reusable :class:`Batch`, all with plain Python types.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import llama_cpp as ll

from localllm.backends.contract import BackendError
from localllm.gguf import EXPERT_TENSORS, InvalidGGUF, read_gguf

_GGML_LOG_LEVEL_WARN = 3  # ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT
_GGML_LOG_LEVEL_CONT = 5

_backend_lock = threading.Lock()
_backend_ready = False
_log_verbose = False
_log_capture: list[str] | None = None
_log_last_level = 0
_buffer_sizes: dict[str, int] | None = None  # device -> bytes llama.cpp says it allocated there, while collected
# llama.cpp's log of each buffer it allocates: "load_tensors:      Vulkan0 model buffer size =    41.49 MiB"
BUFFER_LINE = re.compile(r"(\S+) (?:model|KV|RS|compute) buffer size =\s*([0-9.]+) MiB")


_PIECE_BYTES = 64  # most token texts fit; a longer one is rendered again into a buffer of its size


@ll.llama_log_callback
def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """Drop llama.cpp's log spam; keep error lines for error messages."""
    global _log_last_level
    if level != _GGML_LOG_LEVEL_CONT:
        _log_last_level = level
    message = text.decode("utf-8", "replace") if text else ""
    if _log_capture is not None and _log_last_level >= _GGML_LOG_LEVEL_WARN:
        _log_capture.append(message)
    if _buffer_sizes is not None:
        for device, mib in BUFFER_LINE.findall(message):
            _buffer_sizes[device] = _buffer_sizes.get(device, 0) + int(float(mib) * (1 << 20))
    if _log_verbose:
        os.write(2, message.encode())


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log through us.

    ``verbose`` passes llama.cpp's own log through to stderr.
    """
    global _backend_ready, _log_verbose
    with _backend_lock:
        _log_verbose = verbose
        if _backend_ready:
            return
        ll.llama_log_set(_on_log, ctypes.c_void_p(0))
        ll.llama_backend_init()
        _backend_ready = True


@contextmanager
def captured_errors() -> Iterator[list[str]]:
    """Collect what llama.cpp reports as errors inside the block.

    llama.cpp says *why* something failed (a grammar parse error, a bad file)
    only in its log or straight on stderr; this turns both into lines for an
    error message. Use it around short calls only: stderr is redirected.
    """
    global _log_capture
    lines: list[str] = []
    with _backend_lock, tempfile.TemporaryFile() as spill:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(spill.fileno(), 2)
        _log_capture = lines
        try:
            yield lines
        finally:
            _log_capture = None
            os.dup2(saved, 2)
            os.close(saved)
            spill.seek(0)
            lines.extend(spill.read().decode("utf-8", "replace").splitlines())


@contextmanager
def allocated_buffers() -> Iterator[dict[str, int]]:
    """The bytes llama.cpp allocates on each device (weights, KV cache, compute buffers) inside the block, as its
    log states them: a measurement for devices whose driver reports no change in free memory (no memory budget)."""
    global _buffer_sizes
    sizes: dict[str, int] = {}
    _buffer_sizes = sizes
    try:
        yield sizes
    finally:
        _buffer_sizes = None


def _detail(lines: list[str], fallback: str) -> str:
    return "; ".join(line.strip() for line in lines if line.strip()) or fallback


_MISSING = (
    (re.compile(r"unknown model architecture: '([^']*)'"),
     "the llama.cpp of llama-cpp-python {version} does not know this architecture"),
    (re.compile(r"missing tensor '([^']*)'|tensor '([^']*)' not found"),
     "the file lacks the tensor {0!r} that this architecture needs"),
    (re.compile(r"key not found in model: (\S+)"),
     "the file lacks the metadata key {0!r} that this architecture needs"),
    (re.compile(r"tensor '([^']*)' has wrong shape; (.*)"), "its tensor {0!r} has the wrong shape ({1})"),
    (re.compile(r"wrong number of tensors; (.*)"), "it holds other tensors than this architecture has ({0})"),
)


def _load_failure(path: Path, lines: list[str]) -> str:
    """Why llama.cpp refused a model file, naming its architecture and what is missing when its log says."""
    try:
        arch = read_gguf(path, skip_arrays_over=0).architecture
    except InvalidGGUF as exc:
        return f"not a valid GGUF file: {exc}"
    text = " ".join(lines)
    for pattern, explain in _MISSING:
        match = pattern.search(text)
        if match:
            found = [group for group in match.groups() if group is not None]
            what = explain.format(*found, version=getattr(ll, "__version__", ""))
            return f"architecture {arch!r}: {what}"
    return f"architecture {arch!r}: {_detail(lines, 'not a loadable GGUF model')}"


def quantize_file(source: str, target: str, ftype: int) -> int:
    """llama.cpp's quantizer (``llama_model_quantize``) from ``source`` to ``target``; 0 on success."""
    ll.llama_backend_init()
    params = ll.llama_model_quantize_default_params()
    params.ftype = ftype
    return int(ll.llama_model_quantize(source.encode(), target.encode(), params))


def physical_cores() -> int:
    """Number of physical CPU cores (llama.cpp is slower on hyperthreads)."""
    try:
        cores = set()
        physical = core = None
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    physical = value.strip()
                elif key == "core id":
                    core = value.strip()
                elif not key and core is not None:
                    cores.add((physical, core))
                    physical = core = None
        if core is not None:
            cores.add((physical, core))
        if cores:
            return len(cores)
    except OSError:
        pass
    return max(1, os.cpu_count() or 1)


class _TensorBufferOverride(ctypes.Structure):
    """llama.h ``struct llama_model_tensor_buft_override``: tensors whose name the pattern finds go to ``buft``
    (llama-cpp-python declares the field of ``llama_model_params`` but not the struct)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class Offload:
    """Named offload devices and the layers on each, as ``llama_model_params`` takes them, and the offloaded
    layers whose expert tensors stay in a CPU buffer.

    A worker's device is ``host:port#index``: connecting registers the
    worker's devices with ggml (llama.cpp's ``--rpc``); local ones go by
    ggml's names (``CUDA0``, ``CPU``). Experts stay on the CPU as llama.cpp's
    ``--n-cpu-moe`` keeps them: one tensor buffer override a layer. The arrays
    (and the patterns they point to) live as long as this object.
    """

    def __init__(self, handles: list[int], layers: Sequence[int], workers: Sequence[str] = (),
                 cpu_expert_layers: Sequence[int] = ()) -> None:
        self.devices = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)  # NULL-terminated
        self.split = (ctypes.c_float * max(ll.LLAMA_MAX_DEVICES, len(layers)))(*layers)
        self.workers = tuple(workers)  # host:port of the remote ones
        self.overrides: ctypes.Array | None = None  # NULL-terminated; None: every tensor where its layer is
        if cpu_expert_layers:
            from localllm.backends.ggml_devices import cpu_buffer_type

            if len(cpu_expert_layers) > ll.llama_max_tensor_buft_overrides():
                raise BackendError(f"{len(cpu_expert_layers)} layers' experts on the CPU: more than llama.cpp's "
                                   f"{ll.llama_max_tensor_buft_overrides()} tensor overrides")
            cpu = cpu_buffer_type()
            self._patterns = [f"^blk\\.{layer}{EXPERT_TENSORS}".encode() for layer in cpu_expert_layers]
            self.overrides = (_TensorBufferOverride * (len(self._patterns) + 1))(
                *(_TensorBufferOverride(pattern, cpu) for pattern in self._patterns), _TensorBufferOverride(None, None))

    @classmethod
    def cpu_only(cls) -> Offload:
        """No offload device: llama.cpp then sends no work to a GPU, not even a prompt's large batches (its op
        offload, which by default copies CPU-held weights to any GPU it has, a software one included)."""
        return cls([], [])

    @classmethod
    def open(cls, names: Sequence[str], layers: Sequence[int], cpu_expert_layers: Sequence[int] = ()) -> Offload | None:
        """Resolve ``names`` (connecting to workers; a worker that cannot be reached aborts the process)."""
        if not names:
            return None
        from localllm.backends import rpc
        from localllm.backends.ggml_devices import describe, device_handles

        local = {describe(handle).name: handle for handle in device_handles()}
        handles, workers = [], []
        for name in names:
            endpoint, _, index = name.partition("#")
            if index:
                workers.append(endpoint)
                remote = rpc.connect(endpoint)
                if not int(index) < len(remote):
                    raise BackendError(f"worker {endpoint} offers {len(remote)} devices, not #{index}")
                handles.append(remote[int(index)])
            elif name in local:
                handles.append(local[name])
            else:
                raise BackendError(f"no device {name!r} here; ggml has {', '.join(local)}")
        return cls(handles, layers, dict.fromkeys(workers), cpu_expert_layers)


class DecodeWatchdog:
    """Ends the process when one ``llama_decode`` outlasts ``limit`` seconds.

    A worker that stops answering without closing its connection (frozen, or
    cut off by the network) would otherwise hold the runner, and every
    request on it, for as long as TCP takes to give up (many minutes). The
    daemon sees the runner exit, fails its requests, and the next load plans
    without the silent worker.
    """

    def __init__(self, limit: float, workers: str) -> None:
        self.limit, self.workers = limit, workers
        self._started: float | None = None
        threading.Thread(target=self._watch, daemon=True, name="decode-watchdog").start()

    @contextmanager
    def guard(self) -> Iterator[None]:
        self._started = time.monotonic()
        try:
            yield
        finally:
            self._started = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.limit / 4))
            started = self._started
            if started is not None and time.monotonic() - started > self.limit:
                os.write(2, f"runner: a decode step took over {self.limit:g} s (LOCALLLM_WORKER_TIMEOUT): a worker "
                            f"of {self.workers} stopped answering\n".encode())
                os._exit(3)


class Vocabulary:
    """A model's tokens through llama.cpp's vocabulary: both engines tokenize with it."""

    def __init__(self, model_ptr: int) -> None:
        self.ptr = ll.llama_model_get_vocab(model_ptr)
        self.n_vocab: int = ll.llama_vocab_n_tokens(self.ptr)
        self.bos: int = ll.llama_vocab_bos(self.ptr)
        self.eos: int = ll.llama_vocab_eos(self.ptr)
        self.sep: int = ll.llama_vocab_sep(self.ptr)
        # what the model's tokenizer adds around a text (a reranker's query/document pair is built from these)
        self.add_bos: bool = bool(ll.llama_vocab_get_add_bos(self.ptr))
        self.add_eos: bool = bool(ll.llama_vocab_get_add_eos(self.ptr))
        self.add_sep: bool = bool(ll.llama_vocab_get_add_sep(self.ptr))
        self._pieces: dict[int, bytes] = {}
        self.bos_text = self.token_text(self.bos)  # spelled once: /health serves them to the daemon's templates
        self.eos_text = self.token_text(self.eos)

    def token_text(self, token: int) -> str:
        """A special token's text as the model spells it (e.g. ``<|im_end|>``)."""
        if token < 0:
            return ""
        return self._render(token, special=True).decode("utf-8", "replace")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (ll.llama_token * capacity)()
        n = ll.llama_tokenize(self.ptr, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:  # cannot happen with len+8, but llama.cpp's contract allows it
            capacity = -n
            buf = (ll.llama_token * capacity)()
            n = ll.llama_tokenize(self.ptr, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def tokenize_prompt(self, text: str) -> list[int]:
        """A prompt's tokens: specials parsed, BOS added where the model wants one, never twice.

        Chat templates often write the BOS token themselves; the tokenizer
        would add a second one, which degrades some models' output.
        """
        tokens = self.tokenize(text, add_special=True, parse_special=True)
        if len(tokens) > 1 and tokens[0] == tokens[1] == self.bos:
            del tokens[0]
        return tokens

    def piece(self, token: int) -> bytes:
        """The bytes a generated token contributes to the output (control tokens: none).

        Cached per token: the engine calls this once per generated token, the
        HTTP thread for /detokenize. Any thread may fill an entry, with bytes
        rendered in its own buffer, so an entry is always the token's text.
        """
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._render(token, special=False)
        return cached

    def _render(self, token: int, special: bool) -> bytes:
        """A token's text, rendered into a buffer of this call's own.

        llama.cpp writes the text with the GIL released: a buffer shared by the
        engine thread and the HTTP thread once mixed two tokens' texts
        ("inhosp<|im_e"), and the piece cache kept the result for good.
        """
        buf = ctypes.create_string_buffer(_PIECE_BYTES)
        n = ll.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens if 0 <= t < self.n_vocab).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT and the like."""
        return bool(ll.llama_vocab_is_eog(self.ptr, token))


class Model:
    """Weights (memory-mapped) and vocabulary of one GGUF file.

    ``vocab_only`` loads the vocabulary alone: the native engine's model holds
    one of these for its tokens and maps the weights itself.
    """

    def __init__(self, path: str | Path, adapters: Sequence[str | Path] = (), n_gpu_layers: int = 0,
                 offload: Offload | None = None, vocab_only: bool = False) -> None:
        params = ll.llama_model_default_params()
        params.use_mmap = True
        params.vocab_only = vocab_only
        params.n_gpu_layers = n_gpu_layers  # ignored by CPU-only builds
        self.offload = offload
        if offload is not None:  # devices in order, layers on each (llama.cpp's --device and --tensor-split)
            params.devices = ctypes.cast(offload.devices, ctypes.c_void_p).value
            params.tensor_split = offload.split
            if offload.overrides is not None:
                params.tensor_buft_overrides = ctypes.cast(offload.overrides, ctypes.c_void_p).value
        with captured_errors() as errors:
            ptr = ll.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            what = "the vocabulary of" if vocab_only else "model"
            raise BackendError(f"cannot load {what} {path}: {_load_failure(Path(path), errors)}")
        self.ptr = ptr
        self.path = Path(path)
        self.vocab = Vocabulary(ptr)
        self.n_ctx_train: int = ll.llama_model_n_ctx_train(ptr)
        self.n_embd: int = ll.llama_model_n_embd(ptr)
        self.n_cls_out: int = ll.llama_model_n_cls_out(ptr)  # a classifier's labels (a reranker's scores)
        self.size: int = ll.llama_model_size(ptr)
        # a state per sequence that cannot be cut back to an earlier position (SSM, linear attention, short
        # convolution layers: Mamba, RWKV, and hybrids such as Qwen 3.5, Qwen3-Next, LFM2, Granite 4, Nemotron-H)
        self.recurrent_state: bool = bool(ll.llama_model_is_recurrent(ptr) or ll.llama_model_is_hybrid(ptr))
        # a reranker: its GGUF names rank pooling (a classification head scores query/document pairs)
        self.ranks = self.meta(f"{self.meta('general.architecture')}.pooling_type") == str(ll.LLAMA_POOLING_TYPE_RANK)
        template = ll.llama_model_chat_template(ptr, b"rerank")
        # a reranker's prompt with {query} and {document} (Qwen3-Reranker's); None: the pair is joined by specials
        self.rerank_template: str | None = template.decode("utf-8") if template else None
        self.adapters = [self._load_adapter(Path(a)) for a in adapters]

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as llama.cpp reads it, as text; None when the file lacks it."""
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def _load_adapter(self, path: Path) -> ctypes.c_void_p:
        with captured_errors() as errors:
            adapter = ll.llama_adapter_lora_init(self.ptr, str(path).encode())
        if not adapter:
            raise BackendError(f"cannot load adapter {path}: {_detail(errors, 'not a LoRA adapter for this model')}")
        return adapter

    def close(self) -> None:
        for adapter in self.adapters:
            ll.llama_adapter_lora_free(adapter)
        self.adapters = []
        if self.ptr:
            ll.llama_model_free(self.ptr)
            self.ptr = None


class Batch:
    """One reusable ``llama_batch``: the engine fills it every step without allocating."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw = ll.llama_batch_init(capacity, 0, 1)
        self._token = self.raw.token
        self._pos = self.raw.pos
        self._n_seq = self.raw.n_seq_id
        self._seq = self.raw.seq_id
        self._logits = self.raw.logits
        self.n_tokens = 0

    def clear(self) -> None:
        self.n_tokens = 0

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its row, the index to sample from when ``logits``."""
        i = self.n_tokens
        self._token[i] = token
        self._pos[i] = pos
        self._n_seq[i] = 1
        self._seq[i][0] = seq_id
        self._logits[i] = logits
        self.n_tokens = i + 1
        return i

    @property
    def free(self) -> int:
        return self.capacity - self.n_tokens

    def close(self) -> None:
        if self.raw is not None:
            ll.llama_batch_free(self.raw)
            self.raw = None


_KV_GGML_TYPES = {"f16": ll.GGML_TYPE_F16, "q8_0": ll.GGML_TYPE_Q8_0, "q4_0": ll.GGML_TYPE_Q4_0}


class Context:
    """A llama_context: the KV cache of up to ``n_seq_max`` sequences.

    For generation each sequence gets its own stream of ``n_ctx / n_seq_max``
    cells (``kv_unified = false``). That keeps a sequence's cells in position
    order whatever its neighbours do, so attention adds the same numbers in
    the same order (in a unified cache a sequence's tokens land in holes
    other sequences left behind). That made greedy output independent of the
    batch on the AVX-512 machines it was measured on, not on AVX2 ones, where
    llama.cpp's matrix kernels round differently per batch shape: exact
    output is the native engine's promise, not this one's. It also bounds every sequence to its own context.

    Flash attention is off: llama.cpp's CPU flash attention takes a tiled
    path for ubatches of many prompt rows, which rounds a token's KV
    differently from the path for a few rows, so a prompt continued from the
    prefix cache (its tail prefilled alone) drifted from the same prompt
    computed cold. Without it a token's KV is the same however the prompt
    was chunked, decode speed is unchanged and prefill is about 4% slower.

    ``flash_attention`` turns it on anyway (LOCALLLM_FLASH_ATTENTION), for
    GPUs where it saves memory and time, and because llama.cpp quantizes the V
    cache (``kv_cache_type`` q8_0 or q4_0) only with it.

    For embeddings (``embeddings=True``) the cache is unified: the inputs of
    one decode share its ``n_ctx`` cells and are removed right after.
    """

    def __init__(
        self,
        model: Model,
        n_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_threads: int,
        embeddings: bool = False,
        kv_cache_type: str = "f16",
        flash_attention: bool = False,
        watchdog: DecodeWatchdog | None = None,
        pooling: int | None = None,
    ) -> None:
        self.watchdog = watchdog
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.kv_unified = embeddings
        params.embeddings = embeddings
        params.no_perf = True
        params.flash_attn_type = (ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attention
                                  else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.type_k = params.type_v = _KV_GGML_TYPES[kv_cache_type]
        if embeddings:  # ``pooling`` (a llama_pooling_type) over the model's own
            params.pooling_type = ll.LLAMA_POOLING_TYPE_UNSPECIFIED if pooling is None else pooling
        with captured_errors() as errors:
            ptr = ll.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise BackendError(f"cannot create a context of {n_ctx} tokens: {_detail(errors, 'out of memory?')}")
        self.ptr = ptr
        self.model = model
        self.n_ctx: int = ll.llama_n_ctx(ptr)
        self.n_batch: int = ll.llama_n_batch(ptr)
        self.memory = ll.llama_get_memory(ptr)
        self.can_shift: bool = bool(ll.llama_memory_can_shift(self.memory))
        self.pooling: int = ll.llama_pooling_type(ptr) if embeddings else ll.LLAMA_POOLING_TYPE_NONE
        if model.adapters:
            n = len(model.adapters)
            arr = (ll.llama_adapter_lora_p_ctypes * n)(*model.adapters)
            scales = (ctypes.c_float * n)(*([1.0] * n))
            if ll.llama_set_adapters_lora(ptr, arr, n, scales) != 0:
                raise BackendError("cannot apply the LoRA adapters to the context")

    def decode(self, batch: Batch) -> int:
        """``llama_decode``: 0 on success, 1 when no KV cells were free, <0 on error."""
        batch.raw.n_tokens = batch.n_tokens
        if self.watchdog is None:
            return ll.llama_decode(self.ptr, batch.raw)
        with self.watchdog.guard():
            return ll.llama_decode(self.ptr, batch.raw)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(ll.llama_memory_seq_rm(self.memory, seq_id, p0, p1))

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        ll.llama_memory_seq_add(self.memory, seq_id, p0, p1, delta)

    def seq_cp(self, src: int, dst: int) -> None:
        """Copy all of ``src``'s cells into ``dst`` (emptied first).

        Between streams llama.cpp copies whole streams only, and only at the
        start of the next ``llama_decode``; trim ``dst`` with :meth:`seq_rm`.
        """
        ll.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    def seq_pos_max(self, seq_id: int) -> int:
        return ll.llama_memory_seq_pos_max(self.memory, seq_id)

    def seq_state_size(self, seq_id: int) -> int:
        """The bytes :meth:`seq_state` would copy (counted, not copied)."""
        return ll.llama_state_seq_get_size(self.ptr, seq_id)

    def seq_state(self, seq_id: int) -> bytes:
        """A copy of one sequence's KV cells and recurrent state (``llama_state_seq_get_data``), to restore
        later, in this sequence or another."""
        size = self.seq_state_size(seq_id)
        buf = (ctypes.c_uint8 * size)()
        n = ll.llama_state_seq_get_data(self.ptr, buf, size, seq_id)
        return bytes(buf)[:n]

    def set_seq_state(self, state: bytes, seq_id: int) -> bool:
        """Load cells saved by :meth:`seq_state` into ``seq_id`` (which must be empty); False if refused."""
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        return ll.llama_state_seq_set_data(self.ptr, buf, len(state), seq_id) == len(state)

    def embedding(self, seq_id: int, row: int) -> list[float]:
        """The pooled embedding of ``seq_id`` (or of ``row`` when the model does not pool); with rank
        pooling the classifier's ``n_cls_out`` scores, the first of them the relevance."""
        if self.pooling == ll.LLAMA_POOLING_TYPE_NONE:
            ptr = ll.llama_get_embeddings_ith(self.ptr, row)
        else:
            ptr = ll.llama_get_embeddings_seq(self.ptr, seq_id)
        if not ptr:
            raise BackendError("the model produced no embedding")
        return ptr[: self.model.n_cls_out if self.pooling == ll.LLAMA_POOLING_TYPE_RANK else self.model.n_embd]

    def close(self) -> None:
        if self.ptr:
            ll.llama_free(self.ptr)
            self.ptr = None
