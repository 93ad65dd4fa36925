"""The camera side of a duplex session: frames of the unit in progress, and the text the
Thinker last read in a frame (OCR for ``tiny``), refreshed in the background."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.backend.pipeline.workers import (
    Pipeline,
    RequestCancelled,
    RequestContext,
    StageError,
)

OCR_REFRESH_S = 5.0
"""Re-read the camera at most this often while the user is silent, seconds."""


@dataclass
class Seen:
    """Posted to the session when a frame has been read: ``text`` found in it."""

    text: str


class Camera:
    """Frames of the unit in progress and the last text read from the camera.

    Args:
        session_id: for request ids.
        pipeline: reads frames (``Pipeline.read_camera``: in the background where the family can).
        vision: the family reads frames (else nothing is read).
        max_frames_per_unit: frames a unit holds (base + composite).
        spawn: runs a coroutine as the session's background work.
        post: hands a result back to the session's inbox.
    """

    def __init__(self, session_id: str, pipeline: Pipeline, *, vision: bool, max_frames_per_unit: int,
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
                 post: Callable[[Any], Awaitable[None]]) -> None:
        self._id = session_id
        self._pipeline = pipeline
        self._vision = vision
        self.max_frames = int(max_frames_per_unit)
        self._spawn = spawn
        self._post = post
        self._unit_frames: list[np.ndarray] = []
        self._last_frame: np.ndarray | None = None
        self._busy = False
        self._read_at = 0.0
        self.seen_text = ""
        """Text read in the last frame read (``""`` before any)."""

    @property
    def room(self) -> int:
        """Frames the unit in progress can still take."""
        return self.max_frames - len(self._unit_frames)

    def add(self, images: list[np.ndarray]) -> None:
        """Attach decoded uint8 RGB frames (base first) to the unit in progress (extra ones dropped)."""
        images = images[: max(self.room, 0)]
        if not images:
            return
        if not self._unit_frames:
            self._last_frame = images[0]
        self._unit_frames.extend(images)
        self.maybe_read(force=False)

    def take_unit_frames(self) -> list[np.ndarray]:
        """The frames of the unit that just closed (the next unit starts empty)."""
        frames, self._unit_frames = self._unit_frames, []
        return frames

    def maybe_read(self, *, force: bool) -> None:
        """Read the newest frame in the background, at most every :data:`OCR_REFRESH_S` unless ``force``."""
        if not self._vision or self._last_frame is None or self._busy:
            return
        if not force and time.monotonic() - self._read_at < OCR_REFRESH_S:
            return
        self._busy = True
        self._read_at = time.monotonic()
        frame, self._last_frame = self._last_frame, None
        self._spawn(self._read(frame))

    def on_seen(self, msg: Seen) -> None:
        """A background read finished (runs on the session's task). A read with no word in it (a
        clock overlay such as Chromium's fake camera draws: "0:00:17:250 345") is nothing seen: the
        Thinker would take it for what the user shows (a fresh-user trial got "Rome" for France)."""
        self._busy = False
        self.seen_text = msg.text if sum(ch.isalpha() for ch in msg.text) >= 2 else ""

    async def _read(self, frame: np.ndarray) -> None:
        try:
            text = await self._pipeline.read_camera(RequestContext(f"{self._id}:ocr"), frame)
        except (RequestCancelled, StageError, asyncio.CancelledError):
            text = self.seen_text
        await self._post(Seen(text))
