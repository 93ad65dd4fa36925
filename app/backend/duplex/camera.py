"""The camera side of a duplex session: frames of the unit in progress, and what the Thinker
last saw in a frame (a one-line description for ``tiny``: colours, shapes, written words, a
clock), refreshed in the background.

How fresh: reads are bounded to one in flight per session. While the user is silent the newest
frame is read at most every :data:`READ_REFRESH_S`; from each speech onset until the turn ends
(:meth:`Camera.turn_ended`, at most :data:`EAGER_READ_S`), the newest frame is read as soon as the
read before it is done and :data:`EAGER_READ_INTERVAL_S` has passed since it began, so a question
asked while showing something new is answered from a frame at most that interval plus two reads
old (the one in flight, then the newest frame's) when the turn ends. The reply takes whatever was
read by then: it never waits for a read. Once the turn has ended the reads slow down again: the
reply has taken what was seen, and a read during it would only compete with the Talker: a listening
camera call cost 0.38 server cores (mic only 0.10) while the eager reads ran on after the reply, and
0.16 since (``results/browser_camera_cost.json``, old and new rows of one run)."""

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

READ_REFRESH_S = 5.0
"""Re-read the camera at most this often while the user is silent, seconds."""

EAGER_READ_S = 15.0
"""After a speech onset, read each new frame as soon as the previous read is done, for this long,
seconds (a spoken question is shorter); the turn's end stops them sooner (:meth:`Camera.turn_ended`)."""

EAGER_READ_INTERVAL_S = 0.9
"""While eager, a read begins at most this often, seconds: a little under one a unit (``UNIT_MS``),
so frames sent one a unit are each read, but not the page's two a unit (``assets/page.js``
``camFps``): a read with OCR takes 339 ms p50 on this machine (``results/vision.json``), and reading
every frame kept a core busy for most of each question."""


@dataclass
class Seen:
    """Posted to the session when a frame has been read: ``text``, what the Thinker saw in it."""

    text: str


class Camera:
    """Frames of the unit in progress and what the Thinker last saw through the camera.

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
        self._eager_until = 0.0
        self._fresh = False
        self.seen_text = ""
        """What the Thinker saw in the last frame read (``""`` before any)."""

    @property
    def room(self) -> int:
        """Frames the unit in progress can still take."""
        return self.max_frames - len(self._unit_frames)

    def add(self, images: list[np.ndarray]) -> None:
        """Attach decoded uint8 RGB frames (base first) to the unit in progress (extra ones dropped);
        the base frame is the newest one to read, even when the unit is full."""
        if not images:
            return
        self._last_frame, self._fresh = images[0], True
        self._unit_frames.extend(images[: max(self.room, 0)])
        self.maybe_read(force=False)

    def take_unit_frames(self) -> list[np.ndarray]:
        """The frames of the unit that just closed (the next unit starts empty)."""
        frames, self._unit_frames = self._unit_frames, []
        return frames

    def maybe_read(self, *, force: bool) -> None:
        """Read the newest frame, if not read yet, in the background (one read in flight): at most
        every :data:`READ_REFRESH_S`; every :data:`EAGER_READ_INTERVAL_S` while eager (from a
        ``force``, a speech onset, until :meth:`turn_ended` or :data:`EAGER_READ_S`); at once when
        ``force``."""
        now = time.monotonic()
        if force:
            self._eager_until = now + EAGER_READ_S
        if not self._vision or not self._fresh or self._busy:
            return  # (a frame already read is not read again)
        wait = EAGER_READ_INTERVAL_S if now < self._eager_until else READ_REFRESH_S
        if not force and now - self._read_at < wait:
            return
        self._busy, self._fresh = True, False
        self._read_at = now
        self._spawn(self._read(self._last_frame))

    def turn_ended(self) -> None:
        """The user's turn ended: the reply takes what was seen by now; reads slow down to
        :data:`READ_REFRESH_S` until the next speech onset."""
        self._eager_until = 0.0

    def on_seen(self, msg: Seen) -> None:
        """A background read finished (runs on the session's task); a frame that came meanwhile is
        read next when eager. A read with no word in it (a clock overlay such as Chromium's fake
        camera draws: "0:00:17:250 345", from a family that returns raw text) is nothing seen: the
        Thinker would take it for what the user shows (a fresh-user trial got "Rome" for France).
        ``tiny``'s describer leaves such lines out of its description itself."""
        self._busy = False
        self.seen_text = msg.text if sum(ch.isalpha() for ch in msg.text) >= 2 else ""
        self.maybe_read(force=False)

    async def _read(self, frame: np.ndarray) -> None:
        try:
            text = await self._pipeline.read_camera(RequestContext(f"{self._id}:camera"), frame)
        except (RequestCancelled, StageError, asyncio.CancelledError):
            text = self.seen_text
        await self._post(Seen(text))
