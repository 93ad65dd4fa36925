"""The reply runner of a duplex session: one reply's pipeline work, its epoch fence, its release
and its end.

It runs only on the session's owner task. A reply is produced in a background task (ASR ->
Thinker -> Talker -> Code2Wav) whose results come back through the session's inbox as
:class:`Posted` messages, fenced by reply identity and epoch. The response opens once the user's
turn is confirmed, the transcript is meaningful, the moment has come (``turn_policy.reply_at``)
and its first audio is ready (so a response is never opened empty);
its audio is released at the pace of its playback clock (:mod:`app.backend.duplex.playback`), and
it finishes (completed, failed) or is cancelled (a hard interrupt: epoch + 1, stage work
cancelled, queued audio dropped).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backend.duplex.clock import UnitClock
from app.backend.duplex.context import ContextWindow
from app.backend.duplex.history import History
from app.backend.duplex.playback import FinishedResponse, PlaybackLedger
from app.backend.duplex.reply import Reply
from app.backend.duplex.settings import SessionSettings
from app.backend.pipeline.stages import (
    BatchFigures,
    BatchShare,
    SamplingParams,
    ThinkerPrompt,
    Turn,
)
from app.backend.pipeline.workers import (
    AudioChunk,
    Pipeline,
    RequestCancelled,
    RequestContext,
    StageError,
)
from app.backend.protocol import events as E
from app.backend.turns.text_cues import only_interjection

log = logging.getLogger(__name__)


LENGTH_REASON = "max_output_tokens"
"""``response.done`` ``status_details.reason`` of a reply cut by ``max_tokens`` (OpenAI's name);
its ``metadata.finish_reason`` is then ``length``, as chat completions say."""


@dataclass
class Posted:
    """A result of a reply's background work, fenced by reply identity.

    Attributes:
        reply: the reply it belongs to.
        kind: ``transcript`` | ``chunk`` | ``done`` | ``failed``.
        value: the transcript (str), an :class:`AudioChunk`, the finish reason (``done``: ``stop`` |
            ``length``), or the failure message.
    """

    reply: Reply
    kind: str
    value: Any = None


def meaningful(text: str | None) -> bool:
    """An ASR result worth answering: at least two letters that are not only a noise tag
    ("[Music]") or interjections ("Oh.", "Hmm": :func:`~app.backend.turns.text_cues.only_interjection`)."""
    if not text:
        return False
    letters = sum(ch.isalpha() for ch in text)
    return letters >= 2 and not (text.startswith("[") and text.endswith("]")) and not only_interjection(text)


class ReplyRunner:
    """Runs the replies of one session, one at a time.

    Args:
        session_id: the session (request ids, events).
        pipeline: the shared pipeline.
        turn_config: the deploy config's ``turn_policy`` (``max_reply_tokens``).
        clock: the session's unit clock (read only).
        history: the session's conversation history (user turns published, assistant turns kept).
        context: the session's context window (items noted).
        ledger: where finished responses are kept for ``playback.ack``.
        emit: sends a server event.
        spawn: runs a coroutine as the session's background work.
        post: hands a result back to the session's inbox.
        settings: the session's current settings.
        turn_id: the session's committed-turn counter.
        on_completed: called when the runner falls idle on its own (a response completed or failed, or
            a reply had nothing to say): the session then answers a deferred utterance.
        transcribe: the session's shared transcription of an utterance (default: the pipeline's).
    """

    def __init__(self, session_id: str, pipeline: Pipeline, turn_config: Any, *, clock: UnitClock, history: History,
                 context: ContextWindow, ledger: PlaybackLedger, emit: Callable[[E.ServerEvent], None],
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
                 post: Callable[[Any], Awaitable[None]], settings: Callable[[], SessionSettings],
                 turn_id: Callable[[], int], on_completed: Callable[[], None],
                 transcribe: Callable[[np.ndarray], Awaitable[str]] | None = None) -> None:
        self._id = session_id
        self._transcribe = transcribe or self._own_transcribe
        self._pipeline = pipeline
        self._tcfg = turn_config
        self._clock = clock
        self._history = history
        self._ctx = context
        self._ledger = ledger
        self._emit = emit
        self._spawn = spawn
        self._post = post
        self._settings = settings
        self._turn_id = turn_id
        self._on_completed = on_completed
        self._reply: Reply | None = None
        self._unit_text_tokens = 0
        self._batch_share = BatchShare()  # every reply's Thinker steps, where the family batches them
        self.epoch = 0
        """The session epoch: a hard interrupt advances it; work of an older epoch is dropped."""

    # ------------------------------------------------------------------ state
    @property
    def active(self) -> Reply | None:
        """The reply in progress (speculative, pending or open), if any."""
        return self._reply

    @property
    def active_response_id(self) -> str | None:
        """The open response's id (``response.created`` sent), else None."""
        r = self._reply
        return r.response_id if r is not None and r.created else None

    def take_unit_text_tokens(self) -> int:
        """Text tokens spoken since the last call (context accounting per unit)."""
        n, self._unit_text_tokens = self._unit_text_tokens, 0
        return n

    def take_thinker_batch(self) -> BatchFigures:
        """What this session's replies (spoken or dropped) got of the family's cross-session Thinker
        batch since the last call (zeros where the family writes one reply at a time)."""
        return self._batch_share.take()

    # ------------------------------------------------------------------ lifecycle
    def start(self, utterance: np.ndarray, item_id: str, *, drain: bool, seen_text: str, confirmed: bool = True,
              boundary_passed: bool = False) -> None:
        """Start producing a reply to ``utterance`` (float32 16 kHz) of user item ``item_id``."""
        rid = f"resp_{uuid.uuid4().hex[:20]}"
        ctx = RequestContext(f"{self._id}:{rid}", batch_share=self._batch_share, speculative=not confirmed)
        r = Reply(response_id=rid, epoch=self.epoch, ctx=ctx, user_item_id=item_id,
                  drain=drain, boundary_passed=boundary_passed, confirmed=confirmed)
        self._reply = r
        r.task = self._spawn(self._produce(r, utterance, self._history.turns(), seen_text))

    def confirm(self, *, drain: bool, boundary_passed: bool) -> None:
        """The user's turn has ended: the speculative reply answers it."""
        r = self._reply
        if r is None:
            return
        r.confirmed = True
        r.ctx.speculative = False  # (a batching Thinker now writes it as one a user waits for)
        r.drain = r.drain or drain
        r.boundary_passed = r.boundary_passed or boundary_passed
        if r.transcript is not None:
            self._publish_transcript(r)
        self.advance()

    def drain_now(self) -> None:
        """A commit: open the reply as soon as it is ready and release all its audio at once."""
        r = self._reply
        if r is None:
            return
        r.drain = True
        r.boundary_passed = True
        self.advance()

    def at_unit_boundary(self) -> tuple[bool, bool]:
        """A unit boundary passed with a reply in progress.

        Returns:
            ``(speak, listen_due)``: whether this unit speaks, and whether the session still
            owes the unit a ``response.listen`` (no response is open, or only a speculative one).
        """
        r = self._reply
        assert r is not None
        if r.confirmed:  # (a speculative reply waits for a boundary after the turn has ended)
            r.boundary_passed = True
        speak = r.created
        self.advance()
        now = self._reply
        if now is not None and now.created:
            return True, False
        return speak, now is None or not now.confirmed

    def end_for_overlap(self) -> str:
        """Soft interrupt: the user talks over the open response; it ends, completed (``user_overlap``).

        Returns:
            The ended response's id.
        """
        r = self._reply
        assert r is not None and r.created
        r.ctx.cancel()
        if r.task is not None:
            r.task.cancel()
        r.chunks.clear()
        self._finish("completed", "user_overlap")
        return r.response_id

    def cancel(self, reason: str | None) -> None:
        """Hard interrupt: new epoch, stage work cancelled, queued audio dropped.

        An open response ends with ``response.done{status: cancelled}`` when ``reason`` is given;
        ``None`` drops a reply nobody has seen (a speculative or pending one) without a trace.
        """
        r = self._reply
        if r is None:
            return
        r.ctx.cancel()
        if r.task is not None:
            r.task.cancel()
        r.chunks.clear()
        if r.created or reason is not None:  # a reply nobody saw, dropped by us, leaves no trace
            self.epoch += 1
        if r.created and reason is not None:
            self._finish("cancelled", reason)
        self._reply = None

    # ------------------------------------------------------------------ background work
    async def _own_transcribe(self, utterance: np.ndarray) -> str:
        return (await self._pipeline.transcribe(RequestContext(f"{self._id}:asr"), utterance)).strip()

    async def _produce(self, r: Reply, utterance: np.ndarray, history: list[Turn], seen: str) -> None:
        pipe = self._pipeline
        t0 = time.perf_counter()
        try:
            text = await self._transcribe(utterance)
            if r.ctx.cancelled:
                raise RequestCancelled(r.ctx.request_id)
            log.debug("session %s: %s transcribed in %.0f ms", self._id, r.response_id, (time.perf_counter() - t0) * 1e3)
            await self._post(Posted(r, "transcript", text))
            if not meaningful(text):
                await self._post(Posted(r, "done"))
                return
            settings = self._settings()
            params = SamplingParams(temperature=settings.temperature,
                                    max_tokens=min(settings.max_tokens or self._tcfg.max_reply_tokens,
                                                   self._tcfg.max_reply_tokens))
            prompt = ThinkerPrompt(settings.instructions, history, text, [seen] if seen else [])
            stream = pipe.stream_reply(r.ctx, prompt, params)  # segments as the Thinker writes them
            if self._settings().speech_out:
                first = True
                async for chunk in pipe.speak(r.ctx, stream):
                    if first:
                        first = False
                        log.debug("session %s: %s first speech at %.0f ms", self._id, r.response_id,
                                  (time.perf_counter() - t0) * 1e3)
                    await self._post(Posted(r, "chunk", chunk))
            else:
                i = 0
                async for seg, last in stream:
                    await self._post(Posted(r, "chunk", AudioChunk(i, seg, np.zeros(0, np.float32), last, 0.0)))
                    i += 1
            generated = stream.reply
            assert generated is not None
            log.debug("session %s: %s generated at %.0f ms", self._id, r.response_id, (time.perf_counter() - t0) * 1e3)
            await self._post(Posted(r, "done", generated.finish_reason))
        except (RequestCancelled, asyncio.CancelledError):
            return
        except Exception as exc:  # StageError, or a bug: fail this reply, keep the session
            if not isinstance(exc, StageError):
                log.exception("session %s: reply failed", self._id)
            await self._post(Posted(r, "failed", f"{type(exc).__name__}: {exc}"))

    def on_posted(self, msg: Posted) -> None:
        """A result of the background work arrived (dropped when stale)."""
        r = msg.reply
        if r is not self._reply or r.epoch != self.epoch:
            return  # stale: an older epoch or a replaced reply
        if msg.kind == "transcript":
            r.transcript = msg.value
            if r.confirmed:
                self._publish_transcript(r)
        elif msg.kind == "chunk":
            r.chunks.append(msg.value)
        elif msg.kind == "done":
            r.producer_done = True
            r.finish_reason = msg.value or "stop"
        elif msg.kind == "failed":
            self._emit(E.ErrorEvent(epoch=self.epoch, code="response_error", message=msg.value,
                                    error_type="server_error"))
            self._finish("failed", "stage_error")
            self._on_completed()
            return
        self.advance()

    def _publish_transcript(self, r: Reply) -> None:
        """Show what the user said and put it in the history (once the turn is confirmed)."""
        if r.transcript:
            self._emit(E.InputTranscription(epoch=self.epoch, item_id=r.user_item_id, transcript=r.transcript))
        if meaningful(r.transcript):
            self._history.put(r.user_item_id, Turn("user", r.transcript or ""))
            self._ctx.note_item(r.user_item_id, self._clock.unit_index)

    # ------------------------------------------------------------------ release
    def advance(self) -> None:
        """Create the response once decided, release chunks within the pacing budget, finish."""
        r = self._reply
        if r is None:
            return
        if not r.created:
            if not r.confirmed or r.transcript is None or not r.boundary_passed:
                return
            if not meaningful(r.transcript) or (r.producer_done and not r.chunks):
                self._reply = None  # nothing to say: stay listening
                if r.drain:
                    self._emit(E.ResponseListen(epoch=self.epoch, session_id=self._id,
                                                unit_index=self._clock.unit_index, reason="model_listen"))
                self._on_completed()
                return
            if not r.chunks:
                return  # the response opens with its first audio (or text), never empty
            if self._clock.unit_index < self._settings().force_listen_count:
                return
            r.created = True
            log.debug("session %s: %s created at sample %d", self._id, r.response_id, self._clock.samples)
            for ev in (E.ResponseCreated(epoch=r.epoch, response_id=r.response_id),
                       E.OutputItemAdded(epoch=r.epoch, response_id=r.response_id),
                       E.ContentPart(epoch=r.epoch, response_id=r.response_id)):
                self._emit(ev)
        unit_ms = self._clock.unit_ms
        played_ms = r.clock.played_ms(self._clock.samples)
        while r.chunks and (r.drain or r.clock.may_release(played_ms, unit_ms)):
            self._send_chunk(r, r.chunks.popleft())
        played_ms = r.clock.played_ms(self._clock.samples)
        if r.producer_done and not r.chunks and (r.drain or r.clock.done_playing(played_ms, unit_ms)):
            self._finish("completed", LENGTH_REASON if r.finish_reason == "length" else None)
            self._on_completed()

    def _send_chunk(self, r: Reply, chunk: AudioChunk) -> None:
        rate = self._pipeline.family.capabilities.output_sample_rate_hz
        if not r.clock.started:
            r.clock.start(self._clock.samples)
            self._emit(E.ResponseSpeak(epoch=r.epoch, response_id=r.response_id))
        audio_ms = chunk.audio.size * 1000.0 / rate
        r.clock.release(chunk.text, audio_ms)
        if chunk.text:
            self._unit_text_tokens += max(1, len(chunk.text) // 4) + 1
        if chunk.audio.size:
            end = r.producer_done and not r.chunks
            self._emit(E.AudioDelta(epoch=r.epoch, response_id=r.response_id, audio=chunk.audio, sample_rate_hz=rate,
                                    audio_duration_ms=r.clock.sent_ms, text_chars=len(r.clock.text_sent),
                                    end_of_turn=end, session_id=self._id))
            # exactly one transcript delta per audio delta (vLLM-Omni's invariant), empty when the
            # chunk speaks no new word (a one-word segment over two chunks, the held-back tail)
            self._emit(E.TranscriptDelta(epoch=r.epoch, response_id=r.response_id, delta=chunk.text))
        elif chunk.text:
            self._emit(E.TextDelta(epoch=r.epoch, response_id=r.response_id, delta=chunk.text))
        r.deltas += 1

    def _finish(self, status: str, reason: str | None) -> None:
        r = self._reply
        if r is None:
            return
        self._reply = None
        if not r.created:
            return
        text = r.clock.text_sent
        if status == "completed":
            if r.clock.marks:
                self._emit(E.AudioDone(epoch=r.epoch, response_id=r.response_id))
                self._emit(E.TranscriptDone(epoch=r.epoch, response_id=r.response_id, transcript=text))
            else:
                self._emit(E.TextDone(epoch=r.epoch, response_id=r.response_id, text=text))
            self._emit(E.ContentPart(epoch=r.epoch, response_id=r.response_id, done=True, transcript=text))
            self._emit(E.OutputItemAdded(epoch=r.epoch, response_id=r.response_id, done=True, transcript=text))
        meta = {"audio_duration_ms": round(r.clock.sent_ms, 1), "context_tokens": self._ctx.total}
        if reason == LENGTH_REASON:
            meta["finish_reason"] = "length"
        self._emit(E.ResponseDone(epoch=r.epoch, response_id=r.response_id, status=status, reason=reason,
                                  transcript=text, metadata=meta))
        self._emit(E.RateLimitsUpdated(epoch=r.epoch))
        if text and self._settings().playback_commit_policy == "commit_all_on_done":
            self._history.put(r.item_id, Turn("assistant", text))
            self._ctx.note_item(r.item_id, self._clock.unit_index)
        self._ledger.remember(FinishedResponse(r.response_id, text, list(r.clock.marks), self._turn_id(),
                                               r.user_item_id))
