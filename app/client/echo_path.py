"""A simulated loudspeaker -> room -> microphone path of a client with no echo cancellation.

Used to test that the server does not take the assistant's own voice for the user (issue #10,
part 5): :class:`EchoPath` plays the reply's audio deltas on the client's microphone clock, like
a client that plays each delta when it arrives (or ``lead_ms`` later: its jitter buffer), and
mixes what the room makes of it back into the microphone stream.

Units: the microphone clock is 16 kHz input samples sent so far; levels in dB (amplitude gain
``10 ** (gain_db / 20)`` on the reply audio as sent); the room is an impulse response made by
``sox reverb`` (:data:`ROOMS`), 1 s long, its direct path at 1.0.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ
from app.media import resample

RATE = INPUT_SAMPLE_RATE_HZ

ROOMS: dict[str, tuple[str, ...]] = {
    "dry": (),
    "room": ("reverb", "50", "50", "100"),
    "wet": ("reverb", "50", "50", "100", "0", "0", "6"),
}
"""Rooms by name -> ``sox`` effect: ``dry`` none; ``room`` sox's default reverb (tail -13 dB
under the direct sound, T30 0.34 s); ``wet`` the same with +6 dB wet gain (tail -4 dB, T30 0.53 s)."""

IR_SECONDS = 1.0
"""Length of the room impulse responses, s."""


@cache
def room_impulse_response(room: str) -> np.ndarray:
    """The impulse response of ``room`` (:data:`ROOMS`) at 16 kHz, float32, direct path first.

    Raises:
        KeyError: unknown room.
        RuntimeError: ``sox`` is not installed (needed for every room but ``dry``).
    """
    effect = ROOMS[room]
    if not effect:
        return np.ones(1, np.float32)
    if shutil.which("sox") is None:
        raise RuntimeError("sox is needed to make room impulse responses")
    import soundfile as sf

    n = int((IR_SECONDS + 0.5) * RATE)
    x = np.zeros(n, np.float32)
    x[0] = 0.5
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "impulse.wav", Path(d) / "ir.wav"
        sf.write(src, x, RATE, subtype="FLOAT")
        subprocess.run(["sox", "-V1", str(src), str(dst), *effect], check=True)
        h, _ = sf.read(dst, dtype="float32")
    return (h[: int(IR_SECONDS * RATE)] / 0.5).astype(np.float32)


class EchoPath:
    """Plays received reply audio on the microphone clock and returns it as the room's echo.

    Args:
        gain_db: level of the echo relative to the reply as sent, dB (-20 .. -6 in the tests).
        lead_ms: the client's playback delay after a delta arrives, ms (0 .. 1500).
        room: a key of :data:`ROOMS`.
        output_rate: rate of the reply audio, Hz.
    """

    def __init__(self, *, gain_db: float = -12.0, lead_ms: float = 0.0, room: str = "dry",
                 output_rate: int = OUTPUT_SAMPLE_RATE_HZ) -> None:
        self.gain = float(10.0 ** (gain_db / 20.0))
        self.lead = int(lead_ms * RATE / 1000)
        self.ir = room_impulse_response(room)
        self.output_rate = int(output_rate)
        self._played = np.zeros(0, np.float32)  # loudspeaker signal on the mic clock, from sample 0
        self._cursor = 0
        self._ir_ffts: dict[int, np.ndarray] = {}
        self.started_at: list[int] = []
        """Mic samples at which playback (re)started after being idle."""

    def receive(self, audio: np.ndarray, at_sample: int) -> int:
        """A delta (float32 at the output rate) arrived when the microphone had sent ``at_sample``
        samples; returns the mic sample at which it starts playing."""
        a = resample(np.asarray(audio, np.float32), self.output_rate, RATE)
        if self._cursor > at_sample:
            pos = self._cursor
        else:
            pos = at_sample + self.lead
            self.started_at.append(pos)
        end = pos + a.size
        if end > self._played.size:
            self._played = np.concatenate([self._played, np.zeros(end - self._played.size, np.float32)])
        self._played[pos:end] += a
        self._cursor = end
        return pos

    def drop(self, at_sample: int) -> None:
        """The client flushed its playback queue at mic sample ``at_sample``."""
        if at_sample < self._played.size:
            self._played[at_sample:] = 0.0
        self._cursor = min(self._cursor, at_sample)

    def echo(self, start: int, n: int) -> np.ndarray:
        """The echo that reaches the microphone over samples ``[start, start + n)``."""
        k = self.ir.size
        seg = np.zeros(n + k - 1, np.float32)
        a, b = start - k + 1, start + n
        lo, hi = max(a, 0), min(b, self._played.size)
        if hi > lo:
            seg[lo - a : hi - a] = self._played[lo:hi]
        if not np.any(seg):
            return np.zeros(n, np.float32)
        if k == 1:
            y = seg * self.ir[0]
        else:  # linear convolution by FFT; keep the "valid" part (outputs of [start, start + n))
            size = 1 << int(np.ceil(np.log2(seg.size + k - 1)))
            full = np.fft.irfft(np.fft.rfft(seg, size) * self._ir_fft(size), size)
            y = full[k - 1 : k - 1 + n]
        return (self.gain * y).astype(np.float32)

    def _ir_fft(self, size: int) -> np.ndarray:
        if size not in self._ir_ffts:
            self._ir_ffts[size] = np.fft.rfft(self.ir.astype(np.float64), size)
        return self._ir_ffts[size]

    def mix(self, mic: np.ndarray, start: int) -> np.ndarray:
        """``mic`` (float32 16 kHz, samples ``[start, start + len)``) plus the echo, clipped to [-1, 1]."""
        mic = np.asarray(mic, np.float32)
        return np.clip(mic + self.echo(start, mic.size), -1.0, 1.0)
