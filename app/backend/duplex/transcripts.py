"""One transcription per utterance, shared by the reply runner and the turn tracker.

The speculative reply transcribes the utterance at a pause; the learned turn detector wants the
same transcript for its text cue. Both ask this cache, keyed by the utterance's samples, so the
Thinker transcribes each utterance once. The transcription runs as the session's background work
with a request context of its own: a reply that is dropped does not cancel a transcript that the
turn detector still waits for.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np

from app.backend.pipeline.stages import BatchFigures, BatchShare
from app.backend.pipeline.workers import Pipeline, RequestContext

KEEP = 8
"""Transcripts kept (the newest utterances)."""


class TranscriptCache:
    """``await cache.transcribe(audio)`` -> the Thinker's transcript of float32 16 kHz ``audio``.

    Args:
        session_id: for request ids.
        pipeline: the shared pipeline (``Pipeline.transcribe``).
        spawn: runs a coroutine as the session's background work.
        context: the conversation's previous user turn, read at each call and given to the
            Thinker with the audio (``Pipeline.transcribe``'s ``context``); None: none.
    """

    def __init__(self, session_id: str, pipeline: Pipeline,
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
                 context: Callable[[], str] | None = None) -> None:
        self._id = session_id
        self._pipeline = pipeline
        self._spawn = spawn
        self._context = context
        self._tasks: OrderedDict[bytes, asyncio.Task[str]] = OrderedDict()
        self._n = 0
        self._share = BatchShare()  # this session's transcripts in the ASR stage's batches

    def take_batch(self) -> BatchFigures:
        """What this session's transcripts got of the cross-session ASR batches since the last call
        (``steps``: transcripts run; zeros where the family transcribes one at a time)."""
        return self._share.take()

    async def transcribe(self, audio: np.ndarray, *, urgent: bool = False) -> str:
        """The transcript (stripped) of ``audio``; the same utterance is transcribed once;
        ``urgent``: the session holds its input for it (``Pipeline.transcribe``'s ``urgent``).

        Raises:
            StageError, RequestCancelled: the Thinker failed or the session closed.
        """
        context = self._context() if self._context is not None else ""
        h = hashlib.blake2b(np.ascontiguousarray(audio, np.float32).tobytes(), digest_size=16)
        h.update(context.encode("utf-8", "surrogatepass"))
        key = h.digest()
        task = self._tasks.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            self._n += 1
            task = self._spawn(self._run(audio, context, f"{self._id}:asr{self._n}", urgent))
            self._tasks[key] = task
            while len(self._tasks) > KEEP:
                self._tasks.popitem(last=False)
        return await asyncio.shield(task)

    async def _run(self, audio: np.ndarray, context: str, request_id: str, urgent: bool) -> str:
        ctx = RequestContext(request_id, batch_share=self._share)
        return (await self._pipeline.transcribe(ctx, audio, context, urgent=urgent)).strip()
