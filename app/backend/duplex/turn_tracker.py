"""Turn tracking of a duplex session: the turn detector (and its model scores) plus what the session
remembers of the user's utterances (the item being spoken, an utterance deferred until the reply
ends, one held for ``response.create``)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backend.turns.detector import ScoreRequest, TurnDetector, TurnSignal

log = logging.getLogger(__name__)

SCORE_TIMEOUT_S = 5.0
"""A model score or transcript not back after this long counts as failed (the pause keeps listening)."""


def _warn_failed(what: str, exc: BaseException) -> None:
    """Log a failed score or transcript: a timeout (a busy machine) in one line, anything else
    with its traceback."""
    if isinstance(exc, TimeoutError):
        log.warning("%s timed out after %.1f s", what, SCORE_TIMEOUT_S)
    else:
        log.warning("%s failed", what, exc_info=exc)


@dataclass
class Scored:
    """Posted to the session when an end-of-turn score is back.

    Attributes:
        request: what was scored.
        probability: that the turn is complete, or None (the scorer failed or timed out).
        seconds: request to result, wall clock.
        text: the transcript of ``request.utterance`` (None when none was asked or it failed).
        text_end: the text end-of-turn model's probability that ``text``'s words end there (None:
            no such model, no words, or it failed).
    """

    request: ScoreRequest
    probability: float | None
    seconds: float
    text: str | None = None
    text_end: float | None = None


@dataclass
class OverlapHeard:
    """Posted to the session when the words said over a reply (at a unit boundary) are transcribed.

    Attributes:
        at_sample: the input sample they were asked at (identifies the request).
        unit_index: the unit the decision belongs to (``response.listen`` names it).
        text: the transcript, or None (the transcription failed or timed out).
        speech_ms: speech of the utterance when it was asked, ms (decides when ``text`` is None).
    """

    at_sample: int
    unit_index: int
    text: str | None
    speech_ms: float = 0.0


def new_item_id() -> str:
    """A fresh conversation item id (``item_<16 hex>``)."""
    return f"item_{uuid.uuid4().hex[:16]}"


class TurnTracker:
    """Owns one session's :class:`~app.backend.turns.detector.TurnDetector` and utterance state.

    Args:
        detector: the session's detector (built from ``turn_policy.detector``).
        score: the shared end-of-turn scorer (``score(audio) -> Future[float]``), for detectors
            that ask for scores; None otherwise.
        spawn: runs a coroutine as the session's background work.
        post: hands a result back to the session's inbox.
        on_decision: called with ``(outcome, score seconds or None)`` after each scored or capped
            pause (metrics).
        on_far_speech: called with the number of speech onsets a feed refused as far speech
            (:attr:`~app.backend.turns.detector.TurnDetector.far_speech_refused`; metrics).
        transcribe: the session's shared transcription (for requests that carry an utterance):
            ``await transcribe(audio, urgent=...)``; ``urgent`` for words said over a reply, which
            decide whether it stops
            (:meth:`app.backend.duplex.transcripts.TranscriptCache.transcribe`).
        score_text: the shared text end-of-turn scorer (``score(transcript) -> Future[float]``);
            None: the detector reads only word cues.
    """

    def __init__(self, detector: TurnDetector, *, score: Callable[[np.ndarray], Future[float]] | None = None,
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]] | None = None,
                 post: Callable[[Any], Awaitable[None]] | None = None,
                 on_decision: Callable[[str, float | None], None] | None = None,
                 on_far_speech: Callable[[int], None] | None = None,
                 transcribe: Callable[..., Awaitable[str]] | None = None,
                 score_text: Callable[[str], Future[float]] | None = None) -> None:
        self._detector = detector
        self._transcribe = transcribe
        self._score_text = score_text
        self._score = score
        self._spawn = spawn
        self._post = post
        self._on_decision = on_decision
        self._on_far_speech = on_far_speech
        self._far_in_unit = 0  # far-speech stretches ignored since the last unit's metrics
        self._busy_s = 0.0
        self._score_s = 0.0
        self._score_calls = 0
        self._item: str | None = None
        self._deferred: tuple[str, np.ndarray] | None = None
        self._held: tuple[str, np.ndarray] | None = None
        self._last_turn: tuple[str, np.ndarray, int] | None = None
        self._continuing: tuple[str, np.ndarray] | None = None
        self._text_end: tuple[str, float] | None = None  # the last transcript's text score (checks share it)
        self._overlap_at: int | None = None  # the boundary sample whose overlap words are being read
        self._overlap_read_ms: float | None = None  # speech of the utterance when its words were last read
        self._overlap_claimed = False  # the last read of the utterance in progress took the turn
        self._item_over_reply = False

    # ------------------------------------------------------------------ detection
    def feed(self, audio: np.ndarray) -> tuple[list[TurnSignal], int]:
        """Feed float32 16 kHz input audio to the detector (timed for ``unit_metrics``).

        Returns:
            ``(signals, samples consumed)``: fewer than ``audio.size`` samples are consumed when the
            detector stops to wait for a model score (:attr:`waiting`); feed the rest after
            :meth:`resolve`.
        """
        t0 = time.perf_counter()
        far = self._detector.far_speech_refused
        signals = self._detector.feed(audio)
        self._busy_s += time.perf_counter() - t0
        far = self._detector.far_speech_refused - far
        if far:
            log.debug("far speech: %d stretch(es) below the user's level ignored", far)
            self._far_in_unit += far
            if self._on_far_speech is not None:
                self._on_far_speech(far)
        if self._on_decision is not None and any(s.kind == "end_of_turn" for s in signals) and \
                getattr(self._detector, "last_outcome", None) == "cap":
            self._on_decision("cap", None)  # only a capped pause ends a learned turn inside feed()
        req = self._detector.awaiting
        if req is not None:
            self._request(req)
        return signals, audio.size - self._detector.held_back

    @property
    def waiting(self) -> bool:
        """Whether the detector waits for a model score, or the session for the words said over a
        reply (:meth:`read_overlap`); the session then holds its input."""
        return self._detector.awaiting is not None or self._overlap_at is not None

    @property
    def reads_words(self) -> bool:
        """Whether the words said over a reply can be read (:meth:`read_overlap`): the detector
        reads transcripts and the session transcribes."""
        return self._detector.reads_words and self._transcribe is not None and self._spawn is not None \
            and self._post is not None

    def read_overlap(self, at_sample: int, unit_index: int) -> bool:
        """Transcribe the utterance in progress (said over a reply), to decide at input sample
        ``at_sample`` whether it takes the turn; an :class:`OverlapHeard` is posted back and
        :attr:`waiting` holds the input until :meth:`overlap_heard`.

        Returns:
            False when there is nothing to read (not :attr:`reads_words`, or the user is silent).
        """
        utt = self._detector.current_utterance() if self.reads_words else None
        if utt is None or not utt.size:
            return False
        self._overlap_at = at_sample
        self._overlap_read_ms = self._detector.current_speech_ms
        self._spawn(self._run_overlap(at_sample, unit_index, utt, self._overlap_read_ms))
        return True

    async def _run_overlap(self, at_sample: int, unit_index: int, utterance: np.ndarray, speech_ms: float) -> None:
        assert self._transcribe is not None and self._post is not None
        text: str | None = None
        try:
            text = await asyncio.wait_for(self._transcribe(utterance, urgent=True), SCORE_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - unread words: their length decides (see TurnRouter.overlap_heard)
            _warn_failed("transcript of the words said over the reply", exc)
        await self._post(OverlapHeard(at_sample, unit_index, text, speech_ms))

    def overlap_read_due(self, step_ms: float) -> bool:
        """Whether to read the words the user is saying (over a reply) now: they have spoken
        ``step_ms`` of the utterance, or ``step_ms`` more since its words were last read as a
        listener response ("Okay, ..." may go on "... that's enough"), or half that since a read
        that would take the turn asked for a second one (:meth:`confirm_overlap`: the stop waits
        on it). False when the words cannot be read (:attr:`reads_words`), a read or a score is
        out, or the user is silent."""
        if not self.reads_words or self.waiting or not self._detector.user_speaking:
            return False
        last = self._overlap_read_ms
        step = step_ms / 2 if self._overlap_claimed else step_ms
        return self._detector.current_speech_ms - (last or 0.0) >= step

    def note_overlap_read(self) -> None:
        """The words said over the reply were just read otherwise (at a pause, by the detector's
        check): the next :meth:`read_overlap` is due only once more of them has been said
        (:meth:`overlap_read_due`); a read of the same audio again would only repeat this one."""
        self._overlap_read_ms = self._detector.current_speech_ms

    def overlap_heard(self, msg: OverlapHeard) -> bool:
        """The words of :meth:`read_overlap` are back; False for a stale message (dropped)."""
        if msg.at_sample != self._overlap_at:
            return False
        self._overlap_at = None
        return True

    def confirm_overlap(self, takes_turn: bool) -> bool:
        """Record one read's verdict on the utterance in progress (said over a reply).

        A single read mid-utterance is often wrong: Whisper base read the first 300 ms of espeak-ng's
        "Yeah okay sure" as "The air-dower" and of "Mm-hm" 600 ms in as "M.A. Commission", so one
        read that would take the turn only asks for the next (after half a ``barge_in_ms`` more of
        speech, :meth:`overlap_read_due`); the utterance's end is read whole in any case.

        Returns:
            True when this read and the one before it (of the same utterance) both take the turn.
        """
        confirmed = takes_turn and self._overlap_claimed
        self._overlap_claimed = takes_turn
        return confirmed

    def _request(self, req: ScoreRequest) -> None:
        if self._score is None or self._spawn is None or self._post is None:
            raise RuntimeError("the turn detector asks for scores but the session has no scorer")
        self._spawn(self._run_score(req))

    async def _run_score(self, req: ScoreRequest) -> None:
        assert self._score is not None and self._post is not None
        t0 = time.perf_counter()
        text_task = None
        if req.utterance is not None and req.utterance.size and self._transcribe is not None:
            text_task = asyncio.ensure_future(self._transcribe(req.utterance, urgent=self._item_over_reply))
        try:
            p: float | None = await asyncio.wait_for(asyncio.wrap_future(self._score(req.audio)), SCORE_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed or slow score: keep listening (the hard cap ends the turn)
            _warn_failed("end-of-turn score", exc)
            p = None
        text = None
        if text_task is not None:
            try:
                text = await asyncio.wait_for(text_task, SCORE_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - no transcript: the acoustic score decides alone
                _warn_failed("transcript for the end-of-turn cue", exc)
        text_end = None
        if text and self._score_text is not None and any(c.isalnum() for c in text):
            if self._text_end is not None and self._text_end[0] == text:
                text_end = self._text_end[1]  # a later check of the same pause: the words are the same
            else:
                try:
                    text_end = await asyncio.wait_for(asyncio.wrap_future(self._score_text(text)), SCORE_TIMEOUT_S)
                    self._text_end = (text, text_end)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - no text score: the word cues and the acoustic score decide
                    _warn_failed("text end-of-turn score", exc)
        await self._post(Scored(req, p, time.perf_counter() - t0, text, text_end))

    @property
    def speech_ms(self) -> float:
        """Speech in the utterance in progress, ms (0 when the user is silent)."""
        return self._detector.current_speech_ms

    def answers_awaited(self, msg: Scored) -> bool:
        """Whether ``msg`` is the score the detector awaits (else it is stale, e.g. after a reset)."""
        return msg.request is self._detector.awaiting

    def resolve(self, msg: Scored) -> list[TurnSignal]:
        """A score is back: the detector decides (stale scores, e.g. after a reset, are ignored)."""
        if not self.answers_awaited(msg):
            return []
        self._score_calls += 1
        self._score_s += msg.seconds
        signals = self._detector.resolve(msg.probability, msg.text, msg.text_end)
        log.debug("check %d at sample %d: p=%s text=%r text_end=%s -> %s (waited %.0f ms)", msg.request.check,
                  msg.request.at_sample, msg.probability, msg.text, msg.text_end,
                  getattr(self._detector, "last_outcome", None), msg.seconds * 1e3)
        if self._on_decision is not None:
            self._on_decision(getattr(self._detector, "last_outcome", None) or "unknown", msg.seconds)
        return signals

    def set_patience(self, patience: float) -> None:
        """The session's patience setting (``extra_body.turn_patience``)."""
        self._detector.set_patience(patience)

    def take_compute_ms(self) -> float:
        """Detector time since the last call, ms (``session.unit_metrics.compute_ms``)."""
        ms, self._busy_s = self._busy_s * 1000.0, 0.0
        return ms

    def take_score_stats(self) -> tuple[int, float]:
        """Model scores since the last call: ``(count, ms request to result)`` (``unit_metrics``)."""
        out = (self._score_calls, self._score_s * 1000.0)
        self._score_calls, self._score_s = 0, 0.0
        return out

    def take_far_speech(self) -> int:
        """Far-speech stretches ignored since the last call (``unit_metrics.far_speech_ignored``)."""
        n, self._far_in_unit = self._far_in_unit, 0
        return n

    def flush(self) -> TurnSignal | None:
        """End the utterance in progress now (a commit); ``None`` when the user is silent."""
        return self._detector.flush()

    def reset(self) -> None:
        """Forget the utterance in progress (``input_audio_buffer.clear``, a commit of non-speech)."""
        self._detector.reset()

    def speaking_for(self, min_ms: float) -> bool:
        """Whether the user is mid-utterance with at least ``min_ms`` of speech."""
        return self._detector.user_speaking and self._detector.current_speech_ms >= min_ms

    # ------------------------------------------------------------------ items
    def start_item(self, *, over_reply: bool = False) -> str:
        """Speech started (``over_reply``: while a reply was open): a new user item; returns its id."""
        self._item = new_item_id()
        self._item_over_reply = over_reply
        self._overlap_read_ms = None
        self._overlap_claimed = False
        return self._item

    @property
    def began_over_reply(self) -> bool:
        """Whether the utterance in progress began while a reply was open (:meth:`start_item`)."""
        return self._item_over_reply

    def current_item(self) -> str:
        """The id of the item being spoken (a fresh id when speech was never reported)."""
        return self._item or new_item_id()

    def take_item(self) -> str:
        """The id of the item a commit closes; the next commit gets a new one."""
        item, self._item = self.current_item(), None
        return item

    # ------------------------------------------------------------------ a turn that had not ended
    def note_turn_end(self, item_id: str, utterance: np.ndarray, at_sample: int) -> None:
        """A turn ended at input sample ``at_sample`` and is being answered (kept for :meth:`resumes`)."""
        self._last_turn = (item_id, utterance, at_sample)
        self._continuing = None

    def resumes(self, at_sample: int, window_samples: int) -> bool:
        """Whether speech starting at ``at_sample`` continues the last turn: it starts within
        ``window_samples`` of that turn's end, and no other turn came in between."""
        last = self._last_turn
        return window_samples > 0 and last is not None and 0 <= at_sample - last[2] <= window_samples

    def continue_turn(self) -> str:
        """The user goes on: the next utterance joins the last turn's (same item); returns its id."""
        assert self._last_turn is not None
        item_id, utterance, _ = self._last_turn
        self._continuing = (item_id, utterance)
        self._last_turn = None
        self._item_over_reply = False
        self._overlap_read_ms = None
        self._overlap_claimed = False
        self._item = item_id
        return item_id

    def joined(self, utterance: np.ndarray) -> np.ndarray:
        """``utterance`` prefixed with the fragment it continues (unchanged when not continuing)."""
        if self._continuing is None:
            return utterance
        return np.concatenate([self._continuing[1], utterance])

    # ------------------------------------------------------------------ utterances kept for later
    def defer(self, item_id: str, utterance: np.ndarray) -> None:
        """Keep an utterance said over a reply, to answer when the reply ends (joined to an earlier one)."""
        if self._deferred is not None:
            utterance = np.concatenate([self._deferred[1], utterance])
        self._deferred = (item_id, utterance)

    def take_deferred(self) -> tuple[str, np.ndarray] | None:
        """The deferred ``(item_id, utterance)``, if any (forgotten here)."""
        out, self._deferred = self._deferred, None
        return out

    def drop_deferred(self) -> None:
        """A hard interrupt: the words that cut in are answered on their own."""
        self._deferred = None

    def hold(self, item_id: str, utterance: np.ndarray) -> None:
        """Keep a finished utterance for ``response.create`` (``auto_response`` off)."""
        self._held = (item_id, utterance)

    def take_held(self) -> tuple[str, np.ndarray] | None:
        """The held ``(item_id, utterance)``, if any (forgotten here)."""
        out, self._held = self._held, None
        return out
