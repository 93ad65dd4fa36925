"""The three-stage pipeline: one worker per stage, bounded inboxes, batching across callers.

Each :class:`StageWorker` owns one thread (model code is blocking) and one bounded
``asyncio.Queue``. It takes the first waiting item, then up to ``max_num_seqs - 1`` more
that are already queued, drops items whose request was cancelled, and runs the batch in
its thread. Every item fails or succeeds on its own: an exception inside a stage fails
that item's request, never the worker or another caller.

A watchdog guards each call (``stages[].stage_timeout_s``): a call that has run longer fails
its item with :class:`StageError` (``timed out``), the worker's thread is abandoned and a fresh
one takes the rest of the batch and the queued work, so other sessions keep going. Python cannot
kill a thread: the abandoned one keeps its stack (8 MiB reserved, little of it resident), any
memory and locks it holds (a model whose native code hangs inside a lock blocks the fresh thread
too when it calls the same model), and a core if it spins. While it runs the stage reports
itself ``degraded`` (``/health``); when it returns, its late result is dropped and the stage is
healthy again. ``StageWorker.fault`` is the test seam for this: a callable run in the worker
thread before each call (off by default).

:class:`Pipeline` joins the workers: ``transcribe``/``read_image``/``generate`` (Thinker),
and :meth:`Pipeline.speak`, which streams text segments through the Talker and Code2Wav
with a bounded connector between them so the Talker works on segment i+1 while Code2Wav
decodes segment i.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.backend.metrics import EngineMetrics
from app.backend.pipeline.gather import GATHER_WINDOW_S, GatheringWorker
from app.backend.pipeline.reply_stream import EARLY_MIN_TOKENS, OnText, ReplyStream
from app.backend.pipeline.requests import RequestCancelled, RequestContext, StageError
from app.backend.pipeline.segmenter import split_at_fractions
from app.backend.pipeline.stages import (
    Code2WavStream,
    ContextLengthExceeded,
    GeneratedReply,
    ModelFamily,
    SamplingParams,
    ThinkerPrompt,
)
from app.media import drop_leading_silence

log = logging.getLogger(__name__)


async def in_passing_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking model code in a thread of its own that exits when ``fn`` returns.

    Use it for one-off model calls outside the stage workers (loading, warm-up). A long-lived
    thread (``asyncio.to_thread``'s default executor) that once ran llama.cpp or CTranslate2
    keeps its OpenMP team alive; libgomp then manages more threads than there are cores and
    throttles the busy-wait of *every* team, the Thinker's included. Measured on this 2-core
    machine (Gemma 270M, 2 threads, one 166-token prompt): 238 ms per reply when only one thread
    ever ran the model, 380 ms once a second live thread had run it once. A thread that has
    exited takes its team with it.

    Returns:
        What ``fn(*args)`` returns; its exception propagates.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-once") as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


@dataclass
class _Item:
    ctx: RequestContext
    payload: Any
    future: asyncio.Future[Any]
    enqueued_at: float = field(default_factory=time.perf_counter)


@dataclass
class _BatchRun:
    """A batch as its thread runs it: which item is in progress and since when; ``abandoned``
    tells a thread the watchdog gave up on to run nothing more."""

    items: Sequence[_Item]
    index: int = -1
    started_at: float | None = None
    abandoned: threading.Event = field(default_factory=threading.Event)


async def _off_stage(future: Future[Any], what: str, timeout_s: float | None = None) -> Any:
    """Await a Thinker call the family runs off the stage (``read_camera``, ``transcribe_urgent``,
    ``write_reply``); ``timeout_s``: the stage's watchdog limit (None: none).

    Raises:
        StageError: the call failed (a bad frame, the engine's load error) or outlived ``timeout_s``:
            this request fails as a stage call would, the session goes on. The family's exception
            is its ``__cause__`` (a route tells ``ContextLengthExceeded``, a request error, from a fault).
    """
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError as exc:
        raise StageError("thinker", f"{what} timed out after {timeout_s:g} s") from exc
    except Exception as exc:
        raise StageError("thinker", f"{what} failed: {type(exc).__name__}: {exc}") from exc


class StageWorker:
    """One stage: a bounded inbox, one thread, batches up to ``max_num_seqs``.

    Args:
        name: ``thinker``, ``talker`` or ``code2wav`` (metric label).
        fn: runs one payload in the worker thread and returns its result.
        max_num_seqs: largest batch (vLLM-Omni ``stages[].max_num_seqs``).
        inbox_size: bound of the inbox; a full inbox makes ``submit`` wait.
        metrics: where queue wait, compute time and batch sizes go.
        timeout_s: watchdog limit of one call, seconds (None: no watchdog).

    Attributes:
        fault: test seam, off (None) by default: ``fault(ctx, payload)`` runs in the worker thread
            before each call; what it raises fails that item as the stage would, a sleep in it hangs
            the thread as a stuck native call would.
        abandoned_threads: threads the watchdog gave up on that have not returned yet.
        timeouts: calls failed by the watchdog so far.
    """

    def __init__(
        self, name: str, fn: Callable[[Any], Any], *, max_num_seqs: int, inbox_size: int, metrics: EngineMetrics,
        timeout_s: float | None = None,
    ) -> None:
        self.name = name
        self._fn = fn
        self.max_num_seqs = max_num_seqs
        self.timeout_s = timeout_s
        self._inbox: asyncio.Queue[_Item] = asyncio.Queue(maxsize=inbox_size)
        self._executor = self._new_executor()
        self._metrics = metrics
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.fault: Callable[[RequestContext, Any], None] | None = None
        self.abandoned_threads = 0
        self.timeouts = 0

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stage-{self.name}")

    @property
    def degraded(self) -> str | None:
        """Why the stage is degraded (a thread abandoned by the watchdog still runs), or None."""
        if not self.abandoned_threads:
            return None
        return (f"{self.abandoned_threads} worker thread(s) abandoned after a call exceeded "
                f"stage_timeout_s={self.timeout_s:g} s are still running")

    @property
    def alive(self) -> bool:
        """True while the worker loop runs."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the worker loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"stage-{self.name}")

    async def stop(self) -> None:
        """Stop the loop and the thread; pending items fail with ``RequestCancelled``."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # the loop had already failed; /health reported it
                log.debug("stage %s loop ended with an error", self.name, exc_info=True)
        while not self._inbox.empty():
            item = self._inbox.get_nowait()
            if not item.future.done():
                item.future.set_exception(RequestCancelled(item.ctx.request_id))
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, ctx: RequestContext, payload: Any) -> Any:
        """Queue one item and wait for its result.

        Raises:
            RequestCancelled: ``ctx`` was cancelled before the stage ran the item.
            StageError: the stage raised while running it, or the worker is dead.
        """
        if ctx.cancelled:
            raise RequestCancelled(ctx.request_id)
        if not self.alive:
            raise StageError(self.name, "worker is not running")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._inbox.put(_Item(ctx, payload, fut))
        return await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                batch = [await self._inbox.get()]
                while len(batch) < self.max_num_seqs and not self._inbox.empty():
                    batch.append(self._inbox.get_nowait())
                live = []
                for item in batch:
                    if item.ctx.cancelled or item.future.done():
                        if not item.future.done():
                            item.future.set_exception(RequestCancelled(item.ctx.request_id))
                        continue
                    live.append(item)
                if not live:
                    continue
                now = time.perf_counter()
                for item in live:
                    self._metrics.queue_wait_s.labels(self.name).observe(now - item.enqueued_at)
                self._metrics.batch_size.labels(self.name).observe(len(live))
                await self._run_watched(live, loop)
                self._metrics.compute_s.labels(self.name).observe(time.perf_counter() - now)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the loop itself broke: /health reports it
            self.error = exc
            log.exception("stage worker %s died", self.name)
            raise

    async def _run_watched(self, items: Sequence[_Item], loop: asyncio.AbstractEventLoop) -> None:
        """Run ``items`` in the worker thread under the watchdog (see the module docstring)."""
        while items:
            run = _BatchRun(items)
            done = loop.run_in_executor(self._executor, self._run_batch, run, loop)
            while True:
                finished, _ = await asyncio.wait([done], timeout=self._poll_s())
                if finished:
                    done.result()  # a BaseException out of the thread ends the loop, as before
                    return
                started = run.started_at
                if self.timeout_s is not None and started is not None and \
                        time.perf_counter() - started > self.timeout_s:
                    break
            run.abandoned.set()
            hung = items[run.index]
            self.timeouts += 1
            self.abandoned_threads += 1
            done.add_done_callback(self._abandoned_returned)
            self._executor.shutdown(wait=False)
            self._executor = self._new_executor()
            log.error("stage %s: call for %s exceeded %.1f s; thread abandoned, fresh worker started",
                      self.name, hung.ctx.request_id, self.timeout_s)
            self._settle(hung, False, StageError(self.name, f"timed out after {self.timeout_s:g} s (watchdog)"))
            items = items[run.index + 1:]

    def _poll_s(self) -> float | None:
        return None if self.timeout_s is None else min(0.05, self.timeout_s / 4)

    def _abandoned_returned(self, _fut: asyncio.Future[Any]) -> None:
        self.abandoned_threads -= 1
        log.warning("stage %s: an abandoned worker thread returned (its result was dropped)", self.name)

    def _run_batch(self, run: _BatchRun, loop: asyncio.AbstractEventLoop) -> None:
        """Run a batch in the worker thread, releasing each item's result as soon as it is ready."""
        for i, item in enumerate(run.items):
            if run.abandoned.is_set():  # the watchdog gave up on this thread: the rest runs elsewhere
                return
            run.index, run.started_at = i, time.perf_counter()
            if item.ctx.cancelled:  # cancelled while earlier items of the batch ran
                loop.call_soon_threadsafe(self._settle, item, False, RequestCancelled(item.ctx.request_id))
                continue
            try:
                if self.fault is not None:
                    self.fault(item.ctx, item.payload)
                result = self._fn(item.payload)
                if not run.abandoned.is_set():
                    loop.call_soon_threadsafe(self._settle, item, True, result)
            except Exception as exc:  # one item's failure is that item's alone
                if isinstance(exc, ContextLengthExceeded):  # the request's fault: no traceback
                    log.info("stage %s item refused: %s", self.name, exc)
                else:
                    log.exception("stage %s item failed", self.name)
                if not run.abandoned.is_set():
                    err = StageError(self.name, f"{type(exc).__name__}: {exc}")
                    err.__cause__ = exc  # (the route tells a request error, ContextLengthExceeded, from a fault)
                    loop.call_soon_threadsafe(self._settle, item, False, err)
        run.started_at = None

    def _settle(self, item: _Item, ok: bool, value: Any) -> None:
        if item.future.done():
            return
        if ok:
            item.future.set_result(value)
        else:
            if isinstance(value, StageError):
                self._metrics.errors.labels(self.name).inc()
            item.future.set_exception(value)


TAIL_PAD_S = 0.02
"""Silence that carries a reply's last words when Code2Wav made no audio for them, seconds."""


@dataclass
class AudioChunk:
    """Speech for one Code2Wav chunk of a text segment, as it leaves Code2Wav.

    Attributes:
        index: segment index within the response (0-based; a segment's chunks share it).
        text: the part of the segment's text this chunk speaks (its transcript delta; may be empty).
        audio: float32 mono at the family's output rate (24 kHz).
        final: last chunk of the response.
        compute_s: Talker+Code2Wav time spent on this chunk (the Talker's on a segment's first), seconds.
    """

    index: int
    text: str
    audio: np.ndarray
    final: bool
    compute_s: float


class Pipeline:
    """Thinker -> Talker -> Code2Wav over three :class:`StageWorker`.

    Args:
        family: the loaded model family.
        max_num_seqs: per-stage batch limits, ``(thinker, talker, code2wav)``.
        inbox_sizes: per-stage inbox bounds.
        codec_chunk_frames: Talker->Code2Wav chunk size, codec frames.
        metrics: engine metrics.
        timeouts_s: per-stage watchdog limits, seconds (``stages[].stage_timeout_s``; None: none).
    """

    def __init__(
        self,
        family: ModelFamily,
        *,
        max_num_seqs: tuple[int, int, int],
        inbox_sizes: tuple[int, int, int],
        codec_chunk_frames: int,
        metrics: EngineMetrics,
        timeouts_s: tuple[float | None, float | None, float | None] = (None, None, None),
    ) -> None:
        self.family = family
        self.metrics = metrics
        self.codec_chunk_frames = codec_chunk_frames
        fns = (self._thinker_fn, self._talker_fn, self._code2wav_fn)
        self.thinker, self.talker, self.code2wav = (
            StageWorker(name, fn, max_num_seqs=max_num_seqs[i], inbox_size=inbox_sizes[i], metrics=metrics,
                        timeout_s=timeouts_s[i])
            for i, (name, fn) in enumerate(zip(("thinker", "talker", "code2wav"), fns, strict=True)))
        th = family.thinker
        self.asr: GatheringWorker | None = None
        """Transcripts of several sessions in one call, where the family batches them
        (``Thinker.max_transcript_batch`` > 1); None: transcripts go through the Thinker stage."""
        if th.max_transcript_batch > 1:
            self.asr = GatheringWorker("asr", th.transcribe_batch, max_batch=th.max_transcript_batch,
                                       window_s=GATHER_WINDOW_S, metrics=metrics, timeout_s=timeouts_s[0])
        self.workers: tuple[StageWorker | GatheringWorker, ...] = (
            self.thinker, self.talker, self.code2wav, *((self.asr,) if self.asr is not None else ()))

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Start the stage workers."""
        for w in self.workers:
            w.start()

    async def stop(self) -> None:
        """Stop the stage workers."""
        for w in self.workers:
            await w.stop()

    def health(self) -> dict[str, bool]:
        """``{stage: alive}`` for every stage."""
        return {w.name: w.alive for w in self.workers}

    def degraded(self) -> dict[str, str]:
        """``{stage: why}`` for every stage running on a fresh thread while an abandoned one still runs."""
        return {w.name: w.degraded for w in self.workers if w.degraded}

    # -- stage functions (worker threads) -------------------------------------------
    def _thinker_fn(self, payload: tuple[str, Any]) -> Any:
        kind, arg = payload
        th = self.family.thinker
        if kind == "transcribe":
            audio, context = arg
            return th.transcribe(audio, context)
        if kind == "read_image":
            return th.read_image(arg)
        prompt, params, on_text = arg
        return th.generate_reply(prompt, params, on_text)

    def _talker_fn(self, text: str) -> np.ndarray:
        tokens = self.family.talker.synthesize(text)
        self.metrics.tokens.labels("talker").inc(len(tokens))
        return tokens

    @staticmethod
    def _code2wav_fn(payload: tuple[Code2WavStream, np.ndarray, bool]) -> np.ndarray:
        stream, tokens, final = payload
        return stream.push(tokens, final)

    # -- Thinker ----------------------------------------------------------------------
    async def transcribe(self, ctx: RequestContext, audio: np.ndarray, context: str = "", *,
                         urgent: bool = False) -> str:
        """ASR of float32 16 kHz mono ``audio``; ``""`` for empty input; ``context``: the previous user
        turn (:meth:`~app.backend.pipeline.stages.Thinker.transcribe`); ``urgent``: words the session
        holds its input for: first in the ASR stage's queue where the family batches transcripts
        (:attr:`asr`), else off the Thinker stage's queue where the family can
        (:meth:`~app.backend.pipeline.stages.Thinker.transcribe_urgent`).

        Raises:
            StageError: the transcription failed; RequestCancelled: ``ctx`` was cancelled.
        """
        if audio.size == 0:
            return ""
        if ctx.cancelled:
            raise RequestCancelled(ctx.request_id)
        if self.asr is not None:
            x = np.array(audio, dtype=np.float32, copy=True)  # (queued a moment: the caller may reuse its buffer)
            return await self.asr.submit(ctx, (x, context), urgent=urgent)
        future = self.family.thinker.transcribe_urgent(audio, context) if urgent else None
        if future is None:
            return await self.thinker.submit(ctx, ("transcribe", (audio, context)))
        return await _off_stage(future, "transcription")

    async def read_image(self, ctx: RequestContext, image: np.ndarray) -> str:
        """What the Thinker sees in uint8 RGB ``image`` (h, w, 3): :meth:`~app.backend.pipeline.stages.Thinker.read_image`."""
        return await self.thinker.submit(ctx, ("read_image", image))

    async def read_camera(self, ctx: RequestContext, image: np.ndarray) -> str:
        """:meth:`read_image` of a camera frame, off the Thinker stage where the family can read in the
        background (:meth:`~app.backend.pipeline.stages.Thinker.read_camera`), so a read in flight
        never holds up a reply's transcript; else through the stage.

        Raises:
            StageError: the read failed.
        """
        future = self.family.thinker.read_camera(image)
        if future is None:
            return await self.read_image(ctx, image)
        return await _off_stage(future, "camera read")

    async def generate(self, ctx: RequestContext, prompt: ThinkerPrompt, params: SamplingParams) -> str:
        """The assistant's reply text to ``prompt``."""
        return (await self.generate_reply(ctx, prompt, params)).text

    async def generate_reply(self, ctx: RequestContext, prompt: ThinkerPrompt, params: SamplingParams) -> GeneratedReply:
        """The assistant's reply to ``prompt`` and why it ended (``finish_reason`` ``stop`` | ``length``)."""
        return await self._generate(ctx, prompt, params, None)

    async def _generate(self, ctx: RequestContext, prompt: ThinkerPrompt, params: SamplingParams,
                        on_text: OnText | None) -> GeneratedReply:
        if ctx.cancelled:
            raise RequestCancelled(ctx.request_id)
        future = self.family.thinker.write_reply(prompt, params, on_text, ctx.batch_share,
                                                 lambda: not ctx.speculative)
        if future is None:
            reply = await self.thinker.submit(ctx, ("generate", (prompt, params, on_text)))
        else:  # written beside other sessions' replies (the family batches them)
            reply = await _off_stage(future, "reply", self.thinker.timeout_s)
        self.metrics.tokens.labels("thinker").inc(max(1, len(reply.text) // 4))
        return reply

    def stream_reply(self, ctx: RequestContext, prompt: ThinkerPrompt, params: SamplingParams) -> ReplyStream:
        """The reply to ``prompt`` as text segments while the Thinker writes it (see :class:`ReplyStream`;
        :meth:`speak` voices them as they come). Nothing runs until it is iterated."""
        return ReplyStream(lambda on_text: self._generate(ctx, prompt, params, on_text),
                           early=params.max_tokens >= EARLY_MIN_TOKENS, cancelled=lambda: ctx.cancelled)

    # -- Talker + Code2Wav --------------------------------------------------------------
    async def speak(self, ctx: RequestContext,
                    segments: Sequence[str] | AsyncIterable[tuple[str, bool]]) -> AsyncIterator[AudioChunk]:
        """Stream speech for ``segments``: one :class:`AudioChunk` per Code2Wav chunk, in order.

        ``segments`` is either the whole list of texts, or ``(text, last)`` pairs that arrive while
        the reply is written (a :class:`ReplyStream`); a ``("", True)`` pair only closes the
        stream (its chunk carries the held-back tail of the audio and no text). The Talker runs
        ahead of Code2Wav through a bounded connector (2 segments). Codec tokens go to Code2Wav
        in chunks of ``codec_chunk_frames``, and each chunk's audio goes out as soon as Code2Wav
        has made it (not once the whole segment is voiced), with the part of the segment's text it
        speaks (:func:`~app.backend.pipeline.segmenter.split_at_fractions`). The last push of the
        response is ``final`` so Code2Wav flushes its look-ahead. Every chunk yielded has audio
        (but in a reply with no audio at all): the words of a chunk Code2Wav held back go with the
        next chunk, and last words with no audio of their own get :data:`TAIL_PAD_S` of silence,
        so a client gets one transcript delta per audio delta. The first chunk with audio starts at
        its first sound (:func:`~app.media.drop_leading_silence`).

        Raises:
            RequestCancelled: ``ctx`` was cancelled.
            StageError: a stage failed.
        """
        if isinstance(segments, Sequence):
            segments = _pairs(list(segments))
        elif isinstance(segments, ReplyStream):
            segments.will_voice()
        connector: asyncio.Queue[Any] = asyncio.Queue(maxsize=2)
        stream = self.family.code2wav.new_stream()
        rate = self.family.capabilities.output_sample_rate_hz
        pending, pending_s, voiced = "", 0.0, False  # words of chunks with no audio yet; any audio out

        async def talk() -> None:
            try:
                i = 0
                async for text, last in segments:
                    t0 = time.perf_counter()
                    tokens = await self.talker.submit(ctx, text) if text.strip() else np.zeros(0, np.int32)
                    await connector.put((i, text, tokens, last, time.perf_counter() - t0))
                    i += 1
            except (RequestCancelled, StageError) as exc:
                await connector.put(exc)
                return
            await connector.put(None)

        talker_task = asyncio.create_task(talk())
        try:
            while True:
                got = await connector.get()
                if got is None:
                    break
                if isinstance(got, Exception):
                    raise got
                i, text, tokens, last_seg, talk_s = got
                async with contextlib.aclosing(self._voice_segment(ctx, stream, i, text, tokens, last_seg,
                                                                   talk_s)) as chunks:
                    async for chunk in chunks:
                        words, compute_s, audio = pending + chunk.text, pending_s + chunk.compute_s, chunk.audio
                        if not audio.size:
                            if not (chunk.final and words):
                                pending, pending_s = words, compute_s  # no audio yet: its words wait for some
                                continue
                            if voiced:  # the reply's last words came with no audio of their own
                                audio = np.zeros(round(TAIL_PAD_S * rate), np.float32)
                        if audio.size and not voiced:
                            audio = drop_leading_silence(audio, rate)  # the listener would only wait through it
                            if isinstance(segments, ReplyStream):
                                segments.first_voiced()
                        voiced = voiced or bool(audio.size)
                        pending, pending_s = "", 0.0
                        yield AudioChunk(chunk.index, words, audio, chunk.final, compute_s)
                if last_seg:
                    break
        finally:
            if not talker_task.done():
                talker_task.cancel()
            try:
                await talker_task
            except (asyncio.CancelledError, RequestCancelled, StageError):
                pass

    async def _voice_segment(self, ctx: RequestContext, stream: Code2WavStream, index: int, text: str,
                             tokens: np.ndarray, last_seg: bool, talk_s: float) -> AsyncIterator[AudioChunk]:
        """One segment's codec tokens through Code2Wav, ``codec_chunk_frames`` at a time: each chunk
        is yielded as soon as it is made, with the part of ``text`` it speaks (its audio may be empty:
        Code2Wav's look-ahead held it back; :meth:`speak` then hands its words on with the next)."""
        step = self.codec_chunk_frames
        starts = list(range(0, len(tokens), step)) or [0]
        n = max(len(tokens), 1)
        texts = split_at_fractions(text, [min(s + step, n) / n for s in starts])
        seg_samples, seg_s = 0, talk_s
        for j, s in enumerate(starts):
            t0 = time.perf_counter()
            final = last_seg and j == len(starts) - 1
            audio = await self.code2wav.submit(ctx, (stream, tokens[s : s + step], final))
            c2w_s = time.perf_counter() - t0
            seg_s += c2w_s
            seg_samples += audio.size
            yield AudioChunk(index, texts[j], audio.astype(np.float32, copy=False), final,
                             c2w_s + (talk_s if j == 0 else 0.0))
        if seg_samples:
            rate = self.family.capabilities.output_sample_rate_hz
            self.metrics.audio_s.inc(seg_samples / rate)
            self.metrics.rtf.observe(seg_s / (seg_samples / rate))


async def _pairs(texts: list[str]) -> AsyncIterator[tuple[str, bool]]:
    for i, text in enumerate(texts):
        yield text, i == len(texts) - 1
