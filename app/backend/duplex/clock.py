"""The unit clock of a duplex session: input audio received, and which unit it falls in.

Media time is the session's input audio (16 kHz samples), not wall time: unit 0 closes once
``FIRST_UNIT_EXTRA_MS + unit_ms`` of input has arrived (1030 ms for 1 s units, vLLM-Omni's
protocol reference), unit k at that plus ``k * unit_ms``.
"""

from __future__ import annotations

from app.constants import FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ, ms_to_samples


class UnitClock:
    """Samples received and the unit in progress (mutated only by the session owner).

    Args:
        unit_ms: unit length, ms (``duplex_session.chunk_period_ms``).
    """

    def __init__(self, unit_ms: int) -> None:
        self.unit_ms = int(unit_ms)
        self._unit = ms_to_samples(self.unit_ms, INPUT_SAMPLE_RATE_HZ)
        self._first = ms_to_samples(FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ) + self._unit
        self.samples = 0
        """16 kHz input samples received so far."""
        self.unit_index = 0
        """The unit in progress (closed units: ``0 .. unit_index - 1``)."""

    @property
    def next_boundary(self) -> int:
        """Sample position at which the unit in progress closes."""
        return self._first + self.unit_index * self._unit

    def advance(self, n: int) -> None:
        """``n`` more input samples arrived (never past :attr:`next_boundary`: split pieces first)."""
        self.samples += int(n)

    def close_unit(self) -> int:
        """Close the unit in progress; returns its index."""
        k = self.unit_index
        self.unit_index += 1
        return k

    def ms_since(self, sample: int) -> float:
        """Media time elapsed since input sample ``sample``, ms."""
        return (self.samples - sample) * 1000.0 / INPUT_SAMPLE_RATE_HZ
