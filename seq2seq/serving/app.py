"""The FastAPI app: routes, one-line JSON errors, request metrics, the page, and the batcher's lifetime.

Every error a client can cause is answered with ``{"error": "<one line>"}`` and its status
(413, 422, 503 with Retry-After, 404, 405); an unexpected failure is logged on the server and
answered 500 with no traceback. The batcher starts with the app and, at shutdown (after uvicorn
has let the requests in flight finish), serves what is still queued before the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from seq2seq.serving.batcher import QueueFullError
from seq2seq.serving.metrics import CONTENT_TYPE
from seq2seq.serving.schemas import (
    AttentionRequest,
    AttentionResponse,
    ErrorResponse,
    HealthResponse,
    InfoResponse,
    TranslateRequest,
    TranslateResponse,
)
from seq2seq.serving.service import InputError, TranslationService

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
RETRY_AFTER_S = 1  # what a 503 tells the client to wait
MODEL_ENDPOINTS = ("/translate", "/attention")  # the ones that queue for the model
ENDPOINTS = {"/", "/translate", "/attention", "/health", "/info", "/metrics", "/docs", "/openapi.json"}
ERRORS: dict[int | str, dict] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in [
        (413, "an input is longer than the server accepts"),
        (422, "malformed JSON, unknown or wrong fields, beam/nbest/max_len out of range"),
        (503, "the request queue is full: retry after the Retry-After header's seconds"),
    ]
}

router = APIRouter()


def _service(request: Request) -> TranslationService:
    return request.app.state.service


Service = Annotated[TranslationService, Depends(_service)]


@router.post("/translate", responses=ERRORS)
async def translate(body: TranslateRequest, service: Service) -> TranslateResponse:
    """Translate one sentence or a list of them; each gets its best translation and n-best list."""
    texts = [body.text] if isinstance(body.text, str) else body.text
    settings = service.settings(body.beam, body.nbest, body.max_len)
    return TranslateResponse(translations=await service.translate(texts, settings))


@router.post("/attention", responses=ERRORS)
async def attention(body: AttentionRequest, service: Service) -> AttentionResponse:
    """Translate one sentence and return every attention map: all layers and heads of each kind."""
    return await service.attention(body.text, service.settings(body.beam, 1, body.max_len))


@router.get("/health")
async def health(service: Service) -> HealthResponse:
    return HealthResponse(status="ok", queue_depth=service.batcher.depth)


@router.get("/info")
async def info(service: Service) -> InfoResponse:
    """The model behind the server: config, size, vocabulary, training step and validation BLEU."""
    return service.info()


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
async def metrics(service: Service) -> Response:
    """Prometheus text format: requests, errors, latency, batch sizes, queue depth."""
    return Response(service.batcher.metrics.render(service.batcher.depth), media_type=CONTENT_TYPE)


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(STATIC / "index.html")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _validation_message(err: RequestValidationError) -> str:
    """'field: what is wrong' for up to three problems, or 'malformed JSON: ...'."""
    errors = err.errors()
    if errors[0]["type"] == "json_invalid":
        return f"malformed JSON: {errors[0].get('ctx', {}).get('error', 'cannot parse the body')}"
    problems = []
    for error in errors[:3]:
        where = ".".join(str(part) for part in error["loc"][1:])  # loc[0] is "body"
        problems.append(f"{where or 'body'}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems) + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "")


def _install_error_handlers(app: FastAPI) -> None:
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(err))

    async def refused(_: Request, err: InputError) -> JSONResponse:
        return _error(err.status, str(err))

    async def busy(_: Request, err: QueueFullError) -> JSONResponse:
        return _error(503, f"server busy: {err}; retry later", {"Retry-After": str(RETRY_AFTER_S)})

    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail), err.headers)

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(InputError, refused)
    app.add_exception_handler(QueueFullError, busy)
    app.add_exception_handler(HTTPException, http_error)


async def _measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Count and time every request; turn an unexpected exception into a one-line 500."""
    path = request.url.path
    endpoint = path if path in ENDPOINTS else "/static" if path.startswith("/static/") else "other"
    recorder = request.app.state.service.batcher.metrics
    recorder.request_started(endpoint)
    started, status = time.perf_counter(), 500
    try:
        response = await call_next(request)
        status = response.status_code
    except Exception:
        log.exception("%s %s failed", request.method, path)
        response = _error(500, "internal error; the server log has the details")
    finally:
        recorder.request_finished(endpoint, status, time.perf_counter() - started)
    return response


def create_app(service: TranslationService) -> FastAPI:
    """The app around ``service``; its batcher runs from startup to shutdown."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.batcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(service.batcher.close)  # serve what is queued, then stop

    app = FastAPI(
        title="seq2seq translation server",
        description="English→Spanish (or whatever the checkpoint learnt) with every attention map. "
        "The page is at /, metrics at /metrics.",
        lifespan=lifespan,
    )
    app.state.service = service
    service.batcher.metrics.expect(MODEL_ENDPOINTS)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _install_error_handlers(app)
    app.middleware("http")(_measure)
    return app
