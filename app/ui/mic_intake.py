"""Mic audio of one WebRTC peer -> the session's appends, and the capture clock of what was sent.

FastRTC hands the handler mic frames at the Opus rate (48 kHz int16, ``(1, N)``); this collaborator
resamples them to 16 kHz float32 with a streaming resampler, gathers them into appends of about
:data:`APPEND_MS`, says which appends close a duplex unit (those carry the unit's camera frames) and
remembers when each appended sample was captured, so server events that name an input position
(``speech_started.audio_start_ms``) can be placed on the handler's monotonic clock. Pure logic:
time is passed in.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from app.constants import FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ, ms_to_samples
from app.media import PcmStreamResampler

APPEND_MS = 20
"""Mic audio gathered per ``AppendArrays``, ms: one WebRTC frame (the session's VAD and turn timer
see each frame as it arrives; 40 ms made the end of a turn 20 ms later on average)."""

APPEND_SLACK = 8
"""Samples an append may lack (a 20 ms frame resamples to 319..321 samples at 16 kHz)."""

CLOCK_MARKS = 2000
"""Appends remembered for :meth:`MicIntake.time_of_sample` (2000 x 20 ms: the last 40 s)."""


class MicIntake:
    """16 kHz input assembly for one peer.

    Args:
        unit_ms: duplex unit length, ms (the server's ``chunk_period_ms``); the first unit is
            :data:`~app.constants.FIRST_UNIT_EXTRA_MS` longer, as the session counts it.
    """

    def __init__(self, unit_ms: int) -> None:
        self.unit_ms = unit_ms
        self._rs: PcmStreamResampler | None = None
        self._buf: list[np.ndarray] = []
        self._buf_n = 0
        self.sent = 0
        """16 kHz samples handed out by :meth:`take` so far."""
        self._unit_k = 0
        self._clock: deque[tuple[int, float]] = deque(maxlen=CLOCK_MARKS)  # (samples sent, monotonic s)

    def push(self, x: np.ndarray, rate: int) -> None:
        """Buffer one mic frame.

        Args:
            x: mono float32 samples in [-1, 1], shape (n,).
            rate: their sample rate, Hz (a change of rate starts a new resampler).
        """
        if self._rs is None or self._rs.from_rate != rate:
            self._rs = PcmStreamResampler(int(rate), INPUT_SAMPLE_RATE_HZ)
        y = self._rs.process(x)
        if y.size:
            self._buf.append(y)
            self._buf_n += y.size

    def keep_last(self, seconds: float) -> None:
        """Drop buffered audio older than the last ``seconds`` (while no session takes it yet)."""
        keep = int(seconds * INPUT_SAMPLE_RATE_HZ)
        while self._buf and self._buf_n - self._buf[0].size >= keep:
            self._buf_n -= self._buf.pop(0).size

    @property
    def ready(self) -> bool:
        """True when about :data:`APPEND_MS` of audio is buffered."""
        return self._buf_n >= ms_to_samples(APPEND_MS, INPUT_SAMPLE_RATE_HZ) - APPEND_SLACK

    def take(self, now: float) -> tuple[np.ndarray, bool] | None:
        """Everything buffered as one append.

        Args:
            now: monotonic time of the newest sample's capture, s.

        Returns:
            ``(audio, closes_unit)``: float32 (n,) at 16 kHz and whether this append reaches the end of
            one or more duplex units (the caller attaches the unit's frames); None when nothing is buffered.
        """
        if not self._buf:
            return None
        audio = np.concatenate(self._buf) if len(self._buf) > 1 else self._buf[0]
        self._buf, self._buf_n = [], 0
        end = self.sent + audio.size
        closes = end >= self._boundary(self._unit_k)
        while end >= self._boundary(self._unit_k):
            self._unit_k += 1
        self.sent = end
        self._clock.append((end, now))
        return audio, closes

    def time_of_sample(self, sample: int) -> float | None:
        """Monotonic time at which input sample ``sample`` (16 kHz) was captured, approximately
        (extrapolated from the oldest mark kept); None when it is newer than anything sent."""
        for cum, t in self._clock:
            if cum >= sample:
                return t - (cum - sample) / INPUT_SAMPLE_RATE_HZ
        return None

    def _boundary(self, k: int) -> int:
        unit = ms_to_samples(self.unit_ms, INPUT_SAMPLE_RATE_HZ)
        return ms_to_samples(FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ) + unit * (k + 1)
