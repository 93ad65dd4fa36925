"""A reply's text segments as the Thinker writes them, so speech can start before it is done.

The first segment is cut short (:func:`~app.backend.pipeline.segmenter.first_segment`, a few
words) and handed on as soon as the streamed text settles it: the Talker and Code2Wav voice it
while the Thinker writes the rest. The rest is segmented as usual
(:func:`~app.backend.pipeline.segmenter.segment_text`) once the reply is final, so the
segments always join into exactly the reply that was kept.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from app.backend.pipeline.segmenter import first_segment, segment_text
from app.backend.pipeline.stages import GeneratedReply

log = logging.getLogger(__name__)

EARLY_MIN_TOKENS: Final[int] = 16
"""Below this ``max_tokens`` budget nothing is voiced early: a reply cut that short may be trimmed
back past its first words (see ``finish_reply`` of the tiny Thinker)."""

HOLD_FOR_FIRST_AUDIO_S: Final[float] = 0.3
"""Once the first segment is settled the Thinker pauses (up to this long, s) until the Talker and
Code2Wav have voiced it: on 2 cores the three would otherwise share them and the first audio
would come later (measured in the server: first segment -> its audio 221 ms while the Thinker
ran on, see BENCHMARKS.md). The rest of the reply is still due long before those words end."""

OnText = Callable[[str], bool]
"""Called in the stage thread with the raw text so far; returns False to stop the generation."""


class ReplyStream:
    """Iterate it for ``(segment_text, last)`` pairs; :attr:`reply` holds the reply once it ends.

    Args:
        start: starts the generation with an :data:`OnText` callback (or None: no streaming) and
            returns the final :class:`~app.backend.pipeline.stages.GeneratedReply`.
        early: voice a first segment before the reply is final.
        cancelled: True once the request is cancelled (the generation then stops at its next piece).

    Attributes:
        reply: the final reply (None until the Thinker is done).
        done_at: ``time.perf_counter()`` when it was (None until then).

    The concatenation of the segments is the reply's text, except in one logged case: a reply the
    Thinker trimmed back past its early first segment ends after that segment (a final ``("",
    True)`` pair then tells the consumer that nothing follows it).
    """

    def __init__(self, start: Callable[[OnText | None], Awaitable[GeneratedReply]], *, early: bool,
                 cancelled: Callable[[], bool]) -> None:
        self._start = start
        self._early = early
        self._cancelled = cancelled
        self._raw = ""
        self._changed = asyncio.Event()
        self._voiced = threading.Event()
        self._will_voice = False
        self.reply: GeneratedReply | None = None
        self.done_at: float | None = None

    def will_voice(self) -> None:
        """The consumer voices the segments and calls :meth:`first_voiced`: the Thinker may wait for it
        (a text-only consumer never calls this, so its Thinker never waits)."""
        self._will_voice = True

    def first_voiced(self) -> None:
        """The first segment's audio is ready: the Thinker goes on (any thread)."""
        self._voiced.set()

    def _offer(self, raw: str) -> None:
        self._raw = raw
        self._changed.set()

    async def __aiter__(self) -> AsyncIterator[tuple[str, bool]]:
        loop = asyncio.get_running_loop()

        hold_until: float | None = None  # one hold per reply, not one per token

        def on_text(raw: str) -> bool:  # stage thread
            nonlocal hold_until
            loop.call_soon_threadsafe(self._offer, raw)
            if self._will_voice and not self._voiced.is_set() and first_segment(raw) is not None:
                if hold_until is None:
                    hold_until = time.monotonic() + HOLD_FOR_FIRST_AUDIO_S
                self._voiced.wait(max(0.0, hold_until - time.monotonic()))
            return not self._cancelled()

        task = asyncio.ensure_future(self._start(on_text if self._early else None))
        first: str | None = None
        try:
            while self._early and first is None and not task.done():
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait({task, changed}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                self._changed.clear()
                first = first_segment(self._raw)
                if first is not None:
                    log.debug("first segment %r settled", first)
                    yield first, False
            reply = await task
        finally:
            if not task.done():
                task.cancel()
        self.reply, self.done_at = reply, time.perf_counter()
        text = reply.text
        if first is None:
            rest = segment_text(text) if text else []
        elif (text + " ").startswith(first):
            tail = text[len(first):]
            rest = segment_text(tail) if tail.strip() else []
        else:
            log.warning("reply %r was trimmed past its early first segment %r; it ends there", text, first)
            rest = []
        if first is not None and not rest:
            yield "", True
        for i, seg in enumerate(rest):
            yield seg, i == len(rest) - 1
