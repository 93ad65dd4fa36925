"""OpenAI-style HTTP errors: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

log = logging.getLogger(__name__)


class APIError(Exception):
    """An error answered with an OpenAI-style body.

    Args:
        status: HTTP status (400 bad input, 404, 413, 500, 503 ...).
        message: what went wrong, for a person.
        code: stable machine code (``invalid_audio``, ``unsupported_modality`` ...).
        param: the offending request field, dotted (``messages[0].content[1].input_audio.data``).
        type: OpenAI error type (``invalid_request_error``, ``server_error``).
    """

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None,
                 type: str = "invalid_request_error") -> None:  # noqa: A002
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type

    def body(self) -> dict:
        """The JSON body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, code: str = "invalid_request", param: str | None = None) -> APIError:
    """A 400 ``invalid_request_error``."""
    return APIError(400, message, code=code, param=param)


def install_error_handlers(app: FastAPI) -> None:
    """Answer APIError, pydantic validation errors and crashes with OpenAI-style bodies."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

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
