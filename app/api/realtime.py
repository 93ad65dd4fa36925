"""``WS /v1/realtime?duplex=1`` (alias ``/v1/duplex``): the realtime duplex transport.

Thin: decode frames with :func:`app.backend.protocol.commands.decode_command`, hand them to the
session, write the session's events. One reader and one writer per socket; the session
task is the only thing that changes session state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from app.api.auth import PRINCIPAL
from app.backend.duplex.manager import CapacityExhausted
from app.backend.protocol import commands as C
from app.backend.protocol import events as E

log = logging.getLogger(__name__)

CLEAN_CLOSE_CODES = frozenset({1000, 1001})
"""WebSocket close codes by which a client ends its socket on purpose (normal closure, going away; RFC 6455
section 7.4.1): its session ends at once, as there is no session resume to keep the slot for."""

router = APIRouter()

_TRUE = ("1", "true", "on", "yes")


async def _refuse(ws: WebSocket, code: str, message: str, error_type: str, close_code: int, **extra: object) -> None:
    """Handshake error: the flat shape plus the nested one (``extra`` in both), then close."""
    await ws.send_json({"type": "error", "code": code, "message": message, **extra,
                        "error": {"type": error_type, "code": code, "message": message, **extra}})
    await ws.close(code=close_code)


@router.websocket("/v1/realtime")
@router.websocket("/v1/duplex")
async def realtime(ws: WebSocket) -> None:
    """Serve one realtime duplex connection (query: ``duplex``, ``model``, ``autostart``)."""
    engine = ws.app.state.engine
    q = ws.query_params
    await ws.accept()
    if ws.url.path.endswith("/realtime") and q.get("duplex", "").lower() not in _TRUE:
        await _refuse(ws, "unsupported_realtime_mode", "Realtime API is not available: connect with ?duplex=1",
                      "invalid_request_error", 1008)
        return
    model = q.get("model")
    served = engine.config.server.served_model_name
    if not engine.serves_model(model):
        await _refuse(ws, "model_not_found", f"model '{model}' is not served here (serving '{served}')",
                      "invalid_request_error", 1008)
        return
    autostart = q.get("autostart", "1").lower() in _TRUE
    max_bytes = engine.config.duplex_session.max_message_bytes
    first: dict | None = None
    if not autostart:
        # vLLM-Omni clients send session.update first and expect a refusal in reply to it:
        # admission happens on the first frame, answered at once.
        first = await ws.receive()
        if first["type"] == "websocket.disconnect":
            return
    try:
        session = engine.sessions.open(owner=ws.scope.get(PRINCIPAL))
    except CapacityExhausted as exc:
        await _refuse(ws, exc.code, str(exc), "rate_limit_error", 1013, retryable=exc.retryable,
                      retry_after_ms=exc.retry_after_ms, limit_scope=exc.scope)
        return
    if autostart:
        session.submit(C.SessionUpdate(type="session.update", session={}))
    writer = asyncio.create_task(_write(ws, session))
    close_code: int | None = None  # the client's close frame (None: the socket just dropped)
    try:
        while True:
            msg = first or await ws.receive()
            first = None
            if msg["type"] == "websocket.disconnect":
                close_code = msg.get("code")
                break
            raw = msg.get("text") if msg.get("text") is not None else msg.get("bytes", b"")
            try:
                session.submit(C.decode_command(raw, max_bytes=max_bytes))
            except C.ProtocolError as err:
                session.reject(err)
            if session.closed:
                break
    except WebSocketDisconnect as exc:
        close_code = exc.code
    finally:
        if session.closed:
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(writer, timeout=5)
        else:
            engine.sessions.detach(session, closed_by_client=close_code in CLEAN_CLOSE_CODES)
        writer.cancel()


async def _write(ws: WebSocket, session) -> None:
    try:
        while True:
            ev = await session.next_event()
            await ws.send_json(ev.to_wire())
            if isinstance(ev, E.SessionClosed):
                await ws.close(code=1000)
                return
    except (WebSocketDisconnect, RuntimeError, asyncio.CancelledError):
        return
    except Exception:  # an event that cannot be sent (a bug): end the socket rather than go silent
        log.exception("session %s: an event could not be sent; closing the socket (1011)", session.id)
        with contextlib.suppress(Exception):
            await ws.close(code=1011)
