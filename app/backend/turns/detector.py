"""The turn-detector interface: who holds the floor, decided from the user's audio.

A session owns one :class:`TurnDetector` and feeds it every piece of input audio (float32,
16 kHz mono) in order. The detector answers with :class:`TurnSignal` s stamped on the media
clock (samples of session input audio), so the same input gives the same turns whatever the
pacing of the appends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np


@dataclass(frozen=True)
class TurnSignal:
    """What a :class:`TurnDetector` noticed in the audio it was fed.

    Attributes:
        kind: ``speech_started``; ``pause`` (a short silence: the turn may be ending, so a reply
            can be prepared speculatively); ``resumed`` (speech came back after a ``pause``);
            ``end_of_turn`` (the user finished an utterance).
        at_sample: position in the session's input audio, samples at 16 kHz.
        utterance: for ``pause`` and ``end_of_turn``, the utterance audio (float32 16 kHz, padded).
        speech_ms: for ``pause`` and ``end_of_turn``, how much of it the VAD judged speech, ms.
        text: for ``end_of_turn``, the transcript of the utterance that the decision read (the
            learned detector's text cue), else None.
    """

    kind: Literal["speech_started", "pause", "resumed", "end_of_turn"]
    at_sample: int
    utterance: np.ndarray | None = None
    speech_ms: float = 0.0
    text: str | None = None


@dataclass(frozen=True)
class ScoreRequest:
    """A detector's request for a model score before it consumes more audio.

    Attributes:
        at_sample: the media position the score is for (input samples at 16 kHz); the decision
            the score leads to takes effect at this position.
        audio: float32 16 kHz mono, the input audio that ends at ``at_sample`` (as much as the
            model reads).
        check: which check of the pause this is (0 = the first).
        utterance: the utterance so far (float32 16 kHz, as a ``pause`` signal carries it), for a
            transcript-based cue; None when the detector uses none.
    """

    at_sample: int
    audio: np.ndarray
    check: int = 0
    utterance: np.ndarray | None = None


class TurnDetector(ABC):
    """Per-session end-of-turn detection, fed every append (one instance per session).

    A detector that asks a model (:class:`ScoreRequest`) stops consuming audio at the position the
    score is for: :attr:`awaiting` is set and :attr:`held_back` says how many samples at the end of
    the last :meth:`feed` argument it did not take. The session then holds its input (and its unit
    clock) until :meth:`resolve` has the score, and feeds the held samples again. So every decision
    is stamped on the media clock and the same input gives the same turns at any pacing or load.
    """

    @abstractmethod
    def feed(self, audio: np.ndarray) -> list[TurnSignal]:
        """Consume float32 16 kHz mono input audio; return the signals it produced, in order."""

    @property
    def awaiting(self) -> ScoreRequest | None:
        """The score this detector waits for before it takes more audio (None: it waits for nothing)."""
        return None

    @property
    def held_back(self) -> int:
        """Samples at the end of the last :meth:`feed` argument not consumed (non-zero only while awaiting)."""
        return 0

    def resolve(self, probability: float | None, text: str | None = None,
                text_end: float | None = None) -> list[TurnSignal]:
        """Hand back the awaited score (None: scoring failed) and, when the request carried an
        utterance, its transcript (None: none) and a text model's probability that its words end
        there (None: not scored); returns the signals it decides.

        Raises:
            RuntimeError: nothing is awaited.
        """
        raise RuntimeError(f"{type(self).__name__} requests no scores")

    def set_patience(self, patience: float) -> None:
        """How long to wait for a slow speaker: 1 = the default, 2 = twice as long (no-op by default)."""

    @property
    def reads_words(self) -> bool:
        """Whether this detector's decisions read the transcript (its score requests carry the
        utterance); the session then reads the words said over a reply too (False by default)."""
        return False

    def current_utterance(self) -> np.ndarray | None:
        """The utterance in progress, float32 16 kHz (None when the user is silent or unknown)."""
        return None

    @property
    def far_speech_refused(self) -> int:
        """Stretches of speech ignored so far as far below the user's own level (a TV, a distant
        talker; ``turn_policy.far_speech_drop_db``), one per stretch; 0 for a detector without that gate."""
        return 0

    @property
    @abstractmethod
    def user_speaking(self) -> bool:
        """True while the user is mid-utterance."""

    @property
    @abstractmethod
    def current_speech_ms(self) -> float:
        """Speech in the utterance in progress, ms (0 when the user is silent)."""

    @abstractmethod
    def flush(self) -> TurnSignal | None:
        """End the utterance in progress now (on commit); ``None`` if there is none."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the utterance in progress (``input_audio_buffer.clear``)."""


class StreamingVad(Protocol):
    """A streaming voice-activity detector over 16 kHz float32 audio."""

    window_samples: int

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Speech probability per completed window (leftovers carried to the next call)."""

    def reset(self) -> None:
        """Forget state."""
