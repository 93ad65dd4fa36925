"""OpenAI-style HTTP errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.routing import Match, Mount

log = logging.getLogger(__name__)


class APIError(Exception):
    """An error answered with an OpenAI-style body.

    Args:
        status: HTTP status (400 bad input, 404, 413, 500, 503 ...).
        message: what went wrong, for a person.
        code: stable machine code (``invalid_audio``, ``unsupported_modality`` ...).
        param: the offending request field, dotted (``messages[0].content[1].input_audio.data``).
        type: OpenAI error type (``invalid_request_error``, ``server_error``).
        retry_after_ms: a retryable refusal (503 / 429): when to retry, ms; sent as the
            ``Retry-After`` header (whole seconds, rounded up) and ``retryable`` /
            ``retry_after_ms`` in the body.
    """

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None,
                 type: str = "invalid_request_error", retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type
        self.retry_after_ms = retry_after_ms

    def body(self) -> dict:
        """The JSON body."""
        err = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        if self.retry_after_ms is not None:
            err |= {"retryable": True, "retry_after_ms": int(self.retry_after_ms)}
        return {"error": err}

    def headers(self) -> dict[str, str] | None:
        """``Retry-After`` for a retryable refusal, else None."""
        if self.retry_after_ms is None:
            return None
        return {"Retry-After": str(max(1, -(-int(self.retry_after_ms) // 1000)))}


def bad_request(message: str, *, code: str = "invalid_request", param: str | None = None) -> APIError:
    """A 400 ``invalid_request_error``."""
    return APIError(400, message, code=code, param=param)


def install_error_handlers(app: FastAPI) -> None:
    """Answer APIError, pydantic validation errors and crashes with OpenAI-style bodies."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        msg = f"{param}: {first.get('msg', 'invalid request')}" if param else first.get("msg", "invalid request")
        return JSONResponse(APIError(400, msg, code="invalid_request", param=param).body(), status_code=400)

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        err = APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error", type="server_error")
        return JSONResponse(err.body(), status_code=500)


UNKNOWN_API_PATH = "/v1/{rest:path}"


def install_api_fallback(app: FastAPI) -> None:
    """Answer unknown ``/v1/...`` requests with OpenAI-style bodies (call after the API routes).

    Without it the page mounted at ``/`` would answer them with its own ``{"detail": "Not Found"}``
    (a wrong method on a known path included). The answers: 405 ``method_not_allowed`` (with an
    ``Allow`` header) for a known path, 426 ``websocket_required`` for a WebSocket-only path, else
    404 ``unknown_url`` with OpenAI's wording, ``Invalid URL (GET /v1/...)``.
    """
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    def served(request: Request, **change: str) -> bool:
        scope = {**request.scope, **change}
        return any(r.matches(scope)[0] is Match.FULL for r in request.app.router.routes
                   if not isinstance(r, Mount) and getattr(r, "path", None) != UNKNOWN_API_PATH)

    async def unknown(request: Request) -> JSONResponse:
        path, method = request.url.path, request.method
        allowed = [m for m in methods if m != method and served(request, method=m)]
        if allowed:
            err = APIError(405, f"{method} is not allowed on {path}; use {', '.join(allowed)}",
                           code="method_not_allowed")
            return JSONResponse(err.body(), status_code=405, headers={"Allow": ", ".join(allowed)})
        if served(request, type="websocket"):
            err = APIError(426, f"{path} is a WebSocket endpoint: connect with a WebSocket client (ws:// or wss://)",
                           code="websocket_required")
            return JSONResponse(err.body(), status_code=426, headers={"Upgrade": "websocket"})
        err = APIError(404, f"Invalid URL ({method} {path})", code="unknown_url")
        return JSONResponse(err.body(), status_code=404)

    app.add_api_route(UNKNOWN_API_PATH, unknown, methods=methods, include_in_schema=False)
