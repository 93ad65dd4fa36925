"""A FastRTC ``ReplyOnPause`` voice cascade (and a WebRTC echo) for ``benchmarks/bench_peers.py``.

Built the way FastRTC's own examples build a talk-to-an-LLM app (``fastrtc==0.0.34``): a generator
``respond(audio)`` wrapped in :class:`fastrtc.ReplyOnPause` (Silero VAD pause detection, FastRTC's
default ``AlgoOptions``), inside ``Stream(modality="audio", mode="send-receive")`` mounted on a
FastAPI app (``POST /webrtc/offer``). ``respond`` transcribes the whole utterance, asks the LLM
for the whole reply, then yields the speech one sentence at a time: the smallest honest pipeline,
with the same three models as the app (:class:`benchmarks.peers.models.Cascade`) and none of the
app's own tricks (no Smart Turn, no speculative ASR/LLM, no streamed LLM text).

The one departure from FastRTC's defaults: its ``get_silero_model()`` downloads a Silero graph from
a model hub, so :class:`SileroV5` gives ``ReplyOnPause`` the Silero v5 graph from Pipecat's wheel
(the same file the Pipecat peer's VAD loads), through FastRTC's own ``SileroVADModel`` code
(its speech-timestamp logic; only the ONNX call differs: v5 reads 512-sample windows with 64
samples of context and one ``state`` tensor, where FastRTC's graph read ``h``/``c``).

``--echo``: no models; an ``AsyncStreamHandler`` that sends every mic frame straight back (the
WebRTC floor: what any stack's ear-to-ear includes before its models start).

Routes: ``GET /`` the measurement page (:file:`client.html`), ``GET /health``, ``GET /peer/turns``
(the cascade's turns: transcript, reply, model times; and its events: each output-queue clear of
``ReplyOnPause``, stamped with ``time.monotonic()``, the barge-in cut), ``POST /peer/reset`` (a new
conversation), ``POST /webrtc/offer`` (FastRTC's).

Usage::

    .venv/bin/python benchmarks/peers/fastrtc_cascade.py --port 8011 [--echo]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.peers.models import Cascade, silero_v5_path, to_asr_input

CLIENT_HTML = Path(__file__).with_name("client.html")
"""The page every peer is measured with (plain ``RTCPeerConnection``)."""

SILERO_WINDOW = 512
"""Samples per Silero v5 call at 16 kHz (the only window v5 accepts; FastRTC allows 512/1024/1536)."""

SILERO_CONTEXT = 64
"""Samples of the previous window v5 reads before each window (silero-vad's ``OnnxWrapper``)."""


def silero_v5_model() -> Any:
    """A FastRTC ``SileroVADModel`` running the Silero v5 graph (see the module docstring)."""
    import onnxruntime
    from fastrtc.pause_detection.silero import SileroVADModel

    class SileroV5(SileroVADModel):
        @staticmethod
        def download_model() -> str:
            return str(silero_v5_path())

        def __init__(self) -> None:
            opts = onnxruntime.SessionOptions()  # FastRTC's session options
            opts.inter_op_num_threads = 1
            opts.intra_op_num_threads = 1
            opts.log_severity_level = 4
            self.session = onnxruntime.InferenceSession(self.download_model(), providers=["CPUExecutionProvider"],
                                                        sess_options=opts)

        def get_initial_state(self, batch_size: int):  # (state, context)
            return (np.zeros((2, batch_size, 128), dtype=np.float32),
                    np.zeros((batch_size, SILERO_CONTEXT), dtype=np.float32))

        def __call__(self, x, state, sr: int):
            x = np.asarray(x, dtype=np.float32).reshape(1, -1)
            st, ctx = state
            out, st = self.session.run(None, {"input": np.concatenate([ctx, x], axis=1), "state": st,
                                              "sr": np.array(sr, dtype=np.int64)})
            return out, (st, x[:, -SILERO_CONTEXT:])

    m = SileroV5()
    m.warmup()
    return m


def build_app(echo: bool) -> Any:
    """The FastAPI app: the FastRTC stream mounted, the page and the helper routes."""
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastrtc import AsyncStreamHandler, ReplyOnPause, Stream
    from fastrtc.pause_detection.silero import SileroVadOptions

    app = FastAPI()
    cascade: Cascade | None = None
    if echo:
        class Echo(AsyncStreamHandler):
            """Every mic frame straight back."""

            def __init__(self) -> None:
                super().__init__(expected_layout="mono", output_sample_rate=48000, input_sample_rate=48000)
                self.queue: asyncio.Queue = asyncio.Queue()

            async def receive(self, frame: tuple[int, np.ndarray]) -> None:
                await self.queue.put(frame)

            async def emit(self) -> Any:
                return await self.queue.get()

            def copy(self) -> Echo:
                return Echo()

        handler: Any = Echo()
    else:
        cascade = Cascade()
        cascade.warmup()

        def respond(audio: tuple[int, np.ndarray]):
            rate, pcm = audio
            t0 = time.monotonic()
            text = cascade.transcribe(to_asr_input(rate, pcm))
            t1 = time.monotonic()
            if not text:
                cascade.record(heard="", reply="", asr_ms=round((t1 - t0) * 1000, 1))
                return
            reply = cascade.reply(text)
            t2 = time.monotonic()
            first = None
            for chunk in cascade.speak(reply):
                if first is None:
                    first = time.monotonic()
                    cascade.record(heard=text, reply=reply, asr_ms=round((t1 - t0) * 1000, 1),
                                   llm_ms=round((t2 - t1) * 1000, 1), tts_first_ms=round((first - t2) * 1000, 1),
                                   pause_to_first_audio_ms=round((first - t0) * 1000, 1))
                yield cascade.voice_rate, chunk.reshape(1, -1)

        class TracedReplyOnPause(ReplyOnPause):
            """FastRTC's ``ReplyOnPause``, its queue clears stamped (the barge-in cut; behaviour unchanged).

            ``ReplyOnPause.receive`` clears the output queue at every pause it detects (``can_interrupt``,
            the default): the end of a turn, and during a reply the end of an interruption.
            """

            @property
            def clear_queue(self) -> Any:  # FastRTC's is a property returning the track's callback
                inner = self._clear_queue

                def traced() -> None:
                    cascade.event("clear_queue", responding=bool(self.state.responding))
                    inner()
                return traced

            def copy(self) -> TracedReplyOnPause:
                h = super().copy()
                h.__class__ = TracedReplyOnPause
                return h

        handler = TracedReplyOnPause(respond, model=silero_v5_model(),
                                     model_options=SileroVadOptions(window_size_samples=SILERO_WINDOW),
                                     output_sample_rate=cascade.voice_rate)
    stream = Stream(handler=handler, modality="audio", mode="send-receive",
                    concurrency_limit=64)  # hung-up calls are cleaned up late: never refuse the next
    stream.mount(app)

    @app.get("/")
    def page() -> HTMLResponse:
        return HTMLResponse(CLIENT_HTML.read_text())

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "peer": "fastrtc-echo" if echo else "fastrtc"}

    @app.get("/peer/turns")
    def turns() -> JSONResponse:
        return JSONResponse({"turns": cascade.turns if cascade else [], "events": cascade.events if cascade else []})

    @app.post("/peer/reset")
    def reset() -> dict[str, bool]:
        if cascade is not None:
            cascade.reset()
        return {"ok": True}

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="0.0.0.0", help="bind address (WebRTC wants a non-loopback candidate)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--echo", action="store_true", help="echo the mic back (no models)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import uvicorn

    uvicorn.run(build_app(args.echo), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
