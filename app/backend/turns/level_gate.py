"""Far speech is not the user: a level gate on speech onsets, relative to the user's own level.

A TV in the room, or a person talking across it, sounds like speech to the VAD. What tells it from
the user is its level: it reaches the mic far below the user's own voice. The gate keeps a
reference level (the user's, once they have spoken; before that, what a browser's automatic gain
control delivers) and refuses a speech onset whose active level is more than ``drop_db`` below it.

Levels are active speech levels: the RMS over the VAD windows judged speech, in dBFS (0 dBFS =
a full-scale square wave of float32 amplitude 1.0).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

ADAPT: Final[float] = 0.3
"""Weight of a finished turn's level in the running reference (dB domain): a user who speaks
softer or louder moves the gate within a few turns, one shout does not."""

HYSTERESIS_DB: Final[float] = 6.0
"""While far speech goes on (an onset was refused and no long silence has passed since), a new
onset must be this much louder than the threshold: the far talker's louder syllables do not get
through, the user's own voice over it (some 20 dB louder) does."""

SILENT_DBFS: Final[float] = -120.0
"""The level reported for digital silence (no energy at all)."""


def active_level_dbfs(energy: float, samples: int) -> float:
    """RMS level of ``samples`` samples whose squares sum to ``energy``, dBFS.

    Args:
        energy: sum of squared float32 samples (full scale 1.0).
        samples: how many samples the energy was summed over (0 gives :data:`SILENT_DBFS`).
    """
    if samples <= 0 or energy <= 0.0:
        return SILENT_DBFS
    return max(SILENT_DBFS, 10.0 * math.log10(energy / samples))


def window_energy(window: np.ndarray) -> float:
    """Sum of squares of one float32 window (for :func:`active_level_dbfs`)."""
    w = np.asarray(window, dtype=np.float32)
    return float(np.dot(w, w))


class SpeechLevelGate:
    """Refuses speech onsets far below the user's level; learns that level from finished turns.

    Args:
        reference_dbfs: the level assumed before the user's first turn, dBFS
            (``turn_policy.speech_level_reference_dbfs``).
        drop_db: an onset more than this below the reference is not the user, dB
            (``turn_policy.far_speech_drop_db``).

    Raises:
        ValueError: ``drop_db`` not positive.
    """

    def __init__(self, reference_dbfs: float, drop_db: float) -> None:
        if not drop_db > 0:
            raise ValueError(f"drop_db must be positive, got {drop_db}")
        self._reference = float(reference_dbfs)
        self._drop = float(drop_db)
        self._far_run = False  # an onset was refused and no long silence has passed since
        self.refused = 0
        """Stretches of far speech heard and ignored so far (refused onsets, counted once per
        stretch: the onsets refused while far speech goes on are not counted again)."""

    @property
    def reference_dbfs(self) -> float:
        """The user's level as learned so far (the configured one before their first turn), dBFS."""
        return self._reference

    @property
    def threshold_dbfs(self) -> float:
        """Onsets quieter than this are refused, dBFS."""
        return self._reference - self._drop

    def admits(self, level_dbfs: float) -> bool:
        """Whether an onset at ``level_dbfs`` (active level of its speech windows) is the user's.
        While far speech goes on (an onset was refused and :meth:`quiet` has not been called since)
        the threshold is :data:`HYSTERESIS_DB` higher."""
        if level_dbfs >= self.threshold_dbfs + (HYSTERESIS_DB if self._far_run else 0.0):
            self._far_run = False
            return True
        self.refused += 0 if self._far_run else 1
        self._far_run = True
        return False

    def quiet(self) -> None:
        """A long silence passed (``end_of_turn_silence_ms``): far speech, if any, is over."""
        self._far_run = False

    def learn(self, level_dbfs: float) -> None:
        """A user turn ended with this active level (dBFS): move the reference towards it."""
        if level_dbfs > SILENT_DBFS:
            self._reference += ADAPT * (float(level_dbfs) - self._reference)
