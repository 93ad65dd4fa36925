"""The learned end-of-turn detector (``turn_policy.detector: smart_turn``): a VAD finds the pauses,
an end-of-turn model (Smart Turn v3.2 for ``tiny``) decides whether a pause ends the turn.

Policy, on the media clock:

* the VAD state machine of :class:`~app.backend.turns.silence.SilenceTurnDetector` reports speech
  onsets, ``pause`` (the reply is then prepared speculatively) and ``resumed``, but never ends a
  turn by itself;
* while the user is silent inside a turn, the model scores the audio up to the current sample
  at each of ``checks_ms`` of silence (multiplied by the session's patience); a probability at
  or above that check's threshold ends the turn at once (``end_of_turn``), a lower one keeps
  listening until the next check. The thresholds fall as the silence grows: a confident
  "complete" is needed early, a weaker one later;
* after ``max_pause_ms`` of silence (at least :data:`MIN_HARD_CAP_MS`) the turn ends whatever
  the model says, so a turn always ends; ``max_unfinished_pause_ms`` (longer) while the last
  transcript of the pause says the words go on;
* speech coming back (``resumed``) starts the checks of the next pause from the first one;
* with ``smart_turn_text_cues`` each score request carries the utterance so far, and the session
  hands back its transcript with the score (and, where the family has one, a text model's
  probability that the words end there): words that trail off ("... remind me to") or that a
  language model expects to go on ("I would like to book a table") keep the turn open whatever
  the acoustic model says, a finished sentence needs only
  ``smart_turn_sentence_threshold``, and after ``smart_turn_sentence_end_ms`` of silence nothing
  more (:mod:`app.backend.turns.text_cues`).

Fillers ("um", "uh") are voiced: they either resume the turn (the next pause is scored again) or
are too short to, and the model judges an utterance that trails off in a filler incomplete, so a
filler never ends a turn early by itself. The cost per pause is bounded: at most
``len(checks_ms)`` model calls.

While a score is pending the detector takes no more audio (:attr:`awaiting`, :attr:`held_back`):
the session holds its input until :meth:`resolve`, so each decision takes effect exactly at the
sample it was scored at.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from app.backend.turns.detector import (
    ScoreRequest,
    StreamingVad,
    TurnDetector,
    TurnSignal,
)
from app.backend.turns.silence import SilenceTurnDetector
from app.backend.turns.text_cues import (
    ends_on_stranded_preposition,
    ends_sentence,
    unfinished,
)
from app.constants import INPUT_SAMPLE_RATE_HZ

MIN_HARD_CAP_MS: Final[float] = 2000.0
"""A pause this long always ends the turn, whatever the patience (ms)."""

MODEL_WINDOW_SAMPLES: Final[int] = 8 * INPUT_SAMPLE_RATE_HZ
"""Audio handed to the model per score: the last 8 s (Smart Turn v3.2 reads 8 s at 16 kHz)."""

PATIENCE_RANGE: Final[tuple[float, float]] = (0.5, 3.0)
"""Bounds of the per-session patience (``extra_body.turn_patience``)."""


class LearnedTurnDetector(TurnDetector):
    """VAD pauses + a model's end-of-turn probability.

    Args:
        vad: the streaming VAD (one per session).
        config: the deploy config's ``turn_policy`` (VAD settings, ``smart_turn_checks_ms``,
            ``smart_turn_thresholds``, ``max_pause_ms``).
        model_window_samples: audio per score request, samples.

    Raises:
        ValueError: checks and thresholds of different lengths, or not increasing checks.
    """

    def __init__(self, vad: StreamingVad, config: Any, *, model_window_samples: int = MODEL_WINDOW_SAMPLES) -> None:
        self._vad_turns = SilenceTurnDetector(vad, config, silence_ends_turn=False, report_pauses=True)
        self._checks: Sequence[float] = tuple(float(x) for x in config.smart_turn_checks_ms)
        self._thresholds: Sequence[float] = tuple(float(x) for x in config.smart_turn_thresholds)
        if len(self._checks) != len(self._thresholds) or not self._checks:
            raise ValueError("smart_turn_checks_ms and smart_turn_thresholds need the same, non-zero length")
        if any(b <= a for a, b in itertools.pairwise(self._checks)):
            raise ValueError("smart_turn_checks_ms must increase")
        self._cap_ms = max(float(config.max_pause_ms), MIN_HARD_CAP_MS)
        self._unfinished_cap_ms = max(float(getattr(config, "max_unfinished_pause_ms", self._cap_ms)), self._cap_ms)
        self._words_go_on = False  # the last scored transcript of this pause trails off
        self._text_cues = bool(config.smart_turn_text_cues)
        self._sentence_threshold = float(config.smart_turn_sentence_threshold)
        end_ms = config.smart_turn_sentence_end_ms
        self._sentence_end_ms = float("inf") if end_ms is None else float(end_ms)
        self._completion_threshold = float(getattr(config, "smart_turn_completion_threshold", 0.0))
        self._confident_text = float(getattr(config, "smart_turn_confident_text", 1.0))
        self._confident_end_ms = float(getattr(config, "smart_turn_confident_end_ms", float("inf")))
        self._window = int(model_window_samples)
        self._patience = 1.0
        self._check = 0
        self._awaiting: ScoreRequest | None = None
        self._held = 0
        self._pause_utterance: np.ndarray | None = None
        self._text: str | None = None  # the transcript the last check read, for the end_of_turn signal
        self.last_outcome: str | None = None
        """How the last scored check or cap ended: ``complete``, ``incomplete``, ``failed``, ``cap``."""

    # ------------------------------------------------------------------ TurnDetector
    @property
    def user_speaking(self) -> bool:
        return self._vad_turns.user_speaking

    @property
    def current_speech_ms(self) -> float:
        return self._vad_turns.current_speech_ms

    @property
    def awaiting(self) -> ScoreRequest | None:
        return self._awaiting

    @property
    def held_back(self) -> int:
        return self._held

    @property
    def reads_words(self) -> bool:
        return self._text_cues

    def current_utterance(self) -> np.ndarray | None:
        return self._vad_turns.current_utterance()

    @property
    def far_speech_refused(self) -> int:
        return self._vad_turns.far_speech_refused

    def set_patience(self, patience: float) -> None:
        lo, hi = PATIENCE_RANGE
        self._patience = min(max(float(patience), lo), hi)

    def feed(self, audio: np.ndarray) -> list[TurnSignal]:
        """Feed float32 16 kHz audio; may stop at a check (then :attr:`awaiting` is set).

        Raises:
            RuntimeError: a score is still awaited.
        """
        if self._awaiting is not None:
            raise RuntimeError("a score is awaited: resolve() it before feeding more audio")
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        inner = self._vad_turns
        signals: list[TurnSignal] = []
        pos = 0
        while pos < audio.size:
            step = inner.window_samples - inner.pending_samples  # samples that complete the next VAD window
            piece = audio[pos : pos + step]
            pos += piece.size
            for sig in inner.feed(piece):
                if sig.kind in ("speech_started", "resumed"):
                    self._check = 0
                    self._pause_utterance = None
                    self._words_go_on = False
                    self._text = None
                elif sig.kind == "pause":
                    self._pause_utterance = sig.utterance  # the same samples the speculative reply transcribes
                signals.append(sig)
            if piece.size < step or not inner.user_speaking:
                continue
            silence = inner.silence_ms
            cap = self._unfinished_cap_ms if self._words_go_on else self._cap_ms
            if silence >= cap * max(self._patience, 1.0):
                signals.append(self._end())
                self.last_outcome = "cap"
            elif self._check < len(self._checks) and silence >= self._checks[self._check] * self._patience:
                utterance = None
                if self._text_cues:
                    utterance = self._pause_utterance if self._pause_utterance is not None else \
                        inner.current_utterance()
                self._awaiting = ScoreRequest(inner.position, inner.recent_audio(self._window), self._check, utterance)
                self._held = audio.size - pos
                return signals
        self._held = 0
        return signals

    def resolve(self, probability: float | None, text: str | None = None,
                text_end: float | None = None) -> list[TurnSignal]:
        """The awaited score: ``probability`` that the turn is complete (None: scoring failed, keep
        listening), the transcript of the utterance so far (None: no text cue) and the text
        end-of-turn model's probability that its words end there (None: not scored).

        With a transcript, an utterance that trails off (:func:`~app.backend.turns.text_cues.unfinished`:
        "... remind me to"; with a ``text_end`` score, not a question closed on a stranded preposition,
        :func:`~app.backend.turns.text_cues.ends_on_stranded_preposition`: "Where are you from?"), or whose
        ``text_end`` is below ``smart_turn_completion_threshold``
        ("I would like to book a table"), keeps listening whatever the acoustic model says (the
        hard cap still ends it); one that ends a sentence needs only ``smart_turn_sentence_threshold``,
        and none at all after ``smart_turn_sentence_end_ms`` of silence (``smart_turn_confident_end_ms``
        when ``text_end`` >= ``smart_turn_confident_text``). Silences are the configured ones times
        the patience (the checks are scaled as they are reached).

        Raises:
            RuntimeError: nothing is awaited.
        """
        req = self._awaiting
        if req is None:
            raise RuntimeError("no score is awaited")
        self._awaiting, self._held = None, 0
        self._text = text if text is not None else self._text
        threshold = self._thresholds[req.check]
        # A question closed on a stranded preposition ("Where are you from?") is left to the text
        # model when it scored it: the word list alone kept such questions open to the cap.
        by_words = text is not None and unfinished(text) and not (
            text_end is not None and ends_on_stranded_preposition(text))
        self._words_go_on = text is not None and (
            by_words or (text_end is not None and text_end < self._completion_threshold))
        if self._words_go_on:
            threshold = float("inf")
        elif text is not None and ends_sentence(text):
            threshold = min(threshold, self._sentence_threshold)
            end_ms = self._sentence_end_ms
            if text_end is not None and text_end >= self._confident_text:
                end_ms = min(end_ms, self._confident_end_ms)  # the words plainly end: wait less
            if self._checks[req.check] >= end_ms:
                threshold = 0.0  # a finished sentence and this much silence: over, whatever the model says
        if probability is not None and probability >= threshold:
            self.last_outcome = "complete"
            return [self._end()]
        self.last_outcome = "incomplete" if probability is not None else "failed"
        self._check = req.check + 1
        return []

    def flush(self) -> TurnSignal | None:
        self._awaiting, self._held, self._check, self._text = None, 0, 0, None
        return self._vad_turns.flush()

    def reset(self) -> None:
        self._awaiting, self._held, self._check, self._text = None, 0, 0, None
        self._vad_turns.reset()

    def _end(self) -> TurnSignal:
        self._check = 0
        self._words_go_on = False
        self._pause_utterance = None
        text, self._text = self._text, None
        sig = self._vad_turns.flush()
        assert sig is not None  # only called while the user is in a turn
        return dataclasses.replace(sig, text=text)
