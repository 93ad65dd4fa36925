"""The reply half of :class:`~app.backend.session.DuplexSession`: turn signals to responses.

A mixin, split from ``session.py`` by responsibility: these methods run only inside the
session's owner task and change the session's state like the rest of it. They turn turn-policy
signals into replies (speculative on a pause, confirmed at the end of the user's turn), run a
reply through the pipeline in a background task whose results come back through the inbox,
open the response at the end of the user's turn or at the next unit boundary
(``turn_policy.reply_at``), release its audio at the pace of its playback clock (input audio
received since its first audio), and finish or cancel it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backend import events as E
from app.backend.pipeline import (
    AudioChunk,
    RequestCancelled,
    RequestContext,
    StageError,
)
from app.backend.reply import FinishedResponse, Reply
from app.backend.segmenter import segment_text
from app.backend.stages import SamplingParams, ThinkerPrompt, Turn, TurnSignal
from app.constants import INPUT_SAMPLE_RATE_HZ

log = logging.getLogger(__name__)


@dataclass
class Posted:
    """A result of the session's background work, fenced by reply identity."""

    reply: Reply
    kind: str  # transcript | chunk | done | failed
    value: Any = None


class ReplyFlow:
    """Reply lifecycle methods of a duplex session (state lives on the session)."""

    # provided by DuplexSession
    id: str
    _reply: Reply | None
    _tcfg: Any  # the deploy config's turn_policy
    _samples: int  # input samples received (16 kHz)
    _deferred: tuple[str, np.ndarray] | None

    # ------------------------------------------------------------------ turn taking
    def _on_signal(self, sig: TurnSignal, *, commit: bool = False) -> None:
        if sig.kind == "speech_started":
            self._user_item = f"item_{uuid.uuid4().hex[:16]}"
            self._emit(E.SpeechStarted(epoch=self.epoch, item_id=self._user_item,
                                       audio_start_ms=int(sig.at_sample * 1000 / INPUT_SAMPLE_RATE_HZ)))
            self._maybe_read_frame(force=True)
            r = self._reply
            if r is not None and r.created and self.settings.overlap_policy == "barge_in_on_speech":
                self._cancel_reply("barge_in")
                self._emit(E.OutputAudioCleared(epoch=self.epoch, response_id=r.response_id))
            return
        item_id = self._user_item or f"item_{uuid.uuid4().hex[:16]}"
        utt = sig.utterance if sig.utterance is not None else np.zeros(0, np.float32)
        r = self._reply
        if r is not None and r.created:
            if sig.kind == "end_of_turn":
                self._emit(E.SpeechStopped(epoch=self.epoch, item_id=item_id,
                                           audio_end_ms=int(sig.at_sample * 1000 / INPUT_SAMPLE_RATE_HZ)))
                # an overlap the reply outlived: a short one (a backchannel) is acknowledged and
                # dropped, a meaningful one is answered when the reply ends
                if sig.speech_ms >= self._tcfg.overlap_short_ack_ms and self.settings.auto_response:
                    if self._deferred is not None:
                        utt = np.concatenate([self._deferred[1], utt])
                    self._deferred = (item_id, utt)
            return
        log.debug("session %s: turn signal %s at %d", self.id, sig.kind, sig.at_sample)
        if sig.kind == "resumed":  # the pause was not the end: drop the speculative reply
            if r is not None and not r.confirmed:
                self._cancel_reply(None)
            return
        if sig.kind == "pause":  # prepare the reply now, show it only if the turn really ends
            if r is not None:
                self._cancel_reply(None)
            if self.settings.auto_response:
                self._start_reply(utt, item_id, drain=False, confirmed=False)
            return
        self._emit(E.SpeechStopped(epoch=self.epoch, item_id=item_id,
                                   audio_end_ms=int(sig.at_sample * 1000 / INPUT_SAMPLE_RATE_HZ)))
        if not self.settings.auto_response:
            self._committed_utterance = (item_id, utt)
            return
        now = commit or self._tcfg.reply_at == "end_of_turn"  # else: wait for the next unit boundary
        if r is not None and not r.confirmed:  # the speculative reply answers exactly this turn
            self._confirm_reply(r, drain=commit, boundary_passed=now)
            return
        if r is not None:  # the user went on before we answered: answer the latest words
            self._cancel_reply(None)
        self._start_reply(utt, item_id, drain=commit, boundary_passed=now)

    def _promote_deferred(self) -> None:
        """Answer the utterance said over the reply that just ended (if any, and nothing else is under way)."""
        if self._deferred is None or self._reply is not None:
            return
        item_id, utt = self._deferred
        self._deferred = None
        self._start_reply(utt, item_id, drain=False, boundary_passed=self._tcfg.reply_at == "end_of_turn")

    def _confirm_reply(self, r: Reply, *, drain: bool, boundary_passed: bool) -> None:
        r.confirmed = True
        r.drain = r.drain or drain
        r.boundary_passed = r.boundary_passed or boundary_passed
        if r.transcript is not None:
            self._publish_transcript(r)
        self._advance_reply()

    def _start_reply(self, utterance: np.ndarray, item_id: str, *, drain: bool, confirmed: bool = True,
                     boundary_passed: bool = False) -> None:
        rid = f"resp_{uuid.uuid4().hex[:20]}"
        r = Reply(response_id=rid, epoch=self.epoch, ctx=RequestContext(f"{self.id}:{rid}"), user_item_id=item_id,
                  drain=drain, boundary_passed=boundary_passed, confirmed=confirmed)
        self._reply = r
        history = list(self._history)
        r.task = self._spawn(self._produce(r, utterance, history, self._seen_text))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        t = asyncio.get_running_loop().create_task(coro)
        self._work.add(t)
        t.add_done_callback(self._work.discard)
        return t

    async def _post(self, msg: Any) -> None:
        if not self.closed:
            await self._inbox.put(msg)

    async def _produce(self, r: Reply, utterance: np.ndarray, history: list[Turn], seen: str) -> None:
        pipe = self.deps.pipeline
        t0 = time.perf_counter()
        try:
            text = (await pipe.transcribe(r.ctx, utterance)).strip()
            log.debug("session %s: %s transcribed in %.0f ms", self.id, r.response_id, (time.perf_counter() - t0) * 1e3)
            await self._post(Posted(r, "transcript", text))
            if not _meaningful(text):
                await self._post(Posted(r, "done"))
                return
            params = SamplingParams(temperature=self.settings.temperature,
                                    max_tokens=min(self.settings.max_tokens or self._tcfg.max_reply_tokens,
                                                   self._tcfg.max_reply_tokens))
            prompt = ThinkerPrompt(self.settings.instructions, history, text, [seen] if seen else [])
            reply = (await pipe.generate(r.ctx, prompt, params)).strip()
            log.debug("session %s: %s generated at %.0f ms", self.id, r.response_id, (time.perf_counter() - t0) * 1e3)
            segments = segment_text(reply) if reply else []
            if self.settings.speech_out and segments:
                async for chunk in pipe.speak(r.ctx, segments):
                    if chunk.index == 0:
                        log.debug("session %s: %s first speech at %.0f ms", self.id, r.response_id,
                                  (time.perf_counter() - t0) * 1e3)
                    await self._post(Posted(r, "chunk", chunk))
            else:
                for i, seg in enumerate(segments):
                    await self._post(Posted(r, "chunk", AudioChunk(i, seg, np.zeros(0, np.float32),
                                                                   i == len(segments) - 1, 0.0)))
            await self._post(Posted(r, "done"))
        except (RequestCancelled, asyncio.CancelledError):
            return
        except Exception as exc:  # StageError, or a bug: fail this reply, keep the session
            if not isinstance(exc, StageError):
                log.exception("session %s: reply failed", self.id)
            await self._post(Posted(r, "failed", f"{type(exc).__name__}: {exc}"))

    def _on_posted(self, msg: Posted) -> None:
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
        elif msg.kind == "failed":
            self._error("response_error", msg.value, error_type="server_error")
            self._finish_reply("failed", "stage_error")
            return
        self._advance_reply()

    def _publish_transcript(self, r: Reply) -> None:
        """Show what the user said and put it in the history (once the turn is confirmed)."""
        if r.transcript:
            self._emit(E.InputTranscription(epoch=self.epoch, item_id=r.user_item_id, transcript=r.transcript))
        if _meaningful(r.transcript):
            self._history.append(Turn("user", r.transcript or ""))
            self._history_ids.append(r.user_item_id)
            self._ctx.note_item(r.user_item_id, self._unit_index)

    def _advance_reply(self) -> None:
        """Create the response once decided, release chunks within the pacing budget, finish."""
        r = self._reply
        if r is None:
            return
        if not r.created:
            if not r.confirmed or r.transcript is None or not r.boundary_passed:
                return
            if not _meaningful(r.transcript) or (r.producer_done and not r.chunks):
                self._reply = None  # nothing to say: stay listening
                if r.drain:
                    self._emit(E.ResponseListen(epoch=self.epoch, session_id=self.id, unit_index=self._unit_index,
                                                reason="model_listen"))
                return
            if self._unit_index < self.settings.force_listen_count:
                return
            r.created = True
            log.debug("session %s: %s created at sample %d", self.id, r.response_id, self._samples)
            for ev in (E.ResponseCreated(epoch=r.epoch, response_id=r.response_id),
                       E.OutputItemAdded(epoch=r.epoch, response_id=r.response_id),
                       E.ContentPart(epoch=r.epoch, response_id=r.response_id)):
                self._emit(ev)
        # Release audio at most ~1.5 units ahead of its playback clock (the input audio received
        # since its first audio was sent), so that the server's view of the response stays close
        # to what the user is hearing (soft interrupts can then end it).
        played_ms = self._played_ms(r)
        while r.chunks and (r.drain or r.sent_ms < played_ms + 1.5 * self.unit_ms):
            self._send_chunk(r, r.chunks.popleft())
        # The response stays open while its audio is (by that clock) still playing, so the user
        # can still talk over it; a commit (drain) ends it as soon as everything is sent.
        played_ms = self._played_ms(r)
        if r.producer_done and not r.chunks and (r.drain or played_ms >= r.sent_ms - self.unit_ms / 2):
            self._finish_reply("completed", None)
            self._promote_deferred()

    def _played_ms(self, r: Reply) -> float:
        """How much of the reply has played by its playback clock, ms (0 before its first audio)."""
        if r.speak_sample is None:
            return 0.0
        return (self._samples - r.speak_sample) * 1000.0 / INPUT_SAMPLE_RATE_HZ

    def _send_chunk(self, r: Reply, chunk: AudioChunk) -> None:
        rate = self.deps.pipeline.family.capabilities.output_sample_rate_hz
        if not r.spoke:
            r.spoke = True
            r.speak_sample = self._samples
            self._emit(E.ResponseSpeak(epoch=r.epoch, response_id=r.response_id))
        r.text_sent += chunk.text
        self._unit_text_tokens += max(1, len(chunk.text) // 4) + 1
        if chunk.audio.size:
            r.sent_ms += chunk.audio.size * 1000.0 / rate
            r.marks.append((len(r.text_sent), r.sent_ms))
            end = r.producer_done and not r.chunks
            self._emit(E.AudioDelta(epoch=r.epoch, response_id=r.response_id, audio=chunk.audio, sample_rate_hz=rate,
                                    audio_duration_ms=r.sent_ms, text_chars=len(r.text_sent), end_of_turn=end,
                                    session_id=self.id))
            self._emit(E.TranscriptDelta(epoch=r.epoch, response_id=r.response_id, delta=chunk.text))
        else:
            self._emit(E.TextDelta(epoch=r.epoch, response_id=r.response_id, delta=chunk.text))
        r.deltas += 1

    def _finish_reply(self, status: str, reason: str | None) -> None:
        r = self._reply
        if r is None:
            return
        self._reply = None
        if not r.created:
            return
        text = r.text_sent
        if status == "completed":
            if r.marks:
                self._emit(E.AudioDone(epoch=r.epoch, response_id=r.response_id))
                self._emit(E.TranscriptDone(epoch=r.epoch, response_id=r.response_id, transcript=text))
            else:
                self._emit(E.TextDone(epoch=r.epoch, response_id=r.response_id, text=text))
            self._emit(E.ContentPart(epoch=r.epoch, response_id=r.response_id, done=True, transcript=text))
            self._emit(E.OutputItemAdded(epoch=r.epoch, response_id=r.response_id, done=True, transcript=text))
        self._emit(E.ResponseDone(epoch=r.epoch, response_id=r.response_id, status=status, reason=reason,
                                  transcript=text, metadata={"audio_duration_ms": round(r.sent_ms, 1),
                                                             "context_tokens": self._ctx.total}))
        self._emit(E.RateLimitsUpdated(epoch=r.epoch))
        fin = FinishedResponse(r.response_id, text, list(r.marks), self.turn_id)
        if text and self.settings.playback_commit_policy == "commit_all_on_done":
            self._history.append(Turn("assistant", text))
            self._history_ids.append(r.item_id)
            fin.history_index = len(self._history) - 1
            self._ctx.note_item(r.item_id, self._unit_index)
        self._finished[r.response_id] = fin
        while len(self._finished) > self._dcfg.completed_append_cache_size:
            self._finished.pop(next(iter(self._finished)))

    def _cancel_reply(self, reason: str | None) -> None:
        """Hard interrupt: new epoch, stage work cancelled, queued audio dropped."""
        r = self._reply
        if r is None:
            return
        r.ctx.cancel()
        if r.task is not None:
            r.task.cancel()
        r.chunks.clear()
        self.epoch += 1
        self._deferred = None  # a hard interrupt: the words that cut in are answered on their own
        if r.created and reason is not None:
            self._finish_reply("cancelled", reason)
        self._reply = None


def _meaningful(text: str | None) -> bool:
    """An ASR result worth answering: at least two letters that are not only filler/noise tags."""
    if not text:
        return False
    letters = sum(ch.isalpha() for ch in text)
    return letters >= 2 and not (text.startswith("[") and text.endswith("]"))
