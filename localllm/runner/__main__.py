"""``python -m localllm.runner``: serve one model on a unix socket.

    python -m localllm.runner --model PATH --socket PATH [--engine llama.cpp|native] [--ctx N] [--parallel N]
        [--kv-tokens N] [--threads N] [--batch N] [--gpu-layers N] [--device NAME ... --tensor-split N,N,...]
        [--cpu-experts N,N,...]
        [--cache-ram-mb MB] [--adapter PATH ...] [--projector PATH] [--embedding] [--verbose]

The daemon starts one runner per loaded model and talks to it over the
socket (see :mod:`localllm.runner.server` for the endpoints). Logs go to
stderr. SIGTERM or SIGINT ends the runner cleanly; a model that cannot be
loaded ends it at once with exit status 2 and the reason on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from localllm.config import ENGINES, KV_CACHE_TYPES, NATIVE_KV_CACHE_TYPES
from localllm.backends.capabilities import (
    HOST_CACHE_MB, NATIVE_BLOCK_SIZE, POOL_CONTEXT_TOKENS, POOL_CONTEXTS, native_pool_tokens,
)
from localllm.backends.contract import BackendError
from localllm.backends.ggml_devices import free_bytes
from localllm.backends.llama_cpp import (
    Context, DecodeWatchdog, Model, Offload, allocated_buffers, init_backend, physical_cores,
)
from localllm.backends.pooling import model_pooling
from localllm.runner.embed import SEQUENCES as EMBED_SEQUENCES, Embedder, LlamaCppEncoder, NativeEncoder
from localllm.backends.projector import Projector
from localllm.runner.stream_engine import StreamEngine
from localllm.runner.server import Runtime, create_app

log = logging.getLogger("localllm.runner")

# The native engine's KV block: 16 positions (SmolLM2: 368 KiB, Gemma 3 270M: 288 KiB). Small enough that
# a sequence wastes little in its last block and a copy on write is cheap; large enough that the index
# and the tables stay short. Attention's summation order does not depend on it.
BLOCK_SIZE = NATIVE_BLOCK_SIZE


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m localllm.runner", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path, help="GGUF model file")
    p.add_argument("--socket", required=True, type=Path, help="unix socket to serve HTTP on")
    p.add_argument("--engine", choices=ENGINES, default="llama.cpp", help="which forward pass runs the model")
    p.add_argument("--ctx", type=_positive, default=4096, help="context length of each sequence")
    p.add_argument("--parallel", type=_positive, default=4, help="sequences decoded together")
    p.add_argument(
        "--kv-tokens", type=_positive, default=None, metavar="N",
        help=f"native engine: positions in the shared KV block pool (default: {POOL_CONTEXTS} x {POOL_CONTEXT_TOKENS}, "
             "or one context if longer)",
    )
    p.add_argument("--threads", type=_positive, default=None, help="CPU threads (default: physical cores)")
    p.add_argument("--batch", type=_positive, default=512, help="most tokens per decode step")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to a GPU (GPU builds only)")
    p.add_argument(
        "--device", action="append", default=[], metavar="NAME",
        help="an offload device, in order: a worker's HOST:PORT#INDEX or a local ggml device (CUDA0, CPU); repeatable",
    )
    p.add_argument("--tensor-split", type=_split, default=(), metavar="N,N,...", help="layers on each --device")
    p.add_argument("--cpu-experts", type=_split, default=(), metavar="N,N,...",
                   help="llama.cpp engine: offloaded layers whose expert tensors stay on the CPU")
    p.add_argument("--no-gpu", action="store_true",
                   help="llama.cpp engine: use no GPU at all, not even for a prompt's batches (op offload)")
    p.add_argument("--adapter", type=Path, action="append", default=[], help="LoRA adapter GGUF (repeatable)")
    p.add_argument("--projector", type=Path, default=None, help="vision projector GGUF (llama.cpp's --mmproj)")
    p.add_argument(
        "--cache-ram-mb", type=_non_negative, default=HOST_CACHE_MB, metavar="MB",
        help="host RAM for prefixes evicted from the KV cache, and apart from it for a hybrid model's state "
             "snapshots on the native engine (0: keep neither)",
    )
    p.add_argument(
        "--kv-disk", type=Path, default=None, metavar="DIR",
        help="native engine: the disk tier of the prefix cache, shared by every model (off when absent)",
    )
    p.add_argument("--kv-disk-bytes", type=_non_negative, default=0, metavar="N",
                   help="most bytes all models' blocks take under --kv-disk (0: the tier is off)")
    p.add_argument("--embedding", action="store_true", help="serve /embedding instead of /completion")
    p.add_argument("--kv-cache-type", choices=KV_CACHE_TYPES, default="f16",
                   help="llama.cpp engine: the KV cache's element type (q8_0 and q4_0 need --flash-attention)")
    p.add_argument("--flash-attention", action="store_true", help="llama.cpp engine: flash attention on")
    p.add_argument("--worker-timeout", type=float, default=120.0, metavar="S",
                   help="seconds one decode step may wait on workers before the runner exits")
    p.add_argument("--stream-interval", type=float, default=0.1, metavar="S",
                   help="seconds between bursts of streamed pieces (0: every piece at once)")
    p.add_argument("--check-kv", action="store_true", help="check the KV books after every step (tests, soak runs)")
    p.add_argument("--verbose", action="store_true", help="pass llama.cpp's own log through to stderr")
    return p.parse_args(argv)


def _split(text: str) -> tuple[int, ...]:
    try:
        return tuple(_non_negative(part) for part in text.split(","))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"must be whole numbers separated by commas, got {text!r}") from None


def _clear_stale_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass


def _native_runtime(args: argparse.Namespace, n_ctx: int, threads: int) -> tuple[Runtime, Any]:
    """The native engine: a paged KV pool shared by ``--parallel`` sequences."""
    from localllm.backends.native.backend import Context as NativeContext, Model as NativeModel
    from localllm.runner.draft_model import DraftModels
    from localllm.runner.kv_blocks import BlockPool
    from localllm.runner.paged_engine import PagedEngine

    if args.kv_cache_type not in NATIVE_KV_CACHE_TYPES or args.flash_attention:
        raise BackendError(f"LOCALLLM_KV_CACHE_TYPE={args.kv_cache_type} and LOCALLLM_FLASH_ATTENTION apply to the "
                           "llama.cpp engine only; unset them or use LOCALLLM_ENGINE=llama.cpp")

    model = NativeModel(args.model, args.adapter, args.gpu_layers)
    n_ctx = _fit_ctx(n_ctx, model.n_ctx_train)
    pool_tokens = args.kv_tokens or native_pool_tokens(n_ctx)
    n_blocks = -(-pool_tokens // BLOCK_SIZE)
    if n_blocks * BLOCK_SIZE <= n_ctx:
        log.warning("the KV pool of %d positions is smaller than one context of %d: longer prompts are refused",
                    n_blocks * BLOCK_SIZE, n_ctx)
    max_seq_len = max(n_ctx, model.n_ctx_train)  # a request's num_ctx may go up to the trained context
    try:
        ctx = NativeContext(model, n_blocks, BLOCK_SIZE, max_seq_len, args.parallel, args.batch, threads,
                            args.kv_cache_type, window_kv=model.weights.trims_window)
    except BaseException:
        model.close()
        raise
    pool = BlockPool(ctx, n_blocks, BLOCK_SIZE, host_budget=args.cache_ram_mb << 20,
                     disk=_disk_tier(args, model, ctx), recurrent=ctx.state_bytes > 0,
                     state_budget=args.cache_ram_mb << 20)
    rt = Runtime(model=model, n_ctx=n_ctx, n_parallel=args.parallel, stream_interval=args.stream_interval)
    rt.engine = PagedEngine(model, ctx, args.parallel, n_ctx, pool)
    rt.drafts = DraftModels(model, n_ctx, args.parallel, args.batch, threads)
    log.info(
        "loaded %s on the native engine: ctx=%d, up to %d sequences over %d KV blocks of %d (%d MiB, %s), "
        "batch=%d, threads=%d",
        args.model, n_ctx, args.parallel, n_blocks, BLOCK_SIZE, (n_blocks * ctx.block_bytes) >> 20,
        args.kv_cache_type, args.batch, threads,
    )  # fmt: skip
    if ctx.ring_blocks:
        log.info("sliding layers keep only their window: a ring of %d blocks a sequence (%d MiB for all)",
                 ctx.ring_blocks, (args.parallel * ctx.ring_blocks * ctx.ring_block_bytes) >> 20)
    return rt, ctx


def _disk_tier(args: argparse.Namespace, model: Any, ctx: Any) -> Any:
    """The prefix cache's disk tier for this model's blocks, or None when it is off."""
    from localllm.runner.kv_disk import DiskTier, weights_id

    if args.kv_disk is None or not args.kv_disk_bytes:
        return None
    return DiskTier(args.kv_disk, weights_id(args.model), args.kv_disk_bytes, engine="native",
                    kv_type=args.kv_cache_type, block_size=BLOCK_SIZE, layout=f"{ctx.layout} (kernels/attention.h)",
                    block_bytes=ctx.block_bytes,
                    state_bytes=ctx.state_bytes)


def _fit_ctx(n_ctx: int, n_ctx_train: int) -> int:
    if 0 < n_ctx_train < n_ctx:
        log.warning("context %d exceeds the model's training context %d; using %d", n_ctx, n_ctx_train, n_ctx_train)
        return n_ctx_train
    return n_ctx


def _llama_cpp_kv_type(args: argparse.Namespace) -> str:
    """The KV type llama.cpp gets: it quantizes the V cache only with flash attention, so a q8_0 cache set
    for the native engine is refused for generation there; embeddings hold no cache past a request."""
    if args.kv_cache_type == "f16" or args.flash_attention:
        return args.kv_cache_type
    if args.embedding:
        log.info("embeddings keep an f16 KV cache: LOCALLLM_KV_CACHE_TYPE=%s needs flash attention on llama.cpp",
                 args.kv_cache_type)
        return "f16"
    raise BackendError(f"LOCALLLM_KV_CACHE_TYPE={args.kv_cache_type} on the llama.cpp engine needs "
                       "LOCALLLM_FLASH_ATTENTION=1 (llama.cpp quantizes the V cache only with flash attention)")


@contextmanager
def measured_load(devices: list[str]) -> Iterator[dict[str, int]]:
    """What the load inside the block takes of each named local device: ggml's free memory before and after, or,
    where the driver reports no change (no memory budget, as Mesa's software device), llama.cpp's own account of
    the buffers it allocated there. Filled in when the block ends."""
    before = free_bytes(devices)
    measured: dict[str, int] = {}
    with allocated_buffers() as allocated:
        yield measured
    after = free_bytes(devices)
    for name, free in before.items():
        took = free - after.get(name, free)
        measured[name] = took if took > 0 else allocated.get(name, 0)


def build_runtime(args: argparse.Namespace) -> tuple[Runtime, Any]:
    """Load the model and create the context the arguments describe."""
    init_backend(verbose=args.verbose)
    threads = args.threads or physical_cores()
    if args.embedding:
        return _embedding_runtime(args, threads)
    if args.engine == "native":
        if args.projector is not None:
            raise BackendError("the native engine takes no images; a model with a projector runs on llama.cpp")
        return _native_runtime(args, args.ctx, threads)
    with measured_load(args.device) as device_bytes:
        model, context_options = _llama_cpp_model(args)
        n_ctx = _fit_ctx(args.ctx, model.n_ctx_train)
        parallel = args.parallel
        try:
            ctx = Context(model, n_ctx * parallel, parallel, args.batch, threads, **context_options)
        except BaseException:
            model.close()
            raise
    rt = Runtime(model=model, n_ctx=n_ctx, n_parallel=parallel, stream_interval=args.stream_interval,
                 device_bytes=device_bytes)
    if args.projector is not None:
        try:
            rt.projector = Projector(model, args.projector, threads, use_gpu=args.gpu_layers != 0)
        except BaseException:
            ctx.close()
            model.close()
            raise
    rt.engine = StreamEngine(model, ctx, parallel, n_ctx, cache_ram_bytes=args.cache_ram_mb << 20,
                             projector=rt.projector)
    log.info(
        "loaded %s: ctx=%d x %d sequences, batch=%d, threads=%d%s",
        args.model, n_ctx, parallel, ctx.n_batch, threads, f", projector {args.projector}" if rt.projector else "",
    )
    return rt, ctx


def _llama_cpp_model(args: argparse.Namespace) -> tuple[Model, dict[str, Any]]:
    """The llama.cpp model the arguments name, and the options its contexts take."""
    if len(args.device) != len(args.tensor_split):
        raise BackendError(f"{len(args.device)} --device but {len(args.tensor_split)} --tensor-split entries")
    kv_cache_type = _llama_cpp_kv_type(args)
    offload = Offload.cpu_only() if args.no_gpu else Offload.open(args.device, args.tensor_split, args.cpu_experts)
    model = Model(args.model, args.adapter, args.gpu_layers, offload)
    context_options: dict[str, Any] = {"kv_cache_type": kv_cache_type, "flash_attention": args.flash_attention}
    if model.offload is not None and model.offload.workers:
        context_options["watchdog"] = DecodeWatchdog(args.worker_timeout, ", ".join(model.offload.workers))
    return model, context_options


def _native_embedding_context(model: Any, n_ctx: int, n_batch: int, threads: int) -> Any:
    """A native context for embedding passes: blocks for one pass's tokens, every sequence's last block partial."""
    from localllm.backends.native.backend import Context as NativeContext

    n_blocks = -(-n_batch // BLOCK_SIZE) + EMBED_SEQUENCES
    return NativeContext(model, n_blocks, BLOCK_SIZE, n_ctx, EMBED_SEQUENCES, n_batch, threads)


def _embedding_runtime(args: argparse.Namespace, threads: int) -> tuple[Runtime, Any]:
    """An ``--embedding`` runner: a pass takes up to n_ctx tokens (at least ``--batch``), so any input that
    fits the context fits a pass; the engine's encoder is runner/embed.py's."""
    pooling = model_pooling(args.model)
    if args.engine == "native":
        from localllm.backends.native.backend import Model as NativeModel

        model: Any = NativeModel(args.model, args.adapter, args.gpu_layers)
    else:
        model, context_options = _llama_cpp_model(args)
        if model.ranks:  # as llama-server runs a reranker: flash attention, its default
            context_options["flash_attention"] = True
    n_ctx = _fit_ctx(args.ctx, model.n_ctx_train)
    n_batch = max(args.batch, n_ctx)
    try:
        if args.engine == "native":
            encoder: Any = NativeEncoder(_native_embedding_context(model, n_ctx, n_batch, threads), pooling)
        else:
            # one sequence a pass, but room for EMBED_SEQUENCES: llama.cpp then scored a reranker's 100 pairs in
            # 1.29 s instead of 1.77 s (n_seq_max 1), to the same bits (scripts/bench/rerank.py's model)
            encoder = LlamaCppEncoder(Context(model, n_ctx, EMBED_SEQUENCES, n_batch, threads, embeddings=True,
                                              pooling=pooling, **context_options))
    except BaseException:
        model.close()
        raise
    rt = Runtime(model=model, n_ctx=n_ctx, n_parallel=1, stream_interval=args.stream_interval)
    rt.embedder = Embedder(model, encoder, n_ctx)
    log.info("loaded %s for embeddings on %s: ctx=%d, %s pooling, up to %d sequences and %d tokens a pass, "
             "threads=%d", args.model, args.engine, n_ctx, pooling.name.lower(), encoder.n_seq, encoder.n_tokens,
             threads)
    return rt, encoder.ctx


class _Terminated(Exception):
    """SIGTERM arrived (uvicorn re-raises it after its graceful shutdown)."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Our log goes to a copy of stderr: captured_errors() lends fd 2 to llama.cpp for a moment (a grammar
    # compiling on the HTTP thread), and the engine thread's lines must not vanish into that capture.
    log_stream = os.fdopen(os.dup(2), "w", buffering=1)
    logging.basicConfig(stream=log_stream, level=logging.INFO, format="runner[%(process)d] %(levelname)s %(message)s")
    if not args.model.is_file():
        print(f"runner: model file not found: {args.model}", file=sys.stderr)
        return 2
    try:
        rt, ctx = build_runtime(args)
    except BackendError as exc:
        print(f"runner: {exc}", file=sys.stderr)
        return 2
    except (_Terminated, KeyboardInterrupt):
        return 0
    if rt.engine:
        rt.engine.check_kv = args.check_kv
        rt.engine.start()
    _clear_stale_socket(args.socket)
    try:
        uvicorn.run(
            create_app(rt),
            uds=os.fspath(args.socket),
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
    except (_Terminated, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # shutting down already: a second TERM must not cut it short
        if rt.engine and not rt.engine.stop():
            log.error("the engine did not stop; exiting without freeing the context")
            return 1
        if rt.engine:
            rt.engine.persist()
        if rt.embedder:
            rt.embedder.close()
        if rt.drafts:
            rt.drafts.close()
        if rt.projector:
            rt.projector.close()
        ctx.close()
        rt.model.close()
        _clear_stale_socket(args.socket)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
