"""DuplexSession: one full-duplex conversation, owned by one task.

Everything that changes a session's state runs in :meth:`DuplexSession._run`, which reads
one bounded inbox holding client commands (from the transport) and results posted by the
session's own background work (ASR, Thinker, Talker, Code2Wav). Events go out through one
bounded outbox, stamped with an increasing ``server_event_seq``.

The unit clock: unit 0 closes once ``FIRST_UNIT_EXTRA_MS + unit_ms`` of input audio has
arrived (1030 ms for 1 s units), unit k at that plus ``k * unit_ms``. At every unit boundary
the session decides: listen (``response.listen``), speak (open a response for a finished
user turn), continue the open response (release its next audio), or end it because the
user has been talking over it (soft interrupt). Hard interrupts (``response.cancel``,
``barge_in``, ``output_audio_buffer.clear``) advance the epoch; results of an older epoch
are dropped where they arrive.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backend import commands as C
from app.backend import events as E
from app.backend.context import ContextWindow
from app.backend.pipeline import Pipeline, RequestCancelled, RequestContext, StageError
from app.backend.reply import FinishedResponse, Reply, heard_text
from app.backend.session_replies import Posted, ReplyFlow
from app.backend.session_settings import SessionSettings, apply_update
from app.backend.stages import Turn, TurnPolicy
from app.constants import FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ, ms_to_samples
from app.media import (
    MediaError,
    PcmStreamResampler,
    decode_audio,
    decode_base64,
    decode_image,
)

log = logging.getLogger(__name__)

OCR_REFRESH_S = 5.0
"""Re-read the camera at most this often while the user is silent, seconds."""


@dataclass
class SessionDeps:
    """What a session needs from the engine.

    Attributes:
        pipeline: the shared three-stage pipeline.
        config: the deploy config (``duplex_session``, ``turn_policy``, ``limits``, stage 0 sampling).
        turn_policy_factory: builds the family's per-session :class:`TurnPolicy`.
        capabilities: the wire ``capabilities`` object.
        max_context_tokens: Thinker context budget, tokens.
        vision: the family reads frames.
    """

    pipeline: Pipeline
    config: Any
    turn_policy_factory: Any
    capabilities: dict[str, Any]
    max_context_tokens: int
    vision: bool


@dataclass
class _Seen:
    text: str


@dataclass
class _Expire:
    reason: str


class DuplexSession(ReplyFlow):
    """One duplex session.

    Args:
        session_id: server-allocated id (``duplex-<uuid>``).
        deps: engine parts.
        on_closed: called once with the session when it has closed (releases its slot).
    """

    def __init__(self, session_id: str, deps: SessionDeps, on_closed: Any = None) -> None:
        cfg = deps.config
        self.id = session_id
        self.deps = deps
        self._dcfg = cfg.duplex_session
        self._tcfg = cfg.turn_policy
        self.unit_ms = int(self._dcfg.chunk_period_ms)
        self._on_closed = on_closed
        self._inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=self._dcfg.inbox_size)
        self._outbox: asyncio.Queue[E.ServerEvent] = asyncio.Queue(maxsize=self._dcfg.output_buffer_events)
        self.settings = SessionSettings(max_tokens=cfg.stage(0).default_sampling_params.max_tokens)
        self.configured = False
        self.closed = False
        self.close_reason: str | None = None
        self.epoch = 0
        self.turn_id = 0
        self._seq = 0
        self._samples = 0  # 16 kHz samples received
        self._unit_index = 0
        self._unit_frames: list[np.ndarray] = []
        self._uncommitted = 0
        self._policy: TurnPolicy = deps.turn_policy_factory(self._tcfg)
        self._resampler: PcmStreamResampler | None = None
        self._reply: Reply | None = None
        self._finished: dict[str, FinishedResponse] = {}
        self._history: list[Turn] = []
        self._history_ids: list[str] = []
        self._committed_utterance: tuple[str, np.ndarray] | None = None
        self._deferred: tuple[str, np.ndarray] | None = None  # an utterance said over a reply, answered after it
        self._user_item: str | None = None
        self._seen_text = ""
        self._last_frame: np.ndarray | None = None
        self._ocr_busy = False
        self._ocr_at = 0.0
        self._ctx = ContextWindow(deps.max_context_tokens, self._dcfg.context_watermark_ratio)
        self._unit_text_tokens = 0
        self._unit_busy_s = 0.0  # time this unit's audio spent in the turn policy (VAD + state machine)
        self.last_activity = time.monotonic()
        self.detached_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._work: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ transport API
    def start(self) -> None:
        """Start the owner task."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"session-{self.id}")

    def submit(self, cmd: Any) -> None:
        """Hand a decoded client command to the session (never blocks).

        A full inbox answers ``input_backpressure`` and drops the command.
        """
        self.last_activity = time.monotonic()
        if self.closed:
            return
        try:
            self._inbox.put_nowait(cmd)
        except asyncio.QueueFull:
            self._error("input_backpressure", "session inbox is full; slow down", event_id=cmd.event_id)

    def reject(self, err: C.ProtocolError) -> None:
        """Report a frame the transport could not decode (the session keeps going)."""
        self._error(err.code, err.message, event_id=err.event_id, param=err.param, error_type=err.error_type)

    def expire(self, reason: str) -> None:
        """Ask the session to end with ``session.expired`` (idle TTL, disconnect grace)."""
        if not self.closed:
            try:
                self._inbox.put_nowait(_Expire(reason))
            except asyncio.QueueFull:
                self._close_now(reason, expired=True)

    async def wait_closed(self) -> None:
        """Wait until the owner task has ended."""
        if self._task is not None:
            await asyncio.wait([self._task])

    async def next_event(self) -> E.ServerEvent:
        """The next outgoing event (``SessionClosed``/``SessionExpired`` is the last)."""
        return await self._outbox.get()

    def describe(self) -> dict[str, Any]:
        """The wire session object (``session.created.session``)."""
        return {
            "id": self.id,
            "object": "realtime.session",
            "state": "closed" if self.closed else "active",
            "epoch": self.epoch,
            "turn_id": self.turn_id,
            "active_response_id": self._reply.response_id if self._reply and self._reply.created else None,
            **self.settings.describe(),
            "capabilities": self.deps.capabilities,
            "context": {"tokens": self._ctx.total, "max_tokens": self._ctx.max_tokens},
        }

    # ------------------------------------------------------------------ emission
    def _emit(self, ev: E.ServerEvent) -> None:
        if self.closed and not isinstance(ev, E.SessionClosed):
            return
        self._seq += 1
        ev.server_event_seq = self._seq
        try:
            self._outbox.put_nowait(ev)
        except asyncio.QueueFull:
            log.warning("session %s: output buffer overflow, closing", self.id)
            self._close_now("output_overflow", expired=True, force=True)

    def _error(self, code: str, message: str, *, event_id: str | None = None, param: str | None = None,
               error_type: str = "invalid_request_error") -> None:
        self._emit(E.ErrorEvent(epoch=self.epoch, code=code, message=message, event_id=event_id, param=param,
                                error_type=error_type))

    def _close_now(self, reason: str, *, expired: bool = False, force: bool = False) -> None:
        if self.closed:
            return
        self._cancel_reply("session_closed")  # an open response still gets its response.done
        for t in self._work:
            t.cancel()
        cls = E.SessionExpired if expired else E.SessionClosed
        ev = cls(epoch=self.epoch, session_id=self.id, reason=reason)
        self._seq += 1
        ev.server_event_seq = self._seq
        if force:  # make room for the error and the terminal event: nothing ends silently
            while not self._outbox.empty():
                self._outbox.get_nowait()
            self._seq += 1
            err = E.ErrorEvent(epoch=self.epoch, code=reason, error_type="server_error", server_event_seq=self._seq,
                               message="the client did not read events fast enough; older events were dropped")
            self._outbox.put_nowait(err)
            self._seq += 1
            ev.server_event_seq = self._seq
        self._outbox.put_nowait(ev) if not self._outbox.full() else None
        self.closed = True
        self.close_reason = reason
        if self._on_closed is not None:
            self._on_closed(self)

    # ------------------------------------------------------------------ owner task
    async def _run(self) -> None:
        try:
            while not self.closed:
                msg = await self._inbox.get()
                try:
                    self._handle(msg)
                except C.ProtocolError as err:
                    self.reject(err)
                except MediaError as err:
                    self._error(err.code if err.code.startswith(("bad_", "invalid")) else "bad_audio", str(err),
                                event_id=getattr(msg, "event_id", None))
                except Exception as exc:  # a bug must not take other sessions down
                    log.exception("session %s: internal error", self.id)
                    self._error("internal_error", f"{type(exc).__name__}: {exc}", error_type="server_error")
        finally:
            if not self.closed:
                self._close_now("shutdown")

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, Posted):
            self._on_posted(msg)
        elif isinstance(msg, _Seen):
            self._ocr_busy = False
            self._seen_text = msg.text
        elif isinstance(msg, _Expire):
            self._close_now(msg.reason, expired=True)
        elif isinstance(msg, C.SessionUpdate):
            self._on_update(msg)
        elif isinstance(msg, C.CloseSession):
            self._close_now("client_close")
        elif isinstance(msg, (C.Heartbeat, C.EventAck)):
            pass
        elif not self.configured:
            raise C.ProtocolError("session_not_configured", "send session.update before other events",
                                  event_id=msg.event_id)
        elif isinstance(msg, C.AudioAppend):
            self._on_append(msg)
        elif isinstance(msg, C.AppendArrays):
            self._add_frames(list(msg.frames))
            self._feed_audio(np.asarray(msg.audio, np.float32).reshape(-1), None)
        elif isinstance(msg, C.Commit):
            self._on_commit(msg)
        elif isinstance(msg, C.ClearInput):
            self._policy.reset()
            self._uncommitted = 0
            self._emit(E.InputCleared(epoch=self.epoch))
        elif isinstance(msg, C.CancelResponse):
            self._on_cancel(msg)
        elif isinstance(msg, C.TurnSignal):
            if msg.event == "barge_in":
                self._on_cancel(C.CancelResponse(type="barge_in", event_id=msg.event_id))
        elif isinstance(msg, C.ResponseCreate):
            self._on_response_create(msg)
        elif isinstance(msg, C.PlaybackAck):
            self._on_ack(msg)
        elif isinstance(msg, C.TextAppend):
            raise C.ProtocolError("native_text_append_unsupported", "text input is not supported in duplex sessions",
                                  event_id=msg.event_id)
        elif isinstance(msg, C.SessionResume):
            raise C.ProtocolError("unsupported_session_resume", "session resume is not supported", event_id=msg.event_id)

    # ------------------------------------------------------------------ commands
    def _on_update(self, msg: C.SessionUpdate) -> None:
        self.settings = apply_update(self.settings, msg.session, audio_started=self._samples > 0)
        if self.settings.input_rate_hz != INPUT_SAMPLE_RATE_HZ:
            if self._resampler is None or self._resampler.from_rate != self.settings.input_rate_hz:
                self._resampler = PcmStreamResampler(self.settings.input_rate_hz, INPUT_SAMPLE_RATE_HZ)
        else:
            self._resampler = None
        if not self.configured:
            self.configured = True
            ref_samples = self._ref_samples()
            self._ctx.set_prefix(ref_samples)
            self._emit(E.SessionCreated(epoch=self.epoch, session=self.describe()))
        self._emit(E.SessionUpdated(epoch=self.epoch, session=self.describe()))

    def _ref_samples(self) -> int:
        ref = self.settings.ref_audio
        if not ref or not ref.startswith("data:"):
            return 0
        try:
            return int(decode_audio(decode_base64(ref), target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=30).size)
        except MediaError as err:
            raise C.ProtocolError("bad_audio", f"ref_audio: {err}", param="session.ref_audio") from None

    def _on_append(self, msg: C.AudioAppend) -> None:
        fmt = msg.format or msg.input_audio_format
        if fmt is not None and fmt.lower() not in ("pcm16", "pcm_s16le", "s16le", "pcm_f32le", "f32le", "g711_ulaw",
                                                   "g711_alaw", "audio/pcm"):
            raise C.ProtocolError("unsupported_audio_format", f"unsupported append format '{fmt}'",
                                  event_id=msg.event_id, param="format")
        raw = decode_base64(msg.audio)
        canon = self.settings.input_format if fmt is None else fmt.lower()
        rate = msg.sample_rate_hz or self.settings.input_rate_hz
        try:
            audio = decode_audio(raw, target_rate=rate, fmt=canon if canon != "audio/pcm" else "pcm16", input_rate=rate,
                                 max_seconds=self.deps.config.limits.max_audio_seconds)
        except MediaError as err:
            raise C.ProtocolError("bad_audio", str(err), event_id=msg.event_id, param="audio") from None
        if rate != INPUT_SAMPLE_RATE_HZ:
            if self._resampler is None or self._resampler.from_rate != rate:
                self._resampler = PcmStreamResampler(rate, INPUT_SAMPLE_RATE_HZ)
            audio = self._resampler.process(audio)
        if msg.video_frames:
            self._take_frames(msg)
        self._feed_audio(audio, msg.is_speech)

    def _take_frames(self, msg: C.AudioAppend) -> None:
        lim = self.deps.config.limits
        room = self._dcfg.max_frames_per_unit - len(self._unit_frames)
        frames = msg.video_frames or []
        if len(frames) > room:
            self._error("invalid_video_frames", f"at most {self._dcfg.max_frames_per_unit} frames per unit "
                        f"(base + composite); {len(frames) - max(room, 0)} dropped", event_id=msg.event_id)
            frames = frames[: max(room, 0)]
        images = []
        for i, f in enumerate(frames):
            try:
                images.append(decode_image(decode_base64(f), max_bytes=lim.max_image_bytes,
                                           max_pixels=lim.max_image_pixels))
            except MediaError as err:
                self._error("invalid_video_frames", f"video_frames[{i}]: {err}", event_id=msg.event_id,
                            param=f"video_frames[{i}]")
        self._add_frames(images)

    def _add_frames(self, images: list[np.ndarray]) -> None:
        """Attach decoded frames (base first) to the unit in progress."""
        images = images[: max(self._dcfg.max_frames_per_unit - len(self._unit_frames), 0)]
        if not images:
            return
        if not self._unit_frames:
            self._last_frame = images[0]
        self._unit_frames.extend(images)
        self._maybe_read_frame(force=False)

    def _feed_audio(self, audio: np.ndarray, is_speech: bool | None) -> None:
        unit = ms_to_samples(self.unit_ms, INPUT_SAMPLE_RATE_HZ)
        first = ms_to_samples(FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ) + unit
        self._uncommitted += audio.size
        # Feed the policy and the clock in pieces that never straddle a unit boundary, so
        # the unit decision sees exactly the audio up to its boundary.
        pos = 0
        while pos < audio.size:
            boundary = first + self._unit_index * unit
            take = min(audio.size - pos, max(boundary - self._samples, 0) or audio.size - pos)
            piece = audio[pos : pos + take]
            pos += take
            self._samples += piece.size
            t0 = time.perf_counter()
            signals = self._policy.feed(piece)
            self._unit_busy_s += time.perf_counter() - t0
            for sig in signals:
                self._on_signal(sig)
            if self._samples >= boundary:
                self._close_unit()

    def _on_commit(self, msg: C.Commit) -> None:
        if self._uncommitted == 0:
            raise C.ProtocolError("input_audio_buffer_empty", "nothing appended since the last commit",
                                  event_id=msg.event_id)
        self._uncommitted = 0
        self.turn_id += 1
        item_id = self._user_item or f"item_{uuid.uuid4().hex[:16]}"
        self._user_item = None
        self._emit(E.InputCommitted(epoch=self.epoch, item_id=item_id, turn_id=self.turn_id,
                                    history_len=len(self._history)))
        sig = None if msg.is_speech is False else self._policy.flush()
        if msg.is_speech is False:
            self._policy.reset()
        if sig is not None:
            self._on_signal(sig, commit=True)
        if self._reply is not None:
            self._reply.drain = True
            self._reply.boundary_passed = True
            self._advance_reply()
        else:
            self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=self._unit_index,
                                        reason="commit_no_speech"))

    def _on_cancel(self, msg: C.CancelResponse) -> None:
        r = self._reply
        if msg.type == "response.cancel" and (r is None or not r.created or
                                              (msg.response_id and msg.response_id != r.response_id)):
            raise C.ProtocolError("response_not_active", "no active response to cancel", event_id=msg.event_id,
                                  param="response_id" if msg.response_id else None)
        reason = "client_cancelled" if msg.type == "response.cancel" else "barge_in"
        rid = r.response_id if r is not None and r.created else None
        self._cancel_reply(reason)
        if msg.type in ("output_audio_buffer.clear", "barge_in") or rid:
            self._emit(E.OutputAudioCleared(epoch=self.epoch, response_id=rid))

    def _on_response_create(self, msg: C.ResponseCreate) -> None:
        if self._reply is not None:
            raise C.ProtocolError("response_already_active", "a response is already in progress", event_id=msg.event_id)
        if self._committed_utterance is None:
            raise C.ProtocolError("response_create_without_input", "no committed user audio to answer",
                                  event_id=msg.event_id)
        item_id, utt = self._committed_utterance
        self._committed_utterance = None
        self._start_reply(utt, item_id, drain=True, boundary_passed=True)

    def _on_ack(self, msg: C.PlaybackAck) -> None:
        rid = msg.response_id or (msg.item_id[5:] if msg.item_id and msg.item_id.startswith("item_") else None)
        if rid is None:
            raise C.ProtocolError("missing_item_id", "playback.ack needs response_id or item_id", event_id=msg.event_id)
        fin = self._finished.get(rid)
        if fin is None:
            raise C.ProtocolError("playback_item_not_found", f"no finished response '{rid}'", event_id=msg.event_id)
        if fin.turn_id < self.turn_id:
            raise C.ProtocolError("playback_ack_too_late", "a later user turn was already committed",
                                  event_id=msg.event_id)
        heard = heard_text(fin.text, fin.marks, msg.played_ms)
        ack_only = self.settings.playback_commit_policy == "ack_only"
        if fin.history_index is None and ack_only and heard:
            self._history.append(Turn("assistant", heard))
            self._history_ids.append(f"item_{rid}")
            fin.history_index = len(self._history) - 1
        elif fin.history_index is not None and (ack_only or msg.truncate):
            self._history[fin.history_index] = Turn("assistant", heard)
        committed = fin.marks[-1][1] if fin.marks else 0.0
        self._emit(E.PlaybackAcknowledged(epoch=self.epoch, response_id=rid, played_ms=msg.played_ms,
                                          committed_ms=min(msg.played_ms, committed), truncate=msg.truncate,
                                          history_committed=heard))

    # ------------------------------------------------------------------ unit clock
    def _close_unit(self) -> None:
        k = self._unit_index
        self._unit_index += 1
        compute_ms = self._unit_busy_s * 1000.0
        self._unit_busy_s = 0.0
        frames = self._unit_frames
        self._unit_frames = []
        r = self._reply
        decision = "listen"
        if r is not None and r.created and self._policy.user_speaking and \
                self._policy.current_speech_ms >= self._tcfg.barge_in_ms:
            rid = r.response_id
            r.ctx.cancel()
            if r.task is not None:
                r.task.cancel()
            r.chunks.clear()
            self._finish_reply("completed", "user_overlap")
            self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=k, response_id=rid,
                                        reason="user_overlap"))
            self._promote_deferred()
        elif r is not None:
            if r.confirmed:  # (a speculative reply waits for a boundary after the turn has ended)
                r.boundary_passed = True
            if r.created:
                decision = "speak"
            self._advance_reply()
            if self._reply is not None and self._reply.created:
                decision = "speak"
            elif self._reply is None or not self._reply.confirmed:  # a speculative reply: still listening
                self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=k))
        else:
            self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=k))
        listen = decision == "listen"
        sizes = [(f.shape[1], f.shape[0]) for f in frames]
        evicted, overflow = self._ctx.add_unit(k, self.unit_ms, sizes, self._unit_text_tokens, listen)
        self._unit_text_tokens = 0
        for item_id in evicted:
            if item_id in self._history_ids:
                i = self._history_ids.index(item_id)
                del self._history[i], self._history_ids[i]
                for fin in self._finished.values():
                    if fin.history_index is not None and fin.history_index >= i:
                        fin.history_index = fin.history_index - 1 if fin.history_index > i else None
            self._emit(E.ItemDeleted(epoch=self.epoch, item_id=item_id))
        self._emit(E.UnitMetrics(epoch=self.epoch, unit_index=k, compute_ms=compute_ms, context_tokens=self._ctx.total,
                                 max_context_tokens=self._ctx.max_tokens, decision=decision,
                                 seen_text=self._seen_text))
        if overflow:
            self._error("context_length_exceeded", f"context of {self._ctx.total} tokens exceeds "
                        f"{self._ctx.max_tokens} and nothing more can be dropped", error_type="server_error")
            self._close_now("context_length_exceeded")
        self._maybe_read_frame(force=False)

    # ------------------------------------------------------------------ vision
    def _maybe_read_frame(self, *, force: bool) -> None:
        if not self.deps.vision or self._last_frame is None or self._ocr_busy:
            return
        if not force and time.monotonic() - self._ocr_at < OCR_REFRESH_S:
            return
        self._ocr_busy = True
        self._ocr_at = time.monotonic()
        frame, self._last_frame = self._last_frame, None
        self._spawn(self._read(frame))

    async def _read(self, frame: np.ndarray) -> None:
        try:
            text = await self.deps.pipeline.read_image(RequestContext(f"{self.id}:ocr"), frame)
        except (RequestCancelled, StageError, asyncio.CancelledError):
            text = self._seen_text
        await self._post(_Seen(text))
