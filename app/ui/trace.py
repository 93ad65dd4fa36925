"""Timing trace of the page path, per WebRTC peer: a debug aid for ``benchmarks/bench_browser.py``.

Off unless the server process runs with ``OMNI_PAGE_TRACE=1``: then every handler keeps a
bounded log of ``(time.monotonic(), kind, fields)`` marks and ``GET /webrtc/trace/{webrtc_id}``
returns it (the route exists only then). Off, the handler holds ``trace = None`` and pays one
``is None`` test per mark site.

Marks (``kind``: fields):

* ``speech_started`` / ``speech_stopped``: the session's VAD events as the handler receives them;
  ``speech_stopped`` carries ``audio_end_ms`` (media clock), ``end_sample_arrived`` (when the
  input sample at ``audio_end_ms`` reached the handler) and ``mic_loud_arrived`` (when the last
  mic frame with speech energy, a 10 ms block above :data:`MIC_LOUD_RMS`, reached the handler);
* ``transcription``, ``response_created``, ``response_done`` (``status``, ``reason``),
  ``flush`` (``cut``);
* ``delta``: one audio delta (``response_id``, ``ms`` of audio, ``first``);
* ``emit``: a slice handed to FastRTC (``response_id`` of its first sample, ``ms``, ``first`` for a
  response's first slice, ``queue`` = frames already waiting in FastRTC's output queue,
  ``gap_ms`` = how long the playback clock had run dry before this slice of the same response);
* pipeline stages (:func:`probe_pipeline`): ``asr_start`` / ``asr_done`` (the utterance's
  transcription, keyed by its ``request``: speculative at a pause, or at the end of the turn),
  then, keyed by ``response_id``, ``llm_start`` (the Thinker starts the reply), ``llm_first``
  (its first streamed text: TTFT), ``llm_done`` (the reply is written), ``tts_first`` (the first
  PCM chunk out of Code2Wav).

Times are ``time.monotonic()`` of the server process: on Linux the same ``CLOCK_MONOTONIC`` as
any other process on the machine (the benchmark joins them with the page's clock).
"""

from __future__ import annotations

import functools
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from app.backend.protocol import events as E
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ, ms_to_samples

TRACE_ENV = "OMNI_PAGE_TRACE"
"""Environment variable that turns the trace on (``1``)."""

MAX_MARKS = 6000
"""Marks kept per peer (oldest dropped first)."""

MIC_LOUD_RMS = 10 ** (-34 / 20)
"""A 10 ms mic block above this RMS (-34 dBFS) has speech energy: the benchmark's speech-end
criterion for its clips (``e2e.media.speech_span``)."""


ONSET_RMS = 0.01
"""The page's audibility threshold (``e2e/driver.py`` ``RMS_THRESHOLD``)."""


