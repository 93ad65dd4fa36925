"""The FastRTC handler: one per WebRTC peer, translating media to session commands and back.

Inbound: mic frames (FastRTC's ``(rate, int16 (1, N))``) are resampled to 16 kHz float32 and
sent as :class:`AppendArrays` every ~20 ms (:class:`~app.ui.mic_intake.MicIntake`); camera frames
(BGR) become RGB and ride on the append that closes each duplex unit (base frame + optional
composite, see :mod:`app.ui.frames`).

Outbound: the session's typed events are consumed by ``isinstance`` (never by wire type):

=====================  ==================================================================
event                  effect here
=====================  ==================================================================
AudioDelta             audio queued in a :class:`~app.ui.playback.Playback` backlog that
                       :meth:`OmniHandler.emit` releases in real time (short lead)
TranscriptDelta        caption text attached to its audio, shown when that audio starts
TextDelta              caption shown at once (text-only replies)
InputTranscription     the user's caption
SpeechStopped          starts the first-audio clock (metric)
SpeechStarted          with "interrupt as soon as I speak": drop queued speech now (a reply
                       the session already finished may still be playing here)
ResponseListen         with a ``response_id`` (the model ended a reply): drop its audio;
                       without one: drop audio of replies that did not complete normally
                       (a completed reply keeps playing: the session sends audio ahead)
OutputAudioCleared     drop everything queued
ResponseDone           cancelled: drop its audio; completed: count the turn
PlaybackAcknowledged   a cut-off reply's caption shows what was heard
UnitMetrics            per-unit compute, context used / max, text the camera was read as
ErrorEvent             status line
SessionClosed          drop output, status line
=====================  ==================================================================

The page's state and status line follow these events, together (:meth:`OmniHandler.set_phase`; app/ui/README.md).

"Drop" is :meth:`OmniHandler.flush_output`: the backlog, FastRTC's ``clear_queue()`` (the lead
already handed over), a ``playback.ack`` with ``truncate`` for what was heard and, when audio
was cut, ``{"type": "flush"}`` to the page over the data channel (it confirms the page's own
mute, ``assets/barge_in.js``). "Force listen" (the page's Interrupt) = flush +
``CancelResponse(type="barge_in")``. Model work never runs here: the session and the stage threads do it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any

import numpy as np
from fastrtc import AdditionalOutputs, AsyncAudioVideoStreamHandler, CloseStream
from fastrtc.utils import get_current_context

from app.api.auth import current_principal
from app.backend.duplex.manager import CapacityExhausted
from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ, ms_to_samples
from app.media import resample, shrink_by_whole_factor
from app.ui import trace as page_trace
from app.ui.frames import UnitFrames
from app.ui.mic_intake import MicIntake
from app.ui.playback import Playback
from app.ui.registry import HandlerRegistry, retry_after_s
from app.ui.settings import UISettings, parse_args
from app.ui.view import THINKING_GIVE_UP_S, ConversationView

log = logging.getLogger(__name__)

MIC_RATE_HZ = 48_000
"""Rate FastRTC delivers mic audio at (Opus native rate); resampled here to 16 kHz."""

VIDEO_FPS = 10
"""Rate of the echoed video track, frames/s, for a peer that takes video back (a headless
``/webrtc/offer`` client; the page offers its camera send-only and gets none: ``video_intake.py``)."""

ECHO_MAX_SIDE = 320
"""Longest side of the echoed video frame, pixels (shrunk by a whole factor: 640 -> 320, 800 -> 267)."""

UI_PUSH_S = 0.25
"""Shortest interval between two page updates (captions/metrics), seconds."""

INPUT_STALL_S = 15.0
"""A session whose peer sent no audio for this long is closed (its slot is freed)."""

PRE_SESSION_KEEP_S = 3.0
"""Mic audio kept while the session is being opened, seconds."""

REFUSE_CLOSE_S = 1.5
"""After refusing (server full), the stream is closed this long after the message went out."""

_QUIET_ERRORS = frozenset({"playback_item_not_found", "playback_ack_too_late", "missing_item_id"})


class OmniHandler(AsyncAudioVideoStreamHandler):
    """One conversation over WebRTC (audio-video or audio-only; the same class serves both).

    Args:
        engine: the app's :class:`~app.backend.engine.Engine`.
        registry: where live handlers are registered by ``webrtc_id``.
        defaults: settings used until (or unless) the page sends its inputs.
        page_outputs: send captions/metrics to the Gradio page as ``AdditionalOutputs``
            (False for the headless ``/webrtc/offer`` route, whose clients poll the state route).
        args_timeout_s: how long ``start_up`` waits for the page's inputs.
    """

    def __init__(self, engine: Any, registry: HandlerRegistry, *, defaults: UISettings,
                 page_outputs: bool = True, args_timeout_s: float = 3.0) -> None:
        super().__init__(expected_layout="mono", output_sample_rate=OUTPUT_SAMPLE_RATE_HZ,
                         input_sample_rate=MIC_RATE_HZ, fps=VIDEO_FPS)
        self.engine = engine
        self.registry = registry
        self.defaults = defaults
        self.page_outputs = page_outputs
        self.args_timeout_s = args_timeout_s
        unit_ms = int(engine.config.duplex_session.chunk_period_ms)
        self.unit_ms = unit_ms
        self.webrtc_id: str | None = None
        self.session: Any = None
        self.settings = defaults
        self.view = ConversationView(listener=self._queue_page_state if page_outputs else None)
        self.playback = Playback(OUTPUT_SAMPLE_RATE_HZ)
        self.frames = UnitFrames(unit_ms)
        self.frames.set_stack(defaults.stack_frames)
        self._args_seen: Any = None
        self.mic = MicIntake(unit_ms)
        self._last_audio_at = time.monotonic()
        self._wake = asyncio.Event()
        self._ui_version_sent = -1
        self._ui_sent_at = 0.0
        self._pump_task: asyncio.Task[None] | None = None
        self._refused: str | None = None
        self._refused_at = 0.0
        self._closed = False
        self._echo_src: np.ndarray | None = None
        self._echo: np.ndarray | None = None
        self._echo_key: Any = None
        self._camera_frames = 0
        self._camera_first_at: float | None = None
        self._camera_last_at = 0.0
        self._done_ok: set[str] = set()
        self._speech_stop_at: float | None = None
        self._thinking_since: float | None = None  # speech_stopped with no response.created since
        self._speech_end_at: float | None = None
        self._first_audio_pending = False
        self._user_speaking_since: float | None = None
        self._barge_in_s = float(engine.config.turn_policy.barge_in_ms) / 1000.0
        self._bg_rgb = np.zeros((240, 320, 3), np.uint8)
        self._faults = 0
        self._configured = False  # the session got its session.update (mic audio waits until then)
        self._phases: deque[dict[str, Any]] = deque()  # page states (phase + status) not sent yet, in order
        self.trace: page_trace.PageTrace | None = page_trace.PageTrace() if page_trace.enabled() else None
        """Timing marks for the benchmark (``OMNI_PAGE_TRACE=1`` only; see :mod:`app.ui.trace`)."""

    def copy(self) -> OmniHandler:
        """A fresh handler for a new peer (FastRTC calls this per connection)."""
        return OmniHandler(self.engine, self.registry, defaults=self.defaults, page_outputs=self.page_outputs,
                           args_timeout_s=self.args_timeout_s)

    # ------------------------------------------------------------------ lifecycle
    async def start_up(self) -> None:
        """Read the page settings, open a duplex session (or refuse: server full), configure it."""
        try:
            self.webrtc_id = get_current_context().webrtc_id
        except RuntimeError:
            self.webrtc_id = None
        if self.webrtc_id:
            self.registry.add(self.webrtc_id, self)
        if self.page_outputs and self.args_timeout_s > 0:
            try:
                await asyncio.wait_for(self.wait_for_args(), self.args_timeout_s)
            except TimeoutError:
                log.info("webrtc %s: page inputs did not arrive; using defaults", self.webrtc_id)
        if self._closed:  # the peer left while we waited
            return
        self.settings = parse_args(self.latest_args, self.defaults)
        self._args_seen = self.latest_args
        self.frames.set_stack(self.settings.stack_frames)
        sessions = getattr(self.engine, "sessions", None)
        if sessions is None:
            await self._refuse("The model is still loading. Try again in a moment.")
            return
        try:
            self.session = sessions.open(owner=current_principal.get(), route="page")
        except CapacityExhausted as exc:
            if exc.scope == "client":  # (this key's or address's share: max_sessions_per_client)
                return await self._refuse(f"You already have {exc.limit} conversation(s) open here; stop one (or "
                                          "close its tab) and press Start again.", code="client_limit")
            retry_s = retry_after_s(exc)
            await self._refuse(f"Server is full: all {exc.limit} conversation slot(s) are in use. Please try again in "
                               f"{retry_s} s.", code="server_full", retry_after_s=retry_s, slots=exc.limit)
            return
        caps = self.engine.capabilities()
        # (reads and re-encodes an uploaded reference voice, if any: off the event loop)
        update = await asyncio.to_thread(self.settings.session_update,
                                         voice_cloning=bool(caps.get("supports_voice_cloning")), first=True)
        if self._closed:
            self._close_session()
            return
        self.session.submit(C.SessionUpdate(type="session.update", session=update))
        self._configured = True
        if self.trace is not None:
            page_trace.register(self.session.id, self.trace)
            page_trace.probe_pipeline(getattr(self.engine, "pipeline", None))
        self.set_phase("listening", "Connected. Listening…")
        self._last_audio_at = time.monotonic()
        self._pump_task = asyncio.get_running_loop().create_task(self._pump_events(), name=f"ui-pump-{self.webrtc_id}")
        log.info("webrtc %s: session %s opened", self.webrtc_id, self.session.id)

    async def _refuse(self, message: str, *, code: str = "unavailable", **extra: Any) -> None:
        self._refused = message
        self._refused_at = time.monotonic()
        self.set_phase("error", message)
        log.info("webrtc %s: refused: %s", self.webrtc_id, message)
        try:
            await self.send_message(json.dumps({"type": "error", "message": message, "data": message, "code": code,
                                                **extra}))
        except Exception:  # the data channel may already be gone
            log.debug("could not send refusal", exc_info=True)
        self._wake.set()

    async def shutdown(self) -> None:
        """Peer gone (stop, page closed, ICE failure): drop output, close the session, free the slot."""
        if self._closed:
            return
        self._closed = True
        self.playback.clear()
        if self.webrtc_id:
            self.registry.remove(self.webrtc_id, self)
        self._close_session()
        if self._pump_task is not None:
            self._pump_task.cancel()
        self._wake.set()

    def _close_session(self) -> None:
        s = self.session
        if s is not None and self.trace is not None:
            page_trace.unregister(s.id)
        if s is not None and not s.closed:
            s.submit(C.CloseSession(type="session.close"))
            log.info("webrtc %s: session %s closed", self.webrtc_id, s.id)

    # ------------------------------------------------------------------ settings
    def _maybe_update_settings(self) -> None:
        args = self.latest_args
        if args is self._args_seen or self.session is None:
            return
        self._args_seen = args
        new = parse_args(args, self.settings)
        if new == self.settings:
            return
        old, self.settings = self.settings, new
        self.frames.set_stack(new.stack_frames)
        if new.instructions != old.instructions or new.voice_ref != old.voice_ref:
            self.view.set_status("Instructions and voice apply to the next conversation (press Stop, then Start).")
        self.session.submit(C.SessionUpdate(type="session.update",
                                            session=new.session_update(voice_cloning=False, first=False)))

    # ------------------------------------------------------------------ input
    async def receive(self, frame: tuple[int, np.ndarray]) -> None:
        """One mic frame: resample to 16 kHz float32, append every ~:data:`~app.ui.mic_intake.APPEND_MS`.

        Never raises: an exception here would end FastRTC's input loop for this peer.
        """
        try:
            self._receive(frame)
        except Exception:  # noqa: BLE001 - any bug here must not end the peer's input loop
            self._fault("mic input")

    def _fault(self, where: str) -> None:
        self._faults += 1
        if self._faults <= 3:
            log.exception("webrtc %s: %s failed", self.webrtc_id, where)

    def _receive(self, frame: tuple[int, np.ndarray]) -> None:
        rate, arr = frame
        now = time.monotonic()
        self._last_audio_at = now
        x = np.asarray(arr).reshape(-1)
        x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32)
        if self.trace is not None:
            self.trace.mic_frame(x, int(rate), now)
        self.mic.push(x, int(rate))
        if self.session is None or not self._configured:  # (appends before session.update are refused)
            self.mic.keep_last(PRE_SESSION_KEEP_S)
            return
        self._maybe_update_settings()
        if self.mic.ready:
            self._flush_input(now)

    def _flush_input(self, now: float) -> None:
        if self.session is None or self.session.closed:
            return
        taken = self.mic.take(now)
        if taken is not None:
            audio, closes_unit = taken
            self.session.submit(C.AppendArrays(audio=audio, frames=self.frames.take_unit() if closes_unit else ()))

    async def video_receive(self, frame: np.ndarray) -> None:
        """One camera frame (uint8 BGR (h, w, 3)); never raises (it would end the video loop)."""
        try:
            now = time.monotonic()
            self._camera_frames += 1
            if self._camera_first_at is None:
                self._camera_first_at = now
            self._camera_last_at = now
            self._echo_src = frame
            # (a view: a 640x480 copy costs ~3 ms on the event loop, up to 30/s; the buffer copies what it keeps)
            self.frames.add(frame[:, :, ::-1], now)
        except Exception:  # noqa: BLE001 - any bug here must not end the peer's video loop
            self._fault("camera input")

    async def video_emit(self) -> np.ndarray:
        """The video sent back: the camera frame the model sees (downscaled), or a blank frame."""
        src = self._echo_src
        if src is None:
            return self._bg_rgb
        if self._echo is None or self._echo_key is not src:
            self._echo_key = src
            self._echo = shrink_by_whole_factor(src, ECHO_MAX_SIDE)  # (~1 ms; a resampling fit took ~4)
        return self._echo

    # ------------------------------------------------------------------ output
    async def emit(self) -> Any:
        """Next output: a paced slice of speech (+ page update), a page update alone, or None."""
        deadline = time.monotonic() + 0.1
        while True:
            now = time.monotonic()
            if self._refused is not None:
                ui = self._ui_update(now, force=True)
                if ui is not None:
                    return ui
                if now - self._refused_at >= REFUSE_CLOSE_S:
                    return CloseStream(self._refused)
            rel = self.playback.pop_due(now)
            if rel is not None:
                self._on_released(rel, now)
                if self.trace is not None and rel.audio.size:
                    self.trace.on_emit(rel, getattr(self._clear_queue, "__self__", None))  # (FastRTC's track)
            elif self.view.phase == "speaking" and not self.playback.is_playing(now):
                self.set_phase("listening")  # the released speech has played out
            self._send_phases()  # (those that found no data channel yet)
            ui = self._ui_update(now)
            if rel is not None and rel.audio.size:
                out = (OUTPUT_SAMPLE_RATE_HZ, rel.audio)
                return (out, ui) if ui is not None else out
            if ui is not None:
                return ui
            if now >= deadline:
                return None
            wait = min(self.playback.next_due(now), deadline - now, UI_PUSH_S)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), max(wait, 0.005))
            except TimeoutError:
                pass

    def _on_released(self, rel: Any, now: float) -> None:
        for rid, text in rel.captions:
            self.view.caption("assistant", rid, text, append=True)
        if rel.first_of:
            self.set_phase("speaking")

    # ------------------------------------------------------------------ phase (page state)
    def set_phase(self, phase: str, status: str | None = None, level: str | None = None) -> None:
        """Set the phase and its status line (:meth:`~app.ui.view.ConversationView.set_phase`)."""
        self.view.set_phase(phase, status, level)

    def _queue_page_state(self, msg: dict[str, Any]) -> None:
        """The view's phase or status changed: the page is told as soon as the event loop is free
        (not before the audio slice being released goes out: the first slice makes it "speaking")."""
        self._phases.append(msg)
        asyncio.get_running_loop().call_soon(self._send_phases)  # (in order; a no-op once drained)

    def _send_phases(self) -> None:  # (resumed: a reconnect opens a new session; the page says so)
        while self._phases and self._tell_page({**self._phases[0], "resumed": False,
                                                "session_id": getattr(self.session, "id", None)}):
            self._phases.popleft()

    def _ui_update(self, now: float, *, force: bool = False) -> AdditionalOutputs | None:
        if not self.page_outputs or self.view.version == self._ui_version_sent:
            return None
        if not force and now - self._ui_sent_at < UI_PUSH_S:
            return None
        self._ui_version_sent = self.view.version
        self._ui_sent_at = now
        return AdditionalOutputs(self.view.snapshot())

    def flush_output(self, response_id: str | None = None) -> None:
        """Drop queued speech at once (backlog + FastRTC queue); ack what was heard."""
        now = time.monotonic()
        ahead_ms = max(0.0, self.playback.playing_until() - now) * 1000.0
        cut = self.playback.clear(response_id, now)
        log.debug("webrtc %s: flush %s: cut %s (%.0f ms released ahead)", self.webrtc_id, response_id or "all", cut,
                  ahead_ms)
        if self.trace is not None:
            self.trace.mark("flush", t=now, response_id=response_id, cut=cut, ahead_ms=round(ahead_ms, 1))
        if cut:
            self._tell_page({"type": "flush", "response_ids": cut})
            self.set_phase("interrupted")
        if self._clear_queue is not None:
            self.clear_queue()
            if self.trace is not None:
                self.trace.dropped()
        s = self.session
        for rid in cut:
            self.view.mark_interrupted(rid)
            if s is not None and rid in self.playback.started:
                heard = max(0.0, self.playback.played_ms.get(rid, 0.0) - ahead_ms)
                s.submit(C.PlaybackAck(type="playback.ack", response_id=rid, played_ms=heard, truncate=True))
        self._wake.set()

    def _tell_page(self, message: dict[str, Any]) -> bool:
        """Send one JSON message to the page over FastRTC's data channel (best effort).

        ``{"type": "flush", "response_ids": [...]}`` tells the page's local barge-in
        (``assets/barge_in.js``) that the server dropped those replies' queued speech, so a mute
        it made was a real barge-in. FastRTC's page component ignores message types it does not know.
        Returns whether the message was sent.
        """
        channel = getattr(self, "channel", None)
        if channel is None or getattr(channel, "readyState", "open") != "open":
            return False
        try:
            channel.send(json.dumps(message))
        except Exception:  # the peer may be going away; the page then needs no notice
            log.debug("webrtc %s: could not send %s", self.webrtc_id, message.get("type"), exc_info=True)
            return False
        return True

    def force_listen(self) -> bool:
        """The page's "force listen": cancel the response (``barge_in``) and go silent now."""
        s = self.session
        if s is None or s.closed:
            return False
        self.flush_output()
        s.submit(C.CancelResponse(type="barge_in"))
        self.set_phase("interrupted")  # (also when nothing was cut: a reply being thought of is cancelled)
        return True

    def state(self) -> dict[str, Any]:
        """The view snapshot plus connection facts (for ``GET /webrtc/state/{id}``).

        ``camera`` = ``{"frames": decoded camera frames received, "fps": their rate from the
        first to the last, frames/s}`` (the page sends what the units read: ``assets/page.js`` ``camFps``).
        """
        now = time.monotonic()
        snap = self.view.snapshot()
        snap["session_id"] = getattr(self.session, "id", None)
        snap["playing"] = self.playback.is_playing(now)
        snap["refused"] = self._refused
        first, n = self._camera_first_at, self._camera_frames
        span = self._camera_last_at - first if first is not None else 0.0
        snap["camera"] = {"frames": n, "fps": round((n - 1) / span, 2) if n > 1 and span > 0 else None}
        return snap

    # ------------------------------------------------------------------ session events
    async def _pump_events(self) -> None:
        s = self.session
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(s.next_event(), 1.0)
                except TimeoutError:
                    if time.monotonic() - self._last_audio_at > INPUT_STALL_S:
                        log.info("webrtc %s: no audio for %.0f s; closing", self.webrtc_id, INPUT_STALL_S)
                        self._close_session()
                    continue
                self.on_event(ev)
                if isinstance(ev, E.SessionClosed):
                    return
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug here must not kill the media loop silently
            log.exception("webrtc %s: event pump failed", self.webrtc_id)
            self.view.set_status("Internal error in the page handler; press Stop and Start again.", "error")

    def on_event(self, ev: E.ServerEvent) -> None:
        """Map one session event to playback, captions, metrics and status."""
        now = time.monotonic()
        v = self.view
        if self.trace is not None:
            self.trace.on_event(ev, now, self.mic.time_of_sample)
        if isinstance(ev, E.AudioDelta):
            if self._first_audio_pending:
                self._first_audio_pending = False
                ms = [None if t is None else (now - t) * 1000.0 for t in (self._speech_stop_at, self._speech_end_at)]
                v.note_first_audio(ev.response_id, *ms)  # (after the turn decision, after the speech end)
            audio = ev.audio if ev.sample_rate_hz == OUTPUT_SAMPLE_RATE_HZ else \
                resample(np.asarray(ev.audio, np.float32), ev.sample_rate_hz, OUTPUT_SAMPLE_RATE_HZ)
            self.playback.push(ev.response_id, audio)
            self._wake.set()
        elif isinstance(ev, E.TranscriptDelta):
            shown = self.playback.attach_text(ev.response_id, ev.delta)
            if shown:
                v.caption("assistant", ev.response_id, shown, append=True)
        elif isinstance(ev, E.TextDelta):
            v.caption("assistant", ev.response_id, ev.delta, append=True)
            if not self.settings.speech:
                self.set_phase("speaking")  # a text-only reply: its words are its speech
        elif isinstance(ev, E.InputTranscription):
            v.caption("user", ev.item_id, ev.transcript, append=False)
        elif isinstance(ev, E.SpeechStarted):
            self._user_speaking_since = now
            onset_at = self.mic.time_of_sample(ms_to_samples(ev.audio_start_ms, INPUT_SAMPLE_RATE_HZ))
            log.debug("webrtc %s: speech started %.0f ms after its onset reached the server (playing=%s)",
                      self.webrtc_id, (now - onset_at) * 1000 if onset_at else -1, self.playback.is_playing(now))
            if self.settings.overlap_policy == "barge_in_on_speech" and self.playback.is_playing(now):
                # The session cancels a reply it is still producing (OutputAudioCleared follows), but a
                # reply it already finished is only playing here: stop it here too.
                self.flush_output(None)
            v.hearing()
        elif isinstance(ev, E.SpeechStopped):
            self._user_speaking_since = None
            self._speech_stop_at = now
            self._speech_end_at = self.mic.time_of_sample(ms_to_samples(ev.audio_end_ms, INPUT_SAMPLE_RATE_HZ))
            self._first_audio_pending, self._thinking_since = True, now
            self.set_phase("thinking")
        elif isinstance(ev, E.ResponseCreated):
            self._thinking_since = None
        elif isinstance(ev, E.ResponseDone):
            if ev.status == "cancelled":
                self.flush_output(ev.response_id)
            elif ev.status == "completed" and ev.reason in (None, "max_output_tokens"):
                self._done_ok.add(ev.response_id)
                v.turns += 1
                v.touch()
                if not self.playback.is_playing(now) and v.phase == "speaking":
                    self.set_phase("listening")  # (a text-only reply)
            elif ev.status == "failed":
                v.set_status("The reply failed; please ask again.", "warn")
        elif isinstance(ev, E.ResponseListen):
            if ev.response_id is not None:
                self.flush_output(ev.response_id)
            else:  # queued audio of a response that did not complete normally is stale now
                for rid in self.playback.queued_responses() - self._done_ok:
                    self.flush_output(rid)
            if not self.playback.is_playing(now) and v.phase in ("speaking", "interrupted"):
                self.set_phase("listening")  # (not from thinking: the model listens each unit until it answers)
            elif v.phase == "thinking" and self._user_speaking_since is None and self._thinking_since is not None \
                    and now - self._thinking_since > THINKING_GIVE_UP_S:  # a turn the server let go
                self.set_phase("listening")
        elif isinstance(ev, E.OutputAudioCleared):
            self.flush_output(None)
        elif isinstance(ev, E.PlaybackAcknowledged):
            heard = ev.history_committed.strip()
            if ev.truncate and heard:  # show what the user actually heard of a cut-off reply
                for line in v.lines:
                    if line.key == ev.response_id and line.role == "assistant" and len(heard) < len(line.text):
                        line.text = heard + "…"
                        v.touch()
        elif isinstance(ev, E.UnitMetrics):
            since, rid = self._user_speaking_since, self.playback.playing_response(now)
            if since is not None and self.settings.overlap_policy == "listen_only" and rid in self._done_ok \
                    and now - since >= self._barge_in_s:  # (the session decides for the reply it still has open)
                self.flush_output(rid)  # soft interrupt at the unit boundary of a reply only playing here
            v.unit_compute_ms = float(ev.compute_ms)
            v.context_tokens = int(ev.context_tokens)
            v.max_context_tokens = int(ev.max_context_tokens)
            if ev.seen_text:
                v.seen_text = ev.seen_text
            v.touch()
        elif isinstance(ev, E.ErrorEvent):
            if ev.code not in _QUIET_ERRORS:
                log.warning("webrtc %s: session error %s: %s", self.webrtc_id, ev.code, ev.message)
                v.set_status(f"Server: {ev.message} ({ev.code})", "warn")
        elif isinstance(ev, E.SessionClosed):
            self.flush_output(None)
            self.set_phase("ended", f"Conversation ended ({ev.reason}). Press Start to talk again.")
            self.session = None
        self._wake.set()

