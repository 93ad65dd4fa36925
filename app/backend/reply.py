"""Bookkeeping of one assistant reply inside a duplex session (owned by the session task).

A reply starts when the turn policy reports the user's end of turn (or on commit /
``response.create``); its audio is produced by the pipeline in the background and handed
back to the session as :class:`~app.backend.pipeline.AudioChunk`. The reply becomes a
visible *response* (``response.created``) once the session decides to speak at a unit
boundary, and its chunks are released at the pace of the unit clock.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from app.backend.pipeline import AudioChunk, RequestContext


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
        spoke: ``response.speak`` was sent.
        drain: release all chunks at once (after a commit) instead of pacing.
        speak_sample: input samples received (16 kHz) when its first audio was sent: its
            playback clock runs with the input audio from there (None before).
        chunks: produced but not yet sent.
        producer_done: the pipeline finished producing.
        sent_ms: audio sent so far, ms.
        text_sent: transcript sent so far.
        marks: ``(text_chars, audio_end_ms)`` after each delta.
        task: the producing task.
        confirmed: the user's turn has ended (a reply started on a ``pause`` is speculative
            until then, and nothing of it is shown).
    """

    response_id: str
    epoch: int
    ctx: RequestContext
    user_item_id: str
    transcript: str | None = None
    created: bool = False
    spoke: bool = False
    drain: bool = False
    speak_sample: int | None = None
    chunks: deque[AudioChunk] = field(default_factory=deque)
    producer_done: bool = False
    sent_ms: float = 0.0
    text_sent: str = ""
    marks: list[tuple[int, float]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    boundary_passed: bool = False
    deltas: int = 0
    confirmed: bool = True

    @property
    def item_id(self) -> str:
        """Assistant item id (``item_<response_id>``, as vLLM-Omni)."""
        return f"item_{self.response_id}"


@dataclass
class FinishedResponse:
    """What the session remembers of a finished response for ``playback.ack``.

    Attributes:
        response_id: the response.
        text: its full transcript as sent.
        marks: ``(text_chars, audio_end_ms)`` after each delta.
        turn_id: the session's committed-turn counter when it finished.
        history_index: index of its assistant turn in the history, or None (ack_only, not yet acked).
    """

    response_id: str
    text: str
    marks: list[tuple[int, float]]
    turn_id: int
    history_index: int | None = None


def heard_text(text: str, marks: list[tuple[int, float]], played_ms: float) -> str:
    """The part of ``text`` the user heard after ``played_ms`` of playback.

    Whole deltas up to ``played_ms`` count fully; inside a delta the cut is proportional to
    duration (vLLM-Omni's ``audio_text_marks`` rule), then moved back to a word boundary.

    Args:
        text: the response transcript.
        marks: ``(text_chars, audio_end_ms)`` after each delta, increasing.
        played_ms: playback position, ms.
    """
    prev_chars, prev_ms = 0, 0.0
    for chars, end_ms in marks:
        if played_ms >= end_ms:
            prev_chars, prev_ms = chars, end_ms
            continue
        span = max(end_ms - prev_ms, 1e-6)
        cut = prev_chars + int((chars - prev_chars) * max(0.0, played_ms - prev_ms) / span)
        part = text[:cut]
        if cut < len(text) and cut > prev_chars and " " in part[prev_chars:]:
            part = part[: part.rfind(" ")]
        elif cut < chars:
            part = text[:prev_chars]
        return part.rstrip()
    return text[:prev_chars] if marks else ""