def onset_ms(audio: np.ndarray, rate: int) -> float | None:
    """Where the first 5 ms window above :data:`ONSET_RMS` starts in ``audio``, ms (None: never)."""
    n = max(1, rate // 200)
    m = audio.size // n
    if not m:
        return None
    loud = np.flatnonzero(np.sqrt(np.mean(np.square(audio[: m * n].reshape(m, n)), axis=1)) > ONSET_RMS)
    return round(float(loud[0]) * n * 1000.0 / rate, 1) if loud.size else None


def enabled() -> bool:
    """Whether this process traces (``OMNI_PAGE_TRACE`` set and not ``0``)."""
    return os.environ.get(TRACE_ENV, "") not in ("", "0")


class PageTrace:
    """The marks of one peer (one handler)."""

    def __init__(self, maxlen: int = MAX_MARKS) -> None:
        self.marks: deque[tuple[float, str, dict[str, Any]]] = deque(maxlen=maxlen)
        self.mic_loud_at: float | None = None
        self.emitted = 0
        """Output samples handed to FastRTC so far (its frames' ``pts`` count the same samples)."""
        self._pending: deque[tuple[int, str]] = deque()
        self._watched: Any = None

    def mark(self, kind: str, t: float | None = None, **fields: Any) -> None:
        """Record ``kind`` at ``t`` (default: now)."""
        self.marks.append((time.monotonic() if t is None else t, kind, fields))

    def mic_frame(self, x: np.ndarray, rate: int, at: float) -> None:
        """One mic frame (float32 mono) that reached the handler at ``at``: note speech energy."""
        n = max(1, rate // 100)
        m = x.size // n
        if m and float(np.max(np.sqrt(np.mean(np.square(x[: m * n].reshape(m, n)), axis=1)))) > MIC_LOUD_RMS:
            self.mic_loud_at = at

    def on_event(self, ev: E.ServerEvent, now: float, time_of_sample: Any) -> None:
        """Mark one session event the handler received at ``now``; ``time_of_sample(n)`` is when
        input sample ``n`` reached the handler."""
        if isinstance(ev, E.AudioDelta):
            audio = np.asarray(ev.audio, np.float32)
            self.mark("delta", t=now, response_id=ev.response_id, ms=round(audio.size * 1000.0 / ev.sample_rate_hz, 1),
                      onset_ms=onset_ms(audio, ev.sample_rate_hz))
        elif isinstance(ev, E.SpeechStopped):
            self.mark("speech_stopped", t=now, audio_end_ms=ev.audio_end_ms,
                      end_sample_arrived=time_of_sample(ms_to_samples(ev.audio_end_ms, INPUT_SAMPLE_RATE_HZ)),
                      mic_loud_arrived=self.mic_loud_at)
        elif isinstance(ev, E.SpeechStarted):
            self.mark("speech_started", t=now, audio_start_ms=ev.audio_start_ms)
        elif isinstance(ev, E.InputTranscription):
            self.mark("transcription", t=now, text=ev.transcript)
        elif isinstance(ev, E.ResponseCreated):
            self.mark("response_created", t=now, response_id=ev.response_id)
        elif isinstance(ev, E.ResponseDone):
            self.mark("response_done", t=now, response_id=ev.response_id, status=ev.status, reason=ev.reason)

    def on_emit(self, rel: Any, track: Any) -> None:
        """A released slice (:class:`app.ui.playback.Released` with audio) goes to FastRTC's ``track``."""
        self.watch_track(track)
        q = getattr(track, "queue", None)
        first = rel.response_id in rel.first_of
        self.mark("emit", response_id=rel.response_id, ms=round(rel.audio.size * 1000.0 / OUTPUT_SAMPLE_RATE_HZ, 1),
                  first=first, queue=q.qsize() if q is not None else None, gap_ms=round(rel.gap_s * 1000.0, 1))
        self.emitted_slice(rel.response_id, int(rel.audio.size), first)

    def emitted_slice(self, response_id: str | None, samples: int, first: bool) -> None:
        """A slice of ``samples`` went to FastRTC; for a response's first slice, watch for the frame
        that carries its first sample leaving the track (mark ``sent``)."""
        if first and response_id is not None:
            self._pending.append((self.emitted, response_id))
        self.emitted += samples

    def dropped(self) -> None:
        """FastRTC's queue was cleared: a watched first sample may never be sent."""
        self._pending.clear()

    def watch_track(self, track: Any) -> None:
        """Wrap ``track.recv`` (FastRTC's ``AudioCallback``: aiortc's sender pulls every frame
        through it) to mark when the frame holding a watched sample is handed to aiortc."""
        if track is None or track is self._watched:
            return
        self._watched = track
        orig = track.recv

        async def recv() -> Any:
            frame = await orig()
            pts = getattr(frame, "pts", None)
            if self._pending and pts is not None:
                end = pts + int(getattr(frame, "samples", 0))
                while self._pending and self._pending[0][0] < end:
                    pos, rid = self._pending.popleft()
                    self.mark("sent", response_id=rid, pos=pos, pts=pts)
            return frame

        track.recv = recv

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready: ``{"clock": "monotonic", "now": ..., "marks": [[t, kind, fields], ...]}``."""
        return {"clock": "monotonic", "now": time.monotonic(), "marks": [[t, k, f] for t, k, f in self.marks]}


_BY_SESSION: dict[str, PageTrace] = {}
_PROBED: set[int] = set()


def register(session_id: str, trace: PageTrace) -> None:
    """Route the pipeline marks of ``session_id`` to ``trace``."""
    _BY_SESSION[session_id] = trace


def unregister(session_id: str) -> None:
    """Stop routing marks of ``session_id``."""
    _BY_SESSION.pop(session_id, None)


def _sink(request_id: str) -> tuple[PageTrace | None, str]:
    sid, _, rid = request_id.partition(":")
    return _BY_SESSION.get(sid), rid


def probe_pipeline(pipeline: Any) -> None:
    """Wrap ``pipeline.transcribe/_generate/speak`` (this instance only, once) to mark stage times
    of requests whose session is registered. Only called with the trace on.

    A session transcribes an utterance under a request id of its own (``<session>:asr<n>``, shared
    by the reply and the turn detector), so ASR marks carry ``request`` and no ``response_id``;
    the benchmark takes the last one done before the response opened."""
    if pipeline is None or id(pipeline) in _PROBED:
        return
    _PROBED.add(id(pipeline))
    transcribe, generate, speak = pipeline.transcribe, pipeline._generate, pipeline.speak

    @functools.wraps(transcribe)
    async def _transcribe(ctx: Any, audio: Any, context: str = "") -> Any:
        tr, rid = _sink(ctx.request_id)
        if tr is not None:
            tr.mark("asr_start", request=rid, audio_ms=round(len(audio) / 16.0, 1))
        out = await transcribe(ctx, audio, context)
        if tr is not None:
            tr.mark("asr_done", request=rid)
        return out

    @functools.wraps(generate)
    async def _generate(ctx: Any, prompt: Any, params: Any, on_text: Any) -> Any:
        tr, rid = _sink(ctx.request_id)
        if tr is not None:
            tr.mark("llm_start", response_id=rid)
        if tr is not None and on_text is not None:
            inner, seen = on_text, False

            def on_text(raw: str) -> bool:  # stage thread: the trace's deque append is atomic
                nonlocal seen
                if not seen and raw.strip():
                    seen = True
                    tr.mark("llm_first", response_id=rid)
                return inner(raw)
        out = await generate(ctx, prompt, params, on_text)
        if tr is not None:
            tr.mark("llm_done", response_id=rid)
        return out

    @functools.wraps(speak)
    async def _speak(ctx: Any, segments: Any) -> AsyncIterator[Any]:
        tr, rid = _sink(ctx.request_id)
        first = True
        inner = speak(ctx, segments)
        try:
            async for chunk in inner:
                if first and tr is not None:
                    tr.mark("tts_first", response_id=rid)
                first = False
                yield chunk
        finally:
            await inner.aclose()

    pipeline.transcribe, pipeline._generate, pipeline.speak = _transcribe, _generate, _speak
