"""The app's outermost layer, in plain ASGI: it sees a request before its body is read, and sees
its task cancelled, which routes and ``@app.middleware`` functions do not. It counts and times
every request, refuses a body over the limit, and answers every failure as ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seq2seq.serving.metrics import ServingMetrics

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # what a 503 tells the client to wait
INTERNAL = "internal error; the server log has the details"
SHUTTING_DOWN = "the server is shutting down and could not answer in time; retry"
CLOSE = {"Connection": "close"}  # after a refused body (never read), and every answer of a server that stops


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The body of every error the server answers: ``{"error": "<one line>"}``."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _without_connection(start: Message) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in start.get("headers", []) if name.lower() != b"connection"]


class BodyTooLarge(HTTPException):
    """A body that passed the limit while it streamed in (a chunked one declares no length)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body is over {limit} bytes, the most this server accepts", CLOSE)


class Edge:
    """Wraps the app: metrics for every request, the body limit, and JSON for every failure."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServingMetrics,
        max_body_bytes: int,
        endpoints: Collection[str],
        draining: Callable[[], bool],
    ) -> None:
        self.app = app
        self.draining = draining
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        endpoint = path if path in self.endpoints else "/static" if path.startswith("/static/") else "other"
        self.metrics.request_started(endpoint)
        started, status = time.perf_counter(), 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if self.draining():  # a keep-alive client's next request would meet a closed connection
                    message = {
                        **message,
                        "headers": [*_without_connection(message), (b"connection", b"close")],
                    }
            await send(message)

        try:
            await self._answer(scope, receive, sending, lambda: status != 0)
        finally:
            self.metrics.request_finished(endpoint, status or 500, time.perf_counter() - started)

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, responded: Callable[[], bool]
    ) -> None:
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:  # refused unread
            message = f"the body has {int(declared)} bytes; this server accepts at most {self.max_body_bytes}"
            await error_response(413, message, CLOSE)(scope, receive, send)
            return
        try:
            await self.app(scope, self._limited(receive), send)
        except Exception:
            log.exception("%s %s failed", scope["method"], scope["path"])
            if not responded():
                await error_response(500, INTERNAL)(scope, receive, send)
        except asyncio.CancelledError:  # uvicorn's graceful shutdown ran out of time for this request
            if not responded():  # the task ends here, so the cancellation needs no passing on
                # closing: uvicorn drops the connection after this answer, where a keep-alive
                # client's next request would meet a reset
                headers = {"Retry-After": str(RETRY_AFTER_S), **CLOSE}
                await error_response(503, SHUTTING_DOWN, headers)(scope, receive, send)

    def _limited(self, receive: Receive) -> Receive:
        """``receive``, raising :class:`BodyTooLarge` as soon as the body passes the limit."""
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                raise BodyTooLarge(self.max_body_bytes)
            return message

        return limited
