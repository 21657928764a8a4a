"""``python -m localllm.runner``: serve one model on a unix socket.

    python -m localllm.runner --model PATH --socket PATH [--ctx N] [--parallel N]
        [--threads N] [--batch N] [--gpu-layers N] [--cache-ram-mb MB] [--adapter PATH ...] [--embedding] [--verbose]

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
from pathlib import Path

import uvicorn

from localllm.config import load_settings
from localllm.runner.backend import BackendError, Context, Model, init_backend, physical_cores
from localllm.runner.embed import SEQUENCES as EMBED_SEQUENCES, Embedder
from localllm.runner.engine import Engine
from localllm.runner.server import Runtime, create_app

log = logging.getLogger("localllm.runner")


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
    p.add_argument("--ctx", type=_positive, default=4096, help="context length of each sequence")
    p.add_argument("--parallel", type=_positive, default=4, help="sequences decoded together")
    p.add_argument("--threads", type=_positive, default=None, help="CPU threads (default: physical cores)")
    p.add_argument("--batch", type=_positive, default=512, help="most tokens per decode step")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to a GPU (GPU builds only)")
    p.add_argument("--adapter", type=Path, action="append", default=[], help="LoRA adapter GGUF (repeatable)")
    p.add_argument(
        "--cache-ram-mb", type=_non_negative, default=512, metavar="MB",
        help="host RAM for prefixes evicted from the KV cache (0: drop them)",
    )
    p.add_argument("--embedding", action="store_true", help="serve /embedding instead of /completion")
    p.add_argument("--verbose", action="store_true", help="pass llama.cpp's own log through to stderr")
    return p.parse_args(argv)


def _clear_stale_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass


def _engine_classes(engine: str, embedding: bool) -> tuple[type, type]:
    """The backend LOCALLLM_ENGINE asks for; embeddings always use llama.cpp."""
    if engine == "native" and not embedding:
        from localllm.native.backend import Context as NativeContext, Model as NativeModel

        return NativeModel, NativeContext
    return Model, Context


def build_runtime(args: argparse.Namespace) -> tuple[Runtime, Context]:
    """Load the model and create the context the arguments describe."""
    init_backend(verbose=args.verbose)
    settings = load_settings()
    model_class, context_class = _engine_classes(settings.engine, args.embedding)
    model = model_class(args.model, args.adapter, args.gpu_layers)
    n_ctx = args.ctx
    if 0 < model.n_ctx_train < n_ctx:
        log.warning("context %d exceeds the model's training context %d; using %d", n_ctx, model.n_ctx_train, model.n_ctx_train)
        n_ctx = model.n_ctx_train
    threads = args.threads or physical_cores()
    parallel = 1 if args.embedding else args.parallel
    cache = {}
    if context_class is Context:
        cache = {"kv_cache_type": settings.kv_cache_type, "flash_attention": settings.flash_attention}
    elif settings.kv_cache_type != "f16" or settings.flash_attention:
        model.close()
        raise BackendError("LOCALLLM_KV_CACHE_TYPE and LOCALLLM_FLASH_ATTENTION apply to the llama.cpp engine only; "
                           "unset them or use LOCALLLM_ENGINE=llama.cpp")
    try:
        if args.embedding:  # inputs share one context of n_ctx cells, each fits one batch
            ctx = context_class(model, n_ctx, EMBED_SEQUENCES, max(args.batch, n_ctx), threads, embeddings=True,
                                **cache)
        else:
            ctx = context_class(model, n_ctx * parallel, parallel, args.batch, threads, **cache)
    except BaseException:
        model.close()
        raise
    rt = Runtime(model=model, n_ctx=n_ctx, n_parallel=parallel, stream_interval=settings.stream_interval)
    if args.embedding:
        rt.embedder = Embedder(model, ctx, n_ctx)
    else:
        rt.engine = Engine(model, ctx, parallel, n_ctx, cache_ram_bytes=args.cache_ram_mb << 20)
    log.info(
        "loaded %s: ctx=%d x %d sequences, batch=%d, threads=%d%s",
        args.model, n_ctx, parallel, ctx.n_batch, threads, ", embedding" if args.embedding else "",
    )
    return rt, ctx


class _Terminated(Exception):
    """SIGTERM arrived (uvicorn re-raises it after its graceful shutdown)."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="runner[%(process)d] %(levelname)s %(message)s")
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
        if rt.engine and not rt.engine.stop():
            log.error("the engine did not stop; exiting without freeing the context")
            return 1
        if rt.embedder:
            rt.embedder.close()
        ctx.close()
        rt.model.close()
        _clear_stale_socket(args.socket)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
