"""Side routes of the WebRTC page, keyed by ``webrtc_id`` (FastRTC does not route data-channel
messages to handlers, so control goes over plain HTTP).

* ``POST /webrtc/force_listen`` ``{"webrtc_id": "..."}``: cancel the current reply
  (``barge_in``) and drop queued speech at once.
* ``GET /webrtc/state/{webrtc_id}``: captions, metrics, status of one conversation (what the
  page shows; headless ``/webrtc/offer`` clients poll this instead of Gradio's output stream).
* ``GET /webrtc/trace/{webrtc_id}``: the handler's timing marks (:mod:`app.ui.trace`); only when
  the server runs with ``OMNI_PAGE_TRACE=1`` (the benchmark), absent otherwise.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.ui import trace as page_trace
from app.ui.handler import HandlerRegistry


class ForceListenBody(BaseModel):
    """Body of ``POST /webrtc/force_listen``."""

    webrtc_id: str = Field(min_length=1, max_length=200)


def _not_found(webrtc_id: str) -> JSONResponse:
    return JSONResponse({"error": {"message": f"no live WebRTC conversation '{webrtc_id}'", "type": "invalid_request_error",
                                   "param": "webrtc_id", "code": "webrtc_not_found"}}, status_code=404)


def install_routes(app: FastAPI, registry: HandlerRegistry) -> None:
    """Add the side routes (call before Gradio is mounted at ``/``, which would shadow them)."""
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

    if page_trace.enabled():
        @router.get("/trace/{webrtc_id}")
        async def trace(webrtc_id: str) -> Any:
            h = registry.get(webrtc_id)
            if h is None or h.trace is None:
                return _not_found(webrtc_id)
            return h.trace.snapshot()

    app.include_router(router)
