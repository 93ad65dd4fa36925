"""A protocol-level stand-in for a vLLM-Omni server (a true external edge), for pool tests and benchmarks.

It speaks the parts of the realtime duplex protocol a front relies on, with no model behind it:

* ``GET /health`` -> 200 ``{"status": "ok", "sessions": {"active", "max_sessions"}}`` (this app's
  shape), or an empty 200 like vLLM-Omni when ``report_sessions=False``; 503 while ``sick``.
* ``GET /v1/models`` -> one model, ``model`` (each stand-in may serve its own name).
* ``POST /v1/chat/completions`` -> a non-streaming ``chat.completion`` whose content names the
  stand-in and the model it was asked for.
* ``WS /v1/realtime?duplex=1&autostart=0``: ``session.update`` -> ``session.created`` +
  ``session.updated`` (capabilities with ``max_sessions``), or, when ``max_sessions`` sessions are
  open, ``error{resource_exhausted, rate_limit_error}`` and close 1013 (vLLM-Omni's refusal);
  ``input_audio_buffer.append`` -> ``response.output_audio.delta`` echoing the audio (the hop
  probe); ``session.heartbeat`` -> ``session.heartbeat_ack``; ``session.close`` ->
  ``session.closed{client_close}``.

Records what it was sent (``seen_models``, ``seen_auth``) so tests can check the front's mapping.

Run alone (benchmarks)::

    python -m tests.standin_backend --port 9101 --max-sessions 4 --model m-a [--no-report-sessions]
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import uuid
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response

from tests.live_server import free_port


def standin_app(state: StandIn) -> FastAPI:
    """The ASGI app of one stand-in (state shared with the test through ``state``)."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> Response:
        if state.sick:
            return JSONResponse({"status": "unhealthy"}, status_code=503)
        if not state.report_sessions:
            return Response(status_code=200)
        return JSONResponse({"status": "ok", "sessions": {"active": len(state.sessions),
                                                           "max_sessions": state.max_sessions}})

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": state.model, "object": "model", "owned_by": "standin"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        state.seen_models.append(body.get("model"))
        state.seen_auth.append(request.headers.get("authorization"))
        state.chats += 1
        return {"id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"{state.name}:{body.get('model')}"}}]}

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        state.seen_auth.append(ws.headers.get("authorization"))
        await ws.accept()
        sid: str | None = None
        seq = 0

        async def send(event: dict[str, Any]) -> None:
            nonlocal seq
            seq += 1
            await ws.send_json({**event, "server_event_seq": seq})

        try:
            while True:
                ev = await ws.receive_json()
                etype = ev.get("type")
                if etype == "session.update" and sid is None:
                    state.seen_models.append((ev.get("session") or {}).get("model"))
                    if len(state.sessions) >= state.max_sessions:
                        state.refusals += 1
                        msg = f"duplex_session_capacity_exhausted: limit={state.max_sessions}"
                        await send({"type": "error", "error": {"type": "rate_limit_error",
                                                               "code": "resource_exhausted", "message": msg}})
                        await ws.close(code=1013)
                        return
                    sid = f"duplex-{state.name}-{uuid.uuid4().hex[:8]}"
                    state.sessions.add(sid)
                    session = {"id": sid, "object": "realtime.session", "model": state.model,
                               "capabilities": {"chunk_period_ms": 1000, "max_sessions": state.max_sessions,
                                                "supports_multi_session": state.max_sessions > 1}}
                    await send({"type": "session.created", "session": session})
                    await send({"type": "session.updated", "session": session})
                elif etype == "input_audio_buffer.append":
                    await send({"type": "response.output_audio.delta", "response_id": "resp-standin",
                                "item_id": "item-standin", "output_index": 0, "content_index": 0,
                                "delta": ev.get("audio", ""), "format": "pcm16", "sample_rate_hz": 24000,
                                "epoch": 0})
                elif etype == "session.heartbeat":
                    await send({"type": "session.heartbeat_ack", "session_id": sid})
                elif etype == "session.close":
                    await send({"type": "session.closed", "session_id": sid, "reason": "client_close"})
                    await ws.close(code=1000)
                    return
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            if sid is not None:
                state.sessions.discard(sid)

    return app


class StandIn:
    """One stand-in backend on loopback (uvicorn in a thread), restartable on the same port.

    Args:
        name: label, echoed in chat answers and session ids.
        max_sessions: sessions it admits before refusing with ``resource_exhausted``.
        model: the model name it serves.
        report_sessions: report ``sessions`` on ``/health`` (this app's shape) or not (vLLM-Omni).
    """

    def __init__(self, name: str, *, max_sessions: int = 2, model: str = "standin-model",
                 report_sessions: bool = True, port: int | None = None) -> None:
        self.name, self.max_sessions, self.model, self.report_sessions = name, max_sessions, model, report_sessions
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.sessions: set[str] = set()
        self.seen_models: list[Any] = []
        self.seen_auth: list[str | None] = []
        self.refusals = 0
        self.chats = 0
        self.sick = False
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 20.0) -> StandIn:
        """Serve; return once ``/health`` answers."""
        self._server = uvicorn.Server(uvicorn.Config(standin_app(self), host="127.0.0.1", port=self.port,
                                                     log_level="warning", ws_ping_interval=None))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(self.base_url + "/health", timeout=1)
                return self
            time.sleep(0.05)
        raise RuntimeError(f"stand-in {self.name} did not start")

    def stop(self) -> None:
        """Stop serving (open WebSockets are closed by uvicorn's shutdown)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sessions.clear()


def main() -> None:
    """``python -m tests.standin_backend --port P --max-sessions N --model NAME``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-sessions", type=int, default=4)
    ap.add_argument("--model", default="standin-model")
    ap.add_argument("--name", default=None)
    ap.add_argument("--no-report-sessions", action="store_true", help="empty 200 on /health, like vLLM-Omni")
    args = ap.parse_args()
    s = StandIn(args.name or f"standin-{args.port}", max_sessions=args.max_sessions, model=args.model,
                port=args.port, report_sessions=not args.no_report_sessions)
    uvicorn.run(standin_app(s), host="127.0.0.1", port=args.port, log_level="warning", ws_ping_interval=None)


if __name__ == "__main__":
    main()
