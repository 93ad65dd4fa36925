"""A stage that runs work of several sessions as one batched call: :class:`GatheringWorker`.

Where a model's batched call costs less than its calls one by one (Whisper's encoder and decoder
on CTranslate2: ~1.6-1.9x for 4 utterances on 2 cores, ``benchmarks/bench_batching.py``), the
requests that are ready at the same time, from different sessions, are run together:

* **gathering**: the worker takes the first request in priority order; when another session has
  asked for this stage within :data:`ACTIVE_S` it waits up to ``window_s`` from that request's
  arrival for more (at most ``max_batch``), otherwise (one session alone) it runs it at once: a
  session on its own never waits for a window;
* **priorities**: requests a user waits for (``urgent``: words said over a reply, which decide
  whether it stops) go before the others, then the oldest first; an urgent request also makes the
  whole batch run at the family's urgent priority;
* **cancel between batches**: a request cancelled while queued (its
  :class:`~app.backend.pipeline.workers.RequestContext`) is dropped before the next batch forms
  and fails with ``RequestCancelled``; a running batch is not interrupted (one call);
* **metrics**: every batch's size and each request's queue wait go to the engine's
  ``omni_stage_batch_size`` / ``omni_stage_queue_wait_seconds`` (label = the stage name), and
  each request's to its session's :class:`~app.backend.pipeline.stages.BatchShare` when its
  context carries one (``session.unit_metrics``);
* **watchdog**: a batched call that runs past ``timeout_s`` fails its requests with
  ``StageError``; its thread is abandoned (as :class:`~app.backend.pipeline.workers.StageWorker`
  does) and a fresh one runs the next batches.

The batched function must give each request the result it would get alone (the family's
promise; for ``tiny`` ASR see :meth:`~app.backend.models.tiny.asr.WhisperAsr.transcribe_batch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from app.backend.metrics import EngineMetrics
from app.backend.pipeline.requests import RequestCancelled, RequestContext, StageError

log = logging.getLogger(__name__)

GATHER_WINDOW_S: Final[float] = 0.01
"""The pipeline's gathering window, seconds (issue #27: at most 10-20 ms, none for a session alone)."""

ACTIVE_S: Final[float] = 5.0
"""A session that asked for the stage within this many seconds counts as active: only then does a
request wait a window for it (a session alone never waits)."""


@dataclass
class _Request:
    ctx: RequestContext
    payload: Any
    urgent: bool
    future: asyncio.Future[Any]
    source: object
    enqueued_at: float = field(default_factory=time.perf_counter)


