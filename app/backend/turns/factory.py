"""Choosing a session's turn detector from the deploy config (``turn_policy.detector``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from app.backend.turns.detector import StreamingVad, TurnDetector
from app.backend.turns.learned import LearnedTurnDetector
from app.backend.turns.silence import SilenceTurnDetector

DETECTORS: Final[tuple[str, ...]] = ("silence", "manual", "smart_turn")
"""Detector names ``turn_policy.detector`` accepts: ``silence`` (VAD silence timer, the default);
``manual`` (push-to-talk: speech onsets are still detected for barge-in, the turn ends only on
``input_audio_buffer.commit``); ``smart_turn`` (VAD pauses scored by an end-of-turn model)."""

NEEDS_SCORER: Final[frozenset[str]] = frozenset({"smart_turn"})
"""Detectors that ask a model for end-of-turn scores (the family must offer a scorer)."""


class DetectorUnavailable(RuntimeError):
    """The configured detector cannot be built for this family (the message says why)."""


VadWrapper = Callable[[StreamingVad], StreamingVad]
"""Wraps a session's VAD (e.g. the session's echo gate, which zeroes echo-only windows)."""


def detector_factory(name: str, config: Any,
                     new_vad: Callable[[], StreamingVad] | None) -> Callable[..., TurnDetector]:
    """A factory of fresh per-session detectors: ``factory(wrap_vad=None)``; ``wrap_vad`` (a
    :data:`VadWrapper`) wraps the detector's VAD.

    Args:
        name: one of :data:`DETECTORS`.
        config: the deploy config's ``turn_policy`` section.
        new_vad: builds a streaming VAD (the ``tiny`` Thinker's ``vad_factory``); None if the
            family has none.

    Raises:
        DetectorUnavailable: unknown name, or the family offers no VAD.
    """
    if name not in DETECTORS:
        raise DetectorUnavailable(f"unknown turn detector '{name}' (choose one of {', '.join(DETECTORS)})")
    if new_vad is None:
        raise DetectorUnavailable(f"turn detector '{name}' needs a streaming VAD and the family has none")
    make_vad = new_vad

    def vad(wrap: VadWrapper | None) -> StreamingVad:
        v = make_vad()
        return wrap(v) if wrap is not None else v

    if name == "manual":
        return lambda wrap_vad=None: SilenceTurnDetector(vad(wrap_vad), config, silence_ends_turn=False,
                                                         far_speech_gate=False)
    if name == "smart_turn":
        return lambda wrap_vad=None: LearnedTurnDetector(vad(wrap_vad), config)
    return lambda wrap_vad=None: SilenceTurnDetector(vad(wrap_vad), config)
