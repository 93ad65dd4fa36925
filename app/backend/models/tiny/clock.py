"""Read an analogue clock face, for :mod:`app.backend.models.tiny.vision`.

A clock face is a light disc (found by OpenCV's ``HoughCircles``, ``HOUGH_GRADIENT_ALT``) with
dark hands that start at its centre. For every direction (1-degree steps, clockwise from 12
o'clock) the *radial darkness profile* is the length of the unbroken dark run outward from the
centre, as a fraction of the radius. Hands are the peaks of that profile; tick marks and
numerals are not (they do not touch the centre). The longest peak is the minute hand; the
other (or the same, when the hands overlap) the hour hand, whose angle also carries the minutes
(it moves 0.5 degree a minute), so the hour is rounded with the minutes taken off.

Accuracy (tests/unit/test_vision.py, faces drawn with Pillow at 640x480, then JPEG at quality
70): within 2 minutes for hands at least 3 px wide at 320 px. A face without two clear hands,
or with dark filled areas (a pie, a photo), gives no reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import cv2
import numpy as np

MIN_RADIUS_FRACTION: Final[float] = 0.12
"""Smallest clock face radius, as a fraction of the frame's smaller side."""

DARK_MARGIN: Final[int] = 70
"""A pixel is dark (part of a hand) when its grey value is this much below the face's median."""

MIN_MINUTE_HAND: Final[float] = 0.45
"""The minute hand reaches at least this fraction of the radius from the centre."""

MAX_DARK_DIRECTIONS: Final[float] = 0.12
"""At most this fraction of the directions may hold long dark runs (else: not a clock face)."""


@dataclass(frozen=True)
class ClockReading:
    """``hour`` (1-12) and ``minute`` (0-59) read from a face centred at ``(x, y)`` with radius
    ``r`` (pixels of the frame it was read in)."""

    hour: int
    minute: int
    x: float
    y: float
    r: float

    @property
    def text(self) -> str:
        """E.g. ``"3:05"``."""
        return f"{self.hour}:{self.minute:02d}"

    @property
    def box(self) -> tuple[int, int, int, int]:
        """The face's bounding box ``(x, y, w, h)`` in pixels."""
        return (int(self.x - self.r), int(self.y - self.r), int(2 * self.r), int(2 * self.r))


def _profile(grey: np.ndarray, x: float, y: float, r: float) -> np.ndarray | None:
    """Dark-run length (fraction of ``r``) for each of 360 directions, or ``None`` for a dark face."""
    h, w = grey.shape
    radii = np.linspace(0.0, 0.92 * r, max(24, int(r)))
    angles = np.deg2rad(np.arange(360.0))
    xs = x + np.outer(np.sin(angles), radii)
    ys = y - np.outer(np.cos(angles), radii)
    xs = np.clip(np.rint(xs).astype(np.int32), 0, w - 1)
    ys = np.clip(np.rint(ys).astype(np.int32), 0, h - 1)
    samples = grey[ys, xs].astype(np.int16)
    face = float(np.median(samples[:, radii > 0.3 * r]))
    if face < 120:
        return None  # not a light face
    dark = samples < face - DARK_MARGIN
    # the run may start past a small centre cap of another colour: skip the inner 8 %
    start = int(np.searchsorted(radii, 0.08 * r))
    dark[:, :start] = True
    run = np.where(dark.all(axis=1), len(radii), np.argmin(dark, axis=1))
    return radii[np.clip(run, 1, len(radii)) - 1] / r


def _peaks(profile: np.ndarray) -> list[tuple[float, float]]:
    """``(angle_deg, length)`` of the profile's separate peaks, longest first."""
    base = float(np.median(profile))
    high = profile > base + 0.15
    if not high.any():
        return []
    peaks: list[tuple[float, float]] = []
    shift = int(np.argmin(high)) if not high.all() else 0  # start outside a peak (wrap-around)
    rolled = np.roll(high, -shift)
    lengths = np.roll(profile, -shift)
    i = 0
    while i < 360:
        if not rolled[i]:
            i += 1
            continue
        j = i
        while j < 360 and rolled[j]:
            j += 1
        seg = lengths[i:j]
        # the hand's direction: the middle of the directions that reach within 2 % of the peak
        top = np.flatnonzero(seg >= seg.max() - 0.02)
        angle = (shift + i + float(top.mean())) % 360.0
        peaks.append((angle, float(seg.max())))
        i = j
    peaks.sort(key=lambda p: -p[1])
    return peaks


def read_clock(grey: np.ndarray) -> ClockReading | None:
    """The time shown by the largest readable analogue clock face in a grey frame.

    Args:
        grey: uint8 ``(h, w)``.

    Returns:
        The reading, or ``None`` when no light disc with hands from its centre is found.
    """
    h, w = grey.shape
    side = min(h, w)
    circles = cv2.HoughCircles(
        cv2.GaussianBlur(grey, (5, 5), 1.5), cv2.HOUGH_GRADIENT_ALT, dp=1.5, minDist=side * 0.2,
        param1=150, param2=0.8, minRadius=int(MIN_RADIUS_FRACTION * side), maxRadius=int(0.5 * side),
    )
    if circles is None:
        return None
    for x, y, r in sorted(circles[0], key=lambda c: -c[2]):
        profile = _profile(grey, float(x), float(y), float(r))
        if profile is None or float(np.mean(profile > 0.3)) > MAX_DARK_DIRECTIONS:
            continue
        peaks = [p for p in _peaks(profile) if p[1] >= 0.2]
        if not peaks or peaks[0][1] < MIN_MINUTE_HAND or len(peaks) > 3:
            continue
        minute_angle = peaks[0][0]
        hour_angle = peaks[1][0] if len(peaks) > 1 else minute_angle  # one peak: the hands overlap
        minute = round(minute_angle / 6.0) % 60
        hour = round((hour_angle - minute * 0.5) / 30.0) % 12
        return ClockReading(12 if hour == 0 else int(hour), int(minute), float(x), float(y), float(r))
    return None


def angle_of(hour: int, minute: int) -> tuple[float, float]:
    """Hand angles (degrees clockwise from 12) of ``hour:minute``: ``(hour_hand, minute_hand)``."""
    return ((hour % 12) * 30.0 + minute * 0.5, minute * 6.0)