class GatheringWorker:
    """One stage whose ready requests run as one batched call (module docstring).

    Args:
        name: stage name (metric label), e.g. ``asr``.
        batch_fn: ``batch_fn(payloads, urgent)`` -> one result per payload, in order; runs in the
            worker's thread. A result that is an ``Exception`` fails its request alone (as
            ``StageError``); an exception raised fails every request of the batch.
        max_batch: most requests in one call (>= 1).
        window_s: longest wait for more requests once another session is active, seconds (>= 0).
        metrics: engine metrics (batch sizes, queue waits, compute time, errors).
        timeout_s: watchdog limit of one batched call, seconds (None: none).

    Raises:
        ValueError: ``max_batch`` < 1 or ``window_s`` < 0.
    """

    def __init__(self, name: str, batch_fn: Callable[[list[Any], bool], Sequence[Any]], *, max_batch: int,
                 window_s: float, metrics: EngineMetrics, timeout_s: float | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        self.name = name
        self.max_batch = max_batch
        self.window_s = window_s
        self.timeout_s = timeout_s
        self._fn = batch_fn
        self._metrics = metrics
        self._pending: list[_Request] = []
        self._arrived: asyncio.Event | None = None
        self._last_seen: dict[int, tuple[object, float]] = {}  # id(source) -> (source, when it last asked)
        self._executor = self._new_executor()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.timeouts = 0
        self.abandoned_threads = 0

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"stage-{self.name}")

    # ------------------------------------------------------------------ lifecycle
    @property
    def alive(self) -> bool:
        """True while the worker loop runs."""
        return self._task is not None and not self._task.done()

    @property
    def degraded(self) -> str | None:
        """Why the stage is degraded (a thread abandoned by the watchdog still runs), or None."""
        if not self.abandoned_threads:
            return None
        return (f"{self.abandoned_threads} worker thread(s) abandoned after a call exceeded "
                f"stage_timeout_s={self.timeout_s:g} s are still running")

    def start(self) -> None:
        """Start the worker loop on the running event loop."""
        self._arrived = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"stage-{self.name}")

    async def stop(self) -> None:
        """Stop the loop; queued requests fail with ``RequestCancelled``."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # the loop had already failed; /health reported it
                log.debug("stage %s loop ended with an error", self.name, exc_info=True)
        for req in self._pending:
            if not req.future.done():
                req.future.set_exception(RequestCancelled(req.ctx.request_id))
        self._pending.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ requests
    async def submit(self, ctx: RequestContext, payload: Any, *, urgent: bool = False) -> Any:
        """Queue one request and wait for its result.

        Args:
            ctx: the request (its ``batch_share``, when set, names its session and gets its figures).
            payload: what ``batch_fn`` gets for it.
            urgent: a user waits on it: it goes before the others.

        Raises:
            RequestCancelled: ``ctx`` was cancelled before its batch ran.
            StageError: the batched call raised or timed out, or the worker is not running.
        """
        if ctx.cancelled:
            raise RequestCancelled(ctx.request_id)
        if not self.alive or self._arrived is None:
            raise StageError(self.name, "worker is not running")
        source = ctx.batch_share if ctx.batch_share is not None else ctx
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        req = _Request(ctx, payload, urgent, fut, source)
        self._last_seen[id(source)] = (source, req.enqueued_at)
        self._pending.append(req)
        self._arrived.set()
        return await fut

    def _others_active(self, source: object, now: float) -> bool:
        for key, (_s, t) in list(self._last_seen.items()):
            if now - t > ACTIVE_S:
                del self._last_seen[key]
        return any(s is not source for s, _t in self._last_seen.values())

    def _ordered(self) -> list[_Request]:
        return sorted(self._pending, key=lambda r: (not r.urgent, r.enqueued_at))

    def _drop_cancelled(self) -> None:
        keep = []
        for req in self._pending:
            if req.future.done():
                continue
            if req.ctx.cancelled:
                req.future.set_exception(RequestCancelled(req.ctx.request_id))
                continue
            keep.append(req)
        self._pending = keep

    async def _gather(self) -> list[_Request]:
        """The next batch: the first request in priority order and what joins it within the window."""
        assert self._arrived is not None
        while True:
            self._drop_cancelled()
            if self._pending:
                break
            self._arrived.clear()
            await self._arrived.wait()
        lead = self._ordered()[0]
        if self.window_s > 0 and self.max_batch > 1 and self._others_active(lead.source, time.perf_counter()):
            deadline = lead.enqueued_at + self.window_s
            while len(self._pending) < self.max_batch:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except TimeoutError:
                    break
            self._drop_cancelled()
        batch = self._ordered()[: self.max_batch]
        chosen = set(map(id, batch))
        self._pending = [r for r in self._pending if id(r) not in chosen]
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                batch = await self._gather()
                if not batch:
                    continue
                now = time.perf_counter()
                for req in batch:
                    wait = now - req.enqueued_at
                    self._metrics.queue_wait_s.labels(self.name).observe(wait)
                    if req.ctx.batch_share is not None:
                        req.ctx.batch_share.add(len(batch), wait)
                self._metrics.batch_size.labels(self.name).observe(len(batch))
                urgent = any(r.urgent for r in batch)
                call = loop.run_in_executor(self._executor, self._fn, [r.payload for r in batch], urgent)
                try:
                    results = await asyncio.wait_for(asyncio.shield(call), self.timeout_s)
                except TimeoutError:
                    self._abandon(call)
                    self._fail(batch, StageError(self.name, f"timed out after {self.timeout_s:g} s (watchdog)"))
                    continue
                except Exception as exc:  # the batch's failure is its requests' alone
                    log.exception("stage %s batch of %d failed", self.name, len(batch))
                    err = StageError(self.name, f"{type(exc).__name__}: {exc}")
                    err.__cause__ = exc
                    self._fail(batch, err)
                    continue
                finally:
                    self._metrics.compute_s.labels(self.name).observe(time.perf_counter() - now)
                if len(results) != len(batch):
                    self._fail(batch, StageError(self.name, f"{len(results)} results for {len(batch)} requests"))
                    continue
                for req, value in zip(batch, results, strict=True):
                    if isinstance(value, Exception):  # that request's own failure (a bad input)
                        err = StageError(self.name, f"{type(value).__name__}: {value}")
                        err.__cause__ = value
                        self._fail([req], err)
                    elif not req.future.done():
                        req.future.set_result(value)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the loop itself broke: /health reports it
            self.error = exc
            log.exception("stage worker %s died", self.name)
            raise

    def _fail(self, batch: Sequence[_Request], err: BaseException) -> None:
        self._metrics.errors.labels(self.name).inc()
        for req in batch:
            if not req.future.done():
                req.future.set_exception(err)

    def _abandon(self, call: asyncio.Future[Any]) -> None:
        self.timeouts += 1
        self.abandoned_threads += 1
        log.error("stage %s: a batched call exceeded %.1f s; thread abandoned, fresh worker started",
                  self.name, self.timeout_s)

        def returned(f: asyncio.Future[Any]) -> None:
            if not f.cancelled():
                f.exception()  # (retrieved: the late outcome is dropped)
            self.abandoned_threads -= 1
            log.warning("stage %s: an abandoned worker thread returned (its result was dropped)", self.name)

        call.add_done_callback(returned)
        self._executor.shutdown(wait=False)
        self._executor = self._new_executor()
