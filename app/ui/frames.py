"""Camera frames -> per-unit images: one base frame plus, with frame stacking, one composite.

This is the browser side of MiniCPM-o's high-refresh video (vLLM-Omni ``--stack-frames N``):
for every duplex unit the handler attaches the newest frame (the base) and, when ``N > 1``, a
composite of ``N - 1`` sub-frames captured inside the unit, tiled by
:func:`app.media.stack_frames`. Pure logic; time is passed in.
"""

from __future__ import annotations

import numpy as np

from app.constants import VISION_TILE_PX
from app.media import fit_within, stack_frames

MAX_FRAME_SIDE = VISION_TILE_PX
"""Frames are downscaled so their longer side is at most one vision tile (448 px) before use:
the model slices images at this size anyway, and smaller frames keep OCR fast on CPU."""

MAX_STACK = 5
"""Largest frame-stacking N the page offers."""


class UnitFrames:
    """Collects the camera frames of the unit in progress.

    Args:
        unit_ms: duplex unit length, ms.
        max_side: downscale limit for stored frames, pixels.
    """

    def __init__(self, unit_ms: int, *, max_side: int = MAX_FRAME_SIDE) -> None:
        self.unit_ms = unit_ms
        self.max_side = max_side
        self.stack_n = 1
        self.latest: np.ndarray | None = None
        self._subs: list[np.ndarray] = []
        self._last_sub_at = -1e9
        self.given: tuple[np.ndarray, ...] = ()
        """What the model was given with the last unit (the page's preview shows it)."""

    def set_stack(self, n: int) -> None:
        """Frames per unit (1 = base only; N > 1 adds a composite of N-1 sub-frames)."""
        self.stack_n = max(1, min(MAX_STACK, int(n)))

    def add(self, rgb: np.ndarray, now: float) -> None:
        """Record one camera frame (uint8 RGB (h, w, 3), a strided view allowed) seen at monotonic
        time ``now``; only the frames kept for the model are copied."""
        self.latest = rgb
        if self.stack_n <= 1:
            return
        spacing = self.unit_ms / 1000.0 / self.stack_n
        if now - self._last_sub_at >= spacing * 0.8:
            self._last_sub_at = now
            self._subs.append(np.ascontiguousarray(fit_within(rgb, self.max_side)))
            # keep only the newest window of sub-frames (bounded memory)
            if len(self._subs) > 2 * self.stack_n:
                self._subs = self._subs[-2 * self.stack_n :]

    def take_unit(self) -> tuple[np.ndarray, ...]:
        """The images for the unit that closes now: ``(base,)`` or ``(base, composite)``; ``()`` if no camera."""
        if self.latest is None:
            return ()
        base = np.ascontiguousarray(fit_within(self.latest, self.max_side))
        subs, self._subs = self._subs, []
        if self.stack_n <= 1 or not subs:
            self.given = (base,)
            return self.given
        want = self.stack_n - 1
        if len(subs) > want:  # evenly spread over the unit, oldest first
            idx = np.linspace(0, len(subs) - 1, want).round().astype(int)
            subs = [subs[i] for i in idx]
        self.given = (base, stack_frames(subs))
        return self.given

    def reset(self) -> None:
        """Forget every frame (camera switched off)."""
        self.latest = None
        self._subs = []
