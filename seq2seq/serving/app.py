"""The FastAPI app: routes, one-line JSON errors, the page, and the batcher's lifetime.

Every error a client can cause is answered with ``{"error": "<one line>"}`` and its status
(413, 422, 503 with Retry-After, 404, 405); an unexpected failure is logged on the server and
answered 500 with no traceback (:mod:`seq2seq.serving.edge`). A request whose client goes away is
cancelled, and with it the decoding of its sentences. At shutdown uvicorn gives the requests in
flight its graceful timeout and cancels the rest, which are answered 503; the batcher then stops,
waiting at most :data:`WORKER_STOP_S` for a model call in progress.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from seq2seq.serving.batcher import QueueFullError, ShuttingDownError
from seq2seq.serving.edge import CLOSE, RETRY_AFTER_S, Edge, error_response
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
WORKER_STOP_S = 5  # at shutdown, how long the exit waits for a model call in progress
CLIENT_GONE = 499  # nginx's status for a client that closed the connection: logged, never read
MODEL_ENDPOINTS = ("/translate", "/attention")  # the ones that queue for the model
ENDPOINTS = {"/", "/translate", "/attention", "/health", "/info", "/metrics", "/docs", "/openapi.json"}
ERRORS: dict[int | str, dict] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in [
        (413, "the body, or an input in it, is longer than the server accepts"),
        (422, "malformed JSON, unknown or wrong fields, beam/nbest/max_len out of range"),
        (503, "the request queue is full, or the server is shutting down: retry after Retry-After"),
    ]
}
T = TypeVar("T")

router = APIRouter()


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def _service(request: Request) -> TranslationService:
    return request.app.state.service


Service = Annotated[TranslationService, Depends(_service)]


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed the connection (its body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or :class:`ClientGone` once the client goes away: ``work`` is cancelled,
    and with it its place in the batcher, so none of its sentences is decoded for nobody."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()  # a no-op once done; else the client went away or the request is cancelled
        gone.cancel()
    if not task.done():
        raise ClientGone
    return task.result()


@router.post("/translate", responses=ERRORS)
async def translate(body: TranslateRequest, service: Service, request: Request) -> TranslateResponse:
    """Translate one sentence or a list of them; each gets its best translation and n-best list."""
    try:
        texts, prefixes, constraints = body.texts_and_targets()
    except ValueError as err:
        raise InputError(422, str(err)) from err
    cfg = service.decode_cfg_for(body.beam, body.nbest, body.max_len)
    return TranslateResponse(
        translations=await _unless_gone(
            request, service.translate(texts, cfg, prefixes, constraints, body.constraints_in_order)
        )
    )


@router.post("/attention", responses=ERRORS)
async def attention(body: AttentionRequest, service: Service, request: Request) -> AttentionResponse:
    """Translate one sentence and return every attention map: all layers and heads of each kind."""
    cfg = service.decode_cfg_for(body.beam, 1, body.max_len)
    return await _unless_gone(request, service.attention(body.text, cfg, body.prefix))


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
        return error_response(422, _validation_message(err))

    async def refused(_: Request, err: InputError) -> JSONResponse:
        return error_response(err.status, str(err))

    async def busy(_: Request, err: QueueFullError) -> JSONResponse:
        headers = {"Retry-After": str(RETRY_AFTER_S)} | (CLOSE if isinstance(err, ShuttingDownError) else {})
        return error_response(503, f"server busy: {err}; retry later", headers)

    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        return error_response(err.status_code, str(err.detail), err.headers)

    async def gone(_: Request, err: ClientGone) -> JSONResponse:
        return error_response(CLIENT_GONE, "the client closed the connection")

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(InputError, refused)
    app.add_exception_handler(QueueFullError, busy)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(ClientGone, gone)


def create_app(service: TranslationService, draining: Callable[[], bool] = lambda: False) -> FastAPI:
    """The app around ``service``; its batcher runs from startup to shutdown. Once ``draining()``
    (the server's graceful shutdown has begun), every answer closes its connection."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.batcher.start()
        try:
            yield
        finally:
            if not await asyncio.to_thread(service.batcher.close, WORKER_STOP_S):
                log.warning("exiting with a model call still running after %d s", WORKER_STOP_S)

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
    app.add_middleware(
        Edge,
        metrics=service.batcher.metrics,
        max_body_bytes=service.limits.max_body_bytes,
        endpoints=ENDPOINTS,
        draining=draining,
    )
    return app
