"""Turn tracking of a duplex session: the turn detector plus what the session remembers of the
user's utterances (the item being spoken, an utterance deferred until the reply ends, one held
for ``response.create``)."""

from __future__ import annotations

import time
import uuid

import numpy as np

from app.backend.turns.detector import TurnDetector, TurnSignal


def new_item_id() -> str:
    """A fresh conversation item id (``item_<16 hex>``)."""
    return f"item_{uuid.uuid4().hex[:16]}"


class TurnTracker:
    """Owns one session's :class:`~app.backend.turns.detector.TurnDetector` and utterance state.

    Args:
        detector: the session's detector (built from ``turn_policy.detector``).
    """

    def __init__(self, detector: TurnDetector) -> None:
        self._detector = detector
        self._busy_s = 0.0
        self._item: str | None = None
        self._deferred: tuple[str, np.ndarray] | None = None
        self._held: tuple[str, np.ndarray] | None = None

    # ------------------------------------------------------------------ detection
    def feed(self, audio: np.ndarray) -> list[TurnSignal]:
        """Feed float32 16 kHz input audio to the detector (timed for ``unit_metrics``)."""
        t0 = time.perf_counter()
        signals = self._detector.feed(audio)
        self._busy_s += time.perf_counter() - t0
        return signals

    def take_compute_ms(self) -> float:
        """Detector time since the last call, ms (``session.unit_metrics.compute_ms``)."""
        ms, self._busy_s = self._busy_s * 1000.0, 0.0
        return ms

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
    def start_item(self) -> str:
        """Speech started: a new user item; returns its id."""
        self._item = new_item_id()
        return self._item

    def current_item(self) -> str:
        """The id of the item being spoken (a fresh id when speech was never reported)."""
        return self._item or new_item_id()

    def take_item(self) -> str:
        """The id of the item a commit closes; the next commit gets a new one."""
        item, self._item = self.current_item(), None
        return item

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
