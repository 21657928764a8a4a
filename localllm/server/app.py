"""The daemon: a FastAPI app serving Ollama's, OpenAI's and Anthropic's APIs, run by uvicorn."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..config import Settings, is_loopback_host, load_settings
from ..templates.worker import prestart as prestart_render_worker
from .anthropic_api import router as anthropic_router
from .disconnect import CancelOnDisconnect
from .errors import ApiError, error_body
from .ollama_api import router as ollama_router
from .openai_api import router as openai_router
from .rerank_api import router as rerank_router
from .transcription import router as transcription_router
from .security import AccessGuard
from .state import DaemonState
from .web import router as web_router

log = logging.getLogger("localllm.server")


def error_response(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The error in the body shape of the request's dialect."""
    return JSONResponse(error_body(request.url.path, status, message), status_code=status, headers=headers)


def describe_validation_error(exc: RequestValidationError) -> str:
    """One sentence naming what is wrong with the body, e.g. "messages.0.role: Field required"."""
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            return f"invalid JSON body: {error.get('ctx', {}).get('error', error.get('msg'))}"
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append(f"{location or 'body'}: {error.get('msg')}")
    return "; ".join(problems) or "invalid request body"


class JsonBodies:
    """Read every API body as JSON whatever its Content-Type, as Ollama does (curl -d sends form type);
    blobs are raw bytes and the audio endpoints' uploads multipart forms, as OpenAI's."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "DELETE", "PUT", "PATCH") \
                and not scope["path"].startswith(("/api/blobs/", "/v1/audio/")):
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
            scope = dict(scope, headers=[*headers, (b"content-type", b"application/json")])
        await self.app(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    state = DaemonState.build(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.scheduler.start()
        prestart_render_worker()
        yield
        await state.scheduler.close()

    app = FastAPI(title="localllm", version=__version__, lifespan=lifespan)
    app.state.daemon = state

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(request, exc.status, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(request, 400, describe_validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(request, exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return error_response(request, 500, f"internal error: {type(exc).__name__}: {exc}")

    app.include_router(web_router)
    app.include_router(ollama_router)
    app.include_router(openai_router)
    app.include_router(anthropic_router)
    app.include_router(rerank_router)
    app.include_router(transcription_router)
    app.add_middleware(JsonBodies)
    app.add_middleware(CancelOnDisconnect)
    app.add_middleware(AccessGuard, settings=settings)
    return app


def run_server(settings: Settings | None = None) -> None:
    """Serve in the foreground until interrupted (``localllm serve``)."""
    settings = settings or load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not is_loopback_host(settings.host) and not settings.api_key:
        log.warning("!" * 72)
        log.warning("LOCALLLM_HOST=%s exposes the API to the network WITHOUT an API key.", settings.host)
        log.warning("Anyone who can reach this machine can use your models.")
        if settings.allow_remote_changes:
            log.warning("LOCALLLM_ALLOW_REMOTE_CHANGES=1: they can also pull, push, create, copy and delete models.")
        else:
            log.warning("Pulling, pushing, creating, copying and deleting models stay refused to them.")
        log.warning("Set LOCALLLM_API_KEY, or bind to 127.0.0.1.")
        log.warning("!" * 72)
    log.info("localllm %s listening on %s:%d, models in %s", __version__, settings.host, settings.port,
             settings.models_dir)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                timeout_graceful_shutdown=5)
