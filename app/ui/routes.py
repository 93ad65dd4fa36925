"""Side routes of the WebRTC page, keyed by ``webrtc_id`` (FastRTC does not route data-channel
messages to handlers, so control goes over plain HTTP).

* ``POST /webrtc/force_listen`` ``{"webrtc_id": "..."}``: cancel the current reply
  (``barge_in``) and drop queued speech at once.
* ``GET /webrtc/state/{webrtc_id}``: captions, metrics, status of one conversation (what the
  page shows; headless ``/webrtc/offer`` clients poll this instead of Gradio's output stream).
* ``GET /webrtc/unit/{webrtc_id}/{i}.jpg``: what the model was given with the last unit: image
  ``0`` the base frame, ``1`` the stacked composite (frame stacking N > 1); the page's preview.
* ``GET /webrtc/trace/{webrtc_id}``: the handler's timing marks (:mod:`app.ui.trace`); only when
  the server runs with ``OMNI_PAGE_TRACE=1`` (the benchmark), absent otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from app.media import encode_jpeg
from app.ui import trace as page_trace
from app.ui.handler import HandlerRegistry

POLLED_PREFIXES: tuple[str, ...] = ("/webrtc/unit/", "/webrtc/state/")
"""Routes a live page or client polls (the unit preview about once a second per call)."""


class PolledAccessFilter(logging.Filter):
    """Drops uvicorn's access-log lines of polls of :data:`POLLED_PREFIXES` (one line per second per
    call otherwise; a 404 there is "no frame yet"), unless ``uvicorn.access`` logs at DEBUG.
    Server errors (5xx) stay.

    uvicorn's access record: ``args = (client, method, path, http_version, status_code)``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 5 or logging.getLogger("uvicorn.access").isEnabledFor(logging.DEBUG):
            return True
        _client, method, path, _version, status = args
        polled = method == "GET" and isinstance(path, str) and path.startswith(POLLED_PREFIXES)
        return not (polled and isinstance(status, int) and status < 500)


def quiet_polled_access_log() -> None:
    """Put :class:`PolledAccessFilter` on ``uvicorn.access`` (idempotent)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, PolledAccessFilter) for f in logger.filters):
        logger.addFilter(PolledAccessFilter())


class ForceListenBody(BaseModel):
    """Body of ``POST /webrtc/force_listen``."""

    webrtc_id: str = Field(min_length=1, max_length=200)


def _not_found(webrtc_id: str) -> JSONResponse:
    return JSONResponse({"error": {"message": f"no live WebRTC conversation '{webrtc_id}'", "type": "invalid_request_error",
                                   "param": "webrtc_id", "code": "webrtc_not_found"}}, status_code=404)


def install_routes(app: FastAPI, registry: HandlerRegistry) -> None:
    """Add the side routes (call before Gradio is mounted at ``/``, which would shadow them); their
    polls stay out of the access log (:func:`quiet_polled_access_log`)."""
    quiet_polled_access_log()
    router = APIRouter(prefix="/webrtc", tags=["webrtc"])

    @router.post("/force_listen")
    async def force_listen(body: ForceListenBody) -> Any:
        h = registry.get(body.webrtc_id)
        if h is None:
            return _not_found(body.webrtc_id)
        return {"ok": h.force_listen(), "webrtc_id": body.webrtc_id}

    @router.get("/state/{webrtc_id}")
    async def state(webrtc_id: str) -> Any:
        h = registry.get(webrtc_id)
        if h is None:
            return _not_found(webrtc_id)
        return h.state()

    @router.get("/unit/{webrtc_id}/{index}.jpg")
    async def unit_image(webrtc_id: str, index: int) -> Any:
        h = registry.get(webrtc_id)
        given = h.frames.given if h is not None else ()
        if not 0 <= index < len(given):
            return _not_found(webrtc_id)
        jpeg = await asyncio.to_thread(encode_jpeg, given[index], 80)
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

    if page_trace.enabled():
        @router.get("/trace/{webrtc_id}")
        async def trace(webrtc_id: str) -> Any:
            h = registry.get(webrtc_id)
            if h is None or h.trace is None:
                return _not_found(webrtc_id)
            return h.trace.snapshot()

    app.include_router(router)
