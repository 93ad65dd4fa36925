"""One assistant reply in progress inside a duplex session (owned by the reply runner).

A reply starts when the turn tracker reports the user's end of turn (or a pause, speculatively;
or on commit / ``response.create``); the pipeline produces its audio in the background and hands
it back as :class:`~app.backend.pipeline.workers.AudioChunk` s. The reply becomes a visible
*response* (``response.created``) once the session decides to speak, and its chunks are released
at the pace of its :class:`~app.backend.duplex.playback.ResponseClock`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from app.backend.duplex.playback import ResponseClock
from app.backend.pipeline.workers import AudioChunk, RequestContext


@dataclass
class Reply:
    """One reply in progress.

    Attributes:
        response_id: id of the response it becomes (allocated up front, never reused).
        epoch: session epoch it belongs to; a newer epoch fences it.
        ctx: cancellation handle shared with the pipeline.
        user_item_id: the user item it answers.
        transcript: ASR of the user utterance (None until known).
        created: ``response.created`` was sent.
        drain: release all chunks at once (after a commit) instead of pacing.
        chunks: produced but not yet sent.
        producer_done: the pipeline finished producing.
        finish_reason: ``stop``, or ``length`` when ``max_tokens`` cut the reply text.
        clock: what it has released and its playback clock.
        task: the producing task.
        boundary_passed: the moment to open it has come (end of turn, or the next unit boundary).
        deltas: deltas sent.
        confirmed: the user's turn has ended (a reply started on a ``pause`` is speculative
            until then, and nothing of it is shown).
    """

    response_id: str
    epoch: int
    ctx: RequestContext
    user_item_id: str
    transcript: str | None = None
    created: bool = False
    drain: bool = False
    chunks: deque[AudioChunk] = field(default_factory=deque)
    producer_done: bool = False
    finish_reason: str = "stop"
    clock: ResponseClock = field(default_factory=ResponseClock)
    task: asyncio.Task[None] | None = None
    boundary_passed: bool = False
    deltas: int = 0
    confirmed: bool = True

    @property
    def item_id(self) -> str:
        """Assistant item id (``item_<response_id>``, as vLLM-Omni)."""
        return f"item_{self.response_id}"
