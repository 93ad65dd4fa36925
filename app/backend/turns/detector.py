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
    """

    kind: Literal["speech_started", "pause", "resumed", "end_of_turn"]
    at_sample: int
    utterance: np.ndarray | None = None
    speech_ms: float = 0.0


class TurnDetector(ABC):
    """Per-session end-of-turn detection, fed every append (one instance per session)."""

    @abstractmethod
    def feed(self, audio: np.ndarray) -> list[TurnSignal]:
        """Consume float32 16 kHz mono input audio; return the signals it produced, in order."""

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
