"""What travels with one request through the stages: :class:`RequestContext` (identity,
cancellation, the session's batch counters, speculative or awaited), and the two ways a stage
call ends badly for it: :class:`StageError` and :class:`RequestCancelled`."""

from __future__ import annotations

from dataclasses import dataclass

from app.backend.pipeline.stages import BatchShare


class StageError(RuntimeError):
    """A stage failed one item. ``stage`` names it (``thinker``/``asr``/``talker``/``code2wav``)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage} stage failed: {message}")
        self.stage = stage


class RequestCancelled(Exception):
    """The request was cancelled (barge-in, client gone) before this stage ran it."""


@dataclass
class RequestContext:
    """Identity and cancellation of one request travelling through the stages.

    Attributes:
        request_id: unique id (chat completion id or ``<session>:<response>``).
        cancelled: set once; every stage drops the request's pending work.
    """

    request_id: str
    cancelled: bool = False
    batch_share: BatchShare | None = None
    """The session's counters of what this request got of a cross-session batch (a
    :class:`~app.backend.pipeline.stages.BatchShare`: a reply's Thinker steps, where the family
    batches replies; a transcript's ASR batch and queue wait, where it batches those); it also tells
    a gathering stage which session asks (:mod:`~app.backend.pipeline.gather`). None: not counted."""
    speculative: bool = False
    """A reply prepared at a pause, before the user's turn has ended (nobody waits for it yet): a
    family that batches replies admits the ones a user waits for first. May change while it runs."""

    def cancel(self) -> None:
        """Cancel every pending and future stage item of this request."""
        self.cancelled = True
