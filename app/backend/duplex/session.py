"""DuplexSession: one full-duplex conversation, owned by one task.

Everything that changes a session's state runs in :meth:`DuplexSession._run`, which reads one
bounded inbox holding client commands (from the transport) and results posted by the session's
own background work (ASR, Thinker, Talker, Code2Wav, OCR). Events go out through one bounded
outbox, stamped with an increasing ``server_event_seq``.

The session composes collaborators that each own their state:

* :class:`~app.backend.duplex.clock.UnitClock`: input received and the unit in progress;
* :class:`~app.backend.duplex.turn_tracker.TurnTracker`: the turn detector (``turn_policy.detector``)
  and the user's utterances (item ids, one deferred over a reply, one held for ``response.create``);
* :class:`~app.backend.duplex.replies.ReplyRunner`: the reply in progress, its epoch fence, release
  and end;
* :class:`~app.backend.duplex.playback.PlaybackLedger`: finished responses and their ``playback.ack``;
* :class:`~app.backend.duplex.history.History` and :class:`~app.backend.duplex.context.ContextWindow`;
* :class:`~app.backend.duplex.camera.Camera` and :class:`~app.backend.duplex.inputs.InputDecoder`;
* :class:`~app.backend.duplex.probe.SessionProbe`: latency and context figures for ``/metrics``.

This class is the glue: it routes commands, hands the tracker's signals to its
:class:`~app.backend.duplex.turn_router.TurnRouter` (which decides what the reply does), and closes units. At every unit boundary the session decides: listen (``response.listen``),
speak (open a response for a finished user turn), continue the open response (release its next
audio), or end it because the user has been talking over it (soft interrupt). Hard interrupts
(``response.cancel``, ``barge_in``, ``output_audio_buffer.clear``) advance the epoch; results of an
older epoch are dropped where they arrive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backend.duplex.camera import Camera, Seen
from app.backend.duplex.clock import UnitClock
from app.backend.duplex.context import ContextWindow
from app.backend.duplex.echo import EchoGate
from app.backend.duplex.history import History
from app.backend.duplex.inputs import InputDecoder
from app.backend.duplex.playback import PlaybackLedger, clamp_ack, heard_text
from app.backend.duplex.probe import SessionProbe
from app.backend.duplex.recorder import NO_RECORDER
from app.backend.duplex.replies import Posted, ReplyRunner
from app.backend.duplex.settings import SessionSettings, apply_update
from app.backend.duplex.transcripts import TranscriptCache
from app.backend.duplex.turn_router import TurnRouter
from app.backend.duplex.turn_tracker import OverlapHeard, Scored, TurnTracker
from app.backend.metrics import EngineMetrics
from app.backend.pipeline.stages import Turn
from app.backend.pipeline.workers import Pipeline
from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.backend.turns.detector import TurnDetector
from app.media import MediaError

log = logging.getLogger(__name__)


@dataclass
class SessionDeps:
    """What a session needs from the engine.

    Attributes:
        pipeline: the shared three-stage pipeline.
        config: the deploy config (``duplex_session``, ``turn_policy``, ``limits``, stage 0 sampling).
        new_detector: builds the session's :class:`~app.backend.turns.detector.TurnDetector`
            (``new_detector(wrap_vad=...)``: the session's echo gate wraps its VAD).
        capabilities: the wire ``capabilities`` object.
        max_context_tokens: Thinker context budget, tokens.
        vision: the family reads frames.
        score_turn: the shared end-of-turn scorer (``score(audio) -> Future[float]``) for detectors
            that ask for scores; None otherwise.
        score_text: the shared text end-of-turn scorer (``score(transcript) -> Future[float]``),
            or None.
        metrics: the engine's metrics (turn decisions), or None.
        recorder: ``recorder(session_id)`` -> a :class:`~app.backend.duplex.recorder.SessionRecorder`, or None.
    """

    pipeline: Pipeline
    config: Any
    new_detector: Callable[..., TurnDetector]
    capabilities: dict[str, Any]
    max_context_tokens: int
    vision: bool
    score_turn: Callable[[np.ndarray], Future[float]] | None = None
    score_text: Callable[[str], Future[float]] | None = None
    metrics: EngineMetrics | None = None
    recorder: Callable[[str], Any] | None = None


@dataclass
class _Expire:
    reason: str


class DuplexSession:
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
        self._max_instructions_chars = int(cfg.limits.max_text_chars)
        self.unit_ms = int(self._dcfg.chunk_period_ms)
        self._on_closed = on_closed
        self._inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=self._dcfg.inbox_size)
        self._outbox: asyncio.Queue[E.ServerEvent] = asyncio.Queue(maxsize=self._dcfg.output_buffer_events)
        self.settings = SessionSettings(max_tokens=cfg.stage(0).default_sampling_params.max_tokens)
        self.configured = False
        self.closed = False
        self.close_reason: str | None = None
        self.turn_id = 0
        self._seq = 0
        self._uncommitted = 0
        self.last_activity = time.monotonic()
        self.detached_at: float | None = None
        self.route = "realtime"  # or "page": set by SessionManager.open (metrics label)
        self._task: asyncio.Task[None] | None = None
        self._work: set[asyncio.Task[Any]] = set()
        self._clock = UnitClock(self.unit_ms)
        self._probe = SessionProbe(deps.metrics, self.unit_ms, route=lambda: self.route)
        self._transcripts = TranscriptCache(session_id, deps.pipeline, self._spawn, context=self._last_user_text)
        # echo gate (turn_policy.echo_gate): sees what is released (_emit), zeroes echo-only VAD windows
        self._echo = EchoGate() if getattr(self._tcfg, "echo_gate", False) else None
        self._turns = TurnTracker(deps.new_detector(wrap_vad=self._echo.wrap if self._echo else None),
                                  score=deps.score_turn, spawn=self._spawn, post=self._post,
                                  on_decision=deps.metrics.record_turn_decision if deps.metrics else None,
                                  on_far_speech=deps.metrics.far_speech.inc if deps.metrics else None,
                                  transcribe=self._transcripts.transcribe, score_text=deps.score_text)
        self._held_audio: np.ndarray | None = None  # input not yet fed: the detector waits for a score
        self._gated: deque[Any] = deque()  # client commands that arrived meanwhile, in order
        self._history = History()
        self._rec = deps.recorder(session_id) if deps.recorder else NO_RECORDER  # serve --record-dir
        self._ctx = ContextWindow(deps.max_context_tokens, self._dcfg.context_watermark_ratio)
        self._ledger = PlaybackLedger(self._dcfg.completed_append_cache_size)
        self._input = InputDecoder(cfg.limits)
        self._camera = Camera(session_id, deps.pipeline, vision=deps.vision,
                              max_frames_per_unit=self._dcfg.max_frames_per_unit, spawn=self._spawn, post=self._post)
        self._replies = ReplyRunner(session_id, deps.pipeline, self._tcfg, clock=self._clock, history=self._history,
                                    context=self._ctx, ledger=self._ledger, emit=self._emit, spawn=self._spawn,
                                    post=self._post, settings=lambda: self.settings, turn_id=lambda: self.turn_id,
                                    on_completed=lambda: self._router.promote_deferred(), transcribe=self._transcripts.transcribe)
        self._router = TurnRouter(session_id, self._tcfg, turns=self._turns, replies=self._replies, camera=self._camera,
                                  ledger=self._ledger, history=self._history, emit=self._emit,
                                  epoch=lambda: self.epoch, settings=lambda: self.settings,
                                  unit=lambda: self._clock.unit_index)

    def _last_user_text(self) -> str:
        """The conversation's previous user turn (the ASR's context for a short follow-up); ``""`` for
        words that began over a reply (a reaction to it, "yeah" or "wait", not a follow-up)."""
        if self._turns.began_over_reply:
            return ""
        return next((t.text for t in reversed(self._history.turns()) if t.role == "user"), "")

    @property
    def epoch(self) -> int:
        """The session epoch (advanced by every hard interrupt)."""
        return self._replies.epoch

    # ------------------------------------------------------------------ transport API
    def start(self) -> None:
        """Start the owner task."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"session-{self.id}")

    def submit(self, cmd: Any) -> None:
        """Hand a decoded client command to the session (never blocks).

        A full inbox answers ``input_backpressure`` and drops the command.
        """
        self.last_activity = time.monotonic()
        self._probe.on_command(cmd)  # arrival time of client interrupts (barge-in stop latency)
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

    def settled(self) -> bool:
        """True when the inbox is empty and no background work (ASR, Thinker, Talker, Code2Wav, OCR) runs.

        Lets a driver step a session deterministically (feed, wait until settled, feed again).
        """
        return self._inbox.empty() and all(t.done() for t in self._work)

    def describe(self) -> dict[str, Any]:
        """The wire session object (``session.created.session``)."""
        return {
            "id": self.id, "object": "realtime.session",
            "state": "closed" if self.closed else "active",
            "epoch": self.epoch,
            "turn_id": self.turn_id,
            "active_response_id": self._replies.active_response_id,
            **self.settings.describe(),
            "capabilities": self.deps.capabilities,
            "context": {"tokens": self._ctx.total, "max_tokens": self._ctx.max_tokens},
        }

    # ------------------------------------------------------------------ emission and background work
    def _emit(self, ev: E.ServerEvent) -> None:
        if self.closed and not isinstance(ev, E.SessionClosed):
            return
        self._seq += 1
        ev.server_event_seq = self._seq
        self._rec.event(ev)
        self._probe.on_event(ev)
        if self._echo is not None:
            self._echo.on_event(ev, self._clock.samples)  # released audio and dropped playback -> the echo gate
        try:
            self._outbox.put_nowait(ev)
        except asyncio.QueueFull:
            log.warning("session %s: output buffer overflow, closing", self.id)
            self._close_now("output_overflow", expired=True, force=True)

    def _error(self, code: str, message: str, *, event_id: str | None = None, param: str | None = None,
               error_type: str = "invalid_request_error") -> None:
        self._emit(E.ErrorEvent(epoch=self.epoch, code=code, message=message, event_id=event_id, param=param,
                                error_type=error_type))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        t = asyncio.get_running_loop().create_task(coro)
        self._work.add(t)
        t.add_done_callback(self._work.discard)
        return t

    async def _post(self, msg: Any) -> None:
        if not self.closed:
            await self._inbox.put(msg)

    def _close_now(self, reason: str, *, expired: bool = False, force: bool = False) -> None:
        if self.closed:
            return
        self._router.cancel_reply("session_closed")  # an open response still gets its response.done
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
        self._rec.close(ev, self.describe())
        if self._on_closed is not None:
            self._on_closed(self)

    # ------------------------------------------------------------------ owner task
    async def _run(self) -> None:
        try:
            while not self.closed:
                self._dispatch(await self._inbox.get())
        finally:
            if not self.closed:
                self._close_now("shutdown")

    def _dispatch(self, msg: Any) -> None:
        eid = getattr(msg, "event_id", None)  # an error answers the command being handled, whoever raised it
        try:
            self._handle(msg)
        except C.ProtocolError as err:
            err.event_id = err.event_id or eid
            self.reject(err)
        except MediaError as err:
            self._error(err.code if err.code.startswith(("bad_", "invalid")) else "bad_audio", str(err), event_id=eid)
        except Exception as exc:  # a bug must not take other sessions down
            log.exception("session %s: internal error", self.id)
            self._error("internal_error", f"{type(exc).__name__}: {exc}", error_type="server_error", event_id=eid)

    def _handle(self, msg: Any) -> None:
        if self._turns.waiting and C.is_client_command(msg) and not isinstance(msg, C.CloseSession):
            self._gated.append(msg)  # after the held input, in order: decisions stay on the media clock
            return
        self._rec.command(msg)  # a client command (internal posts are ignored), in the order it takes effect
        if isinstance(msg, Scored):
            self._on_scored(msg)
        elif isinstance(msg, OverlapHeard):
            self._on_overlap_heard(msg)
        elif isinstance(msg, Posted):
            self._replies.on_posted(msg)
        elif isinstance(msg, Seen):
            self._camera.on_seen(msg)
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
            self._camera.add(list(msg.frames))
            audio = np.asarray(msg.audio, np.float32).reshape(-1)
            self._rec.input(audio, msg)
            self._feed_audio(audio, new=True)
        elif isinstance(msg, C.Commit):
            self._on_commit(msg)
        elif isinstance(msg, C.ClearInput):
            self._turns.reset()
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
        self.settings = apply_update(self.settings, msg.session, audio_started=self._clock.samples > 0,
                                     max_instructions_chars=self._max_instructions_chars)
        self._input.configure(self.settings)
        self._turns.set_patience(self.settings.turn_patience)
        if not self.configured:
            self.configured = True
            self._ctx.set_prefix(self._input.ref_audio_samples(self.settings.ref_audio))
            self._emit(E.SessionCreated(epoch=self.epoch, session=self.describe()))
        self._emit(E.SessionUpdated(epoch=self.epoch, session=self.describe()))

    def _on_append(self, msg: C.AudioAppend) -> None:
        audio = self._input.audio(msg, self.settings)
        self._rec.input(audio, msg)
        if msg.video_frames:
            images, problems = self._input.frames(msg, self._camera.room, self._camera.max_frames)
            for err in problems:
                self.reject(err)
            self._camera.add(images)
        self._feed_audio(audio, new=True)

    def _feed_audio(self, audio: np.ndarray, *, new: bool = False) -> None:
        # Feed the detector and the clock in pieces that never straddle a unit boundary, so
        # the unit decision sees exactly the audio up to its boundary. A detector waiting for a
        # model score takes no more: the rest is held (and the clock with it) until the score is in.
        if new:  # just arrived (not input held back earlier)
            self._uncommitted += audio.size
            self._probe.on_input(audio.size)
        clock = self._clock
        pos = 0
        while pos < audio.size:
            boundary = clock.next_boundary
            take = min(audio.size - pos, max(boundary - clock.samples, 0) or audio.size - pos)
            signals, used = self._turns.feed(audio[pos : pos + take])
            pos += used
            clock.advance(used)
            for sig in signals:
                self._router.on_signal(sig)
            if clock.samples >= boundary:
                self._close_unit()
            if self._replies.active_response_id and self._turns.overlap_read_due(self._tcfg.barge_in_ms):
                self._router.check_overlap(clock.unit_index, clock.samples)  # words over the reply: read them
            if self._turns.waiting:
                self._held_audio = audio[pos:]
                return

    def _on_scored(self, msg: Scored) -> None:
        """A model score is back: apply its decision at its sample, then the input held meanwhile."""
        fresh = self._turns.answers_awaited(msg)
        signals = self._turns.resolve(msg)
        for sig in signals:
            self._router.on_signal(sig)
        if fresh and not signals and msg.text is not None and msg.request.check == 0:
            self._router.overlap_paused(msg.text, self._turns.speech_ms)  # (words over a reply, read at a pause)
        self._release_held()

    def _on_overlap_heard(self, msg: OverlapHeard) -> None:
        """The words said over the reply at the last boundary are back: decide, then the held input."""
        if not self._turns.overlap_heard(msg):
            return
        self._router.overlap_heard(msg.text, msg.unit_index, msg.speech_ms)
        self._release_held()

    def _release_held(self) -> None:
        if self._turns.waiting:
            return  # (a score and the words over a reply were both out: the input waits for the other)
        held, self._held_audio = self._held_audio, None
        if held is not None and held.size:
            self._feed_audio(held)
        while self._gated and not self._turns.waiting and not self.closed:
            self._dispatch(self._gated.popleft())
    def _on_commit(self, msg: C.Commit) -> None:
        if self._uncommitted == 0:
            raise C.ProtocolError("input_audio_buffer_empty", "nothing appended since the last commit",
                                  event_id=msg.event_id)
        self._uncommitted = 0
        self.turn_id += 1
        item_id = self._turns.take_item()
        self._emit(E.InputCommitted(epoch=self.epoch, item_id=item_id, turn_id=self.turn_id,
                                    history_len=len(self._history)))
        sig = None if msg.is_speech is False else self._turns.flush()
        if msg.is_speech is False:
            self._turns.reset()
        if sig is not None:
            self._router.on_signal(sig, commit=True)
        if self._replies.active is not None:
            self._replies.drain_now()
        else:
            self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=self._clock.unit_index,
                                        reason="commit_no_speech"))

    def _on_cancel(self, msg: C.CancelResponse) -> None:
        r = self._replies.active
        if msg.type == "response.cancel" and (r is None or not r.created or
                                              (msg.response_id and msg.response_id != r.response_id)):
            raise C.ProtocolError("response_not_active", "no active response to cancel", event_id=msg.event_id,
                                  param="response_id" if msg.response_id else None)
        reason = "client_cancelled" if msg.type == "response.cancel" else "barge_in"
        rid = self._replies.active_response_id
        self._router.cancel_reply(reason)
        if msg.type in ("output_audio_buffer.clear", "barge_in") or rid:
            self._emit(E.OutputAudioCleared(epoch=self.epoch, response_id=rid))

    def _on_response_create(self, msg: C.ResponseCreate) -> None:
        if self._replies.active is not None:
            raise C.ProtocolError("response_already_active", "a response is already in progress", event_id=msg.event_id)
        held = self._turns.take_held()
        if held is None:
            raise C.ProtocolError("response_create_without_input", "no committed user audio to answer",
                                  event_id=msg.event_id)
        item_id, utt = held
        self._replies.start(utt, item_id, drain=True, boundary_passed=True, seen_text=self._camera.seen_text)

    def _on_ack(self, msg: C.PlaybackAck) -> None:
        r = self._replies.active
        rid = msg.response_id or (msg.item_id[5:] if msg.item_id and msg.item_id.startswith("item_") else None)
        if r is not None and r.created and rid == r.response_id:  # playing now: say what was heard so far
            heard_now = heard_text(r.clock.text_sent, r.clock.marks, msg.played_ms)
            self._emit(E.PlaybackAcknowledged(epoch=self.epoch, response_id=rid, played_ms=msg.played_ms,
                                              **clamp_ack(msg.played_ms, r.clock.sent_ms),
                                              truncate=msg.truncate, history_committed=heard_now))
            return
        heard = self._ledger.acknowledge(msg, self.turn_id)
        item = heard.response.item_id
        ack_only = self.settings.playback_commit_policy == "ack_only"
        in_history = self._history.has(item)
        if not in_history and ack_only and heard.text or in_history and (ack_only or msg.truncate):
            self._history.put(item, Turn("assistant", heard.text))
        self._emit(E.PlaybackAcknowledged(epoch=self.epoch, response_id=heard.response.response_id,
                                          played_ms=msg.played_ms, **clamp_ack(msg.played_ms, heard.delivered_ms),
                                          truncate=msg.truncate, history_committed=heard.text))

    # ------------------------------------------------------------------ unit clock
    def _close_unit(self) -> None:
        k = self._clock.close_unit()
        compute_ms = self._turns.take_compute_ms()
        frames = self._camera.take_unit_frames()
        r = self._replies.active
        decision = "listen"
        if r is not None and r.created and not self._turns.reads_words \
                and self._turns.speaking_for(self._tcfg.barge_in_ms):
            self._router.check_overlap(k, self._clock.samples)  # a soft interrupt (words read: as they come)
        elif r is not None:
            speak, listen_due = self._replies.at_unit_boundary()
            if speak:
                decision = "speak"
            if listen_due:
                self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=k))
        else:
            self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=k))
        sizes = [(f.shape[1], f.shape[0]) for f in frames]
        evicted, overflow = self._ctx.add_unit(k, self.unit_ms, sizes, self._replies.take_unit_text_tokens(),
                                               decision == "listen")
        for item_id in evicted:
            self._history.drop(item_id)
            self._emit(E.ItemDeleted(epoch=self.epoch, item_id=item_id))
        scores, score_ms = self._turns.take_score_stats()
        batch = self._replies.take_thinker_batch()
        asr = self._transcripts.take_batch()
        self._emit(E.UnitMetrics(epoch=self.epoch, unit_index=k, compute_ms=compute_ms, context_tokens=self._ctx.total,
                                 max_context_tokens=self._ctx.max_tokens, decision=decision,
                                 seen_text=self._camera.seen_text, turn_scores=scores, turn_score_ms=score_ms,
                                 far_speech_ignored=self._turns.take_far_speech(), thinker_steps=batch.steps,
                                 thinker_batch=batch.replies_per_step, thinker_wait_ms=batch.wait_ms,
                                 asr_reads=asr.steps, asr_batch=asr.replies_per_step, asr_wait_ms=asr.wait_ms))
        if overflow:
            self._error("context_length_exceeded", f"context of {self._ctx.total} tokens exceeds "
                        f"{self._ctx.max_tokens} and nothing more can be dropped", error_type="server_error")
            self._close_now("context_length_exceeded")
        self._camera.maybe_read(force=False)

