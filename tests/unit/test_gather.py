"""The gathering stage (issue #27): ready requests of several sessions run as one batched call,
within a short window that a session alone never waits for; those a user waits for go first; a
request cancelled while queued never runs; each request's failure is its own."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.backend.metrics import EngineMetrics
from app.backend.pipeline.gather import GatheringWorker
from app.backend.pipeline.requests import RequestCancelled, RequestContext, StageError
from app.backend.pipeline.stages import BatchShare


class Recorder:
    """A batched function that records each call's payloads (and can be held to keep the stage busy)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, bool, float]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, payloads: list, urgent: bool) -> list:
        self.gate.wait(10)
        self.calls.append((list(payloads), urgent, time.perf_counter()))
        return [p if not isinstance(p, str) or p != "bad" else ValueError("bad input") for p in payloads]


def _worker(fn, *, max_batch=4, window_s=0.3, timeout_s=None) -> GatheringWorker:
    w = GatheringWorker("asr", fn, max_batch=max_batch, window_s=window_s,
                        metrics=EngineMetrics(), timeout_s=timeout_s)
    w.start()
    return w


def _ctx(name: str, share: BatchShare | None) -> RequestContext:
    return RequestContext(name, batch_share=share)


async def test_a_session_alone_waits_for_no_window():
    rec = Recorder()
    w = _worker(rec, window_s=0.5)
    me = BatchShare()
    try:
        for i in range(3):  # the same session, one request after the other
            t0 = time.perf_counter()
            assert await w.submit(_ctx(f"a{i}", me), i) == i
            assert time.perf_counter() - t0 < 0.2  # far below the 0.5 s window
    finally:
        await w.stop()
    assert [c[0] for c in rec.calls] == [[0], [1], [2]]


async def test_requests_of_active_sessions_within_the_window_run_as_one_call():
    rec = Recorder()
    w = _worker(rec, window_s=0.3)
    a, b, c = BatchShare(), BatchShare(), BatchShare()
    try:
        await w.submit(_ctx("b0", b), "warm")  # session b asked lately: it is active
        first = asyncio.create_task(w.submit(_ctx("a", a), "A"))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(w.submit(_ctx("b", b), "B"))
        third = asyncio.create_task(w.submit(_ctx("c", c), "C"))
        assert await asyncio.gather(first, second, third) == ["A", "B", "C"]
    finally:
        await w.stop()
    assert [c[0] for c in rec.calls] == [["warm"], ["A", "B", "C"]]
    got = a.take()
    assert got.steps == 1 and got.replies_per_step == 3.0 and 250 <= got.wait_ms < 500  # the window: B and C joined it
    assert b.take().steps == 2


async def test_the_window_is_bounded_when_nobody_else_comes():
    rec = Recorder()
    w = _worker(rec, window_s=0.2)
    a, b = BatchShare(), BatchShare()
    try:
        await w.submit(_ctx("b0", b), "warm")
        t0 = time.perf_counter()
        await w.submit(_ctx("a", a), "A")
        waited = time.perf_counter() - t0
    finally:
        await w.stop()
    assert 0.15 <= waited < 0.6, waited


async def test_a_full_batch_runs_before_the_window_ends():
    rec = Recorder()
    w = _worker(rec, max_batch=2, window_s=5.0)
    a, b = BatchShare(), BatchShare()
    try:
        await w.submit(_ctx("b0", b), "warm")
        t0 = time.perf_counter()
        got = await asyncio.gather(w.submit(_ctx("a", a), "A"), w.submit(_ctx("b", b), "B"))
        assert got == ["A", "B"] and time.perf_counter() - t0 < 1.0
    finally:
        await w.stop()


async def test_a_request_a_user_waits_for_goes_first_and_runs_the_call_urgently():
    rec = Recorder()
    w = _worker(rec, max_batch=1, window_s=0.0)
    try:
        rec.gate.clear()  # the stage is busy with a first call
        busy = asyncio.create_task(w.submit(_ctx("x", None), "busy"))
        await asyncio.sleep(0.05)
        plain1 = asyncio.create_task(w.submit(_ctx("p1", BatchShare()), "plain1"))
        plain2 = asyncio.create_task(w.submit(_ctx("p2", BatchShare()), "plain2"))
        await asyncio.sleep(0.01)
        urgent = asyncio.create_task(w.submit(_ctx("u", BatchShare()), "urgent", urgent=True))
        await asyncio.sleep(0.05)
        rec.gate.set()
        await asyncio.gather(busy, plain1, plain2, urgent)
    finally:
        await w.stop()
    assert [(c[0], c[1]) for c in rec.calls] == [(["busy"], False), (["urgent"], True), (["plain1"], False),
                                                 (["plain2"], False)]


async def test_a_request_cancelled_while_queued_never_runs():
    rec = Recorder()
    w = _worker(rec, max_batch=4, window_s=0.0)
    try:
        rec.gate.clear()
        busy = asyncio.create_task(w.submit(_ctx("x", None), "busy"))
        await asyncio.sleep(0.05)
        doomed_ctx = _ctx("d", BatchShare())
        doomed = asyncio.create_task(w.submit(doomed_ctx, "doomed"))
        kept = asyncio.create_task(w.submit(_ctx("k", BatchShare()), "kept"))
        await asyncio.sleep(0.05)
        doomed_ctx.cancel()  # a barge-in dropped the reply it was for
        rec.gate.set()
        assert await kept == "kept"
        with pytest.raises(RequestCancelled):
            await doomed
        await busy
        with pytest.raises(RequestCancelled):  # and one cancelled before it is queued is refused
            await w.submit(doomed_ctx, "again")
    finally:
        await w.stop()
    assert [c[0] for c in rec.calls] == [["busy"], ["kept"]]


async def test_a_bad_item_fails_alone_and_a_raising_call_fails_its_batch_only():
    rec = Recorder()
    w = _worker(rec, max_batch=4, window_s=0.0)
    try:
        rec.gate.clear()
        busy = asyncio.create_task(w.submit(_ctx("x", None), "busy"))
        await asyncio.sleep(0.05)
        bad = asyncio.create_task(w.submit(_ctx("b", None), "bad"))
        good = asyncio.create_task(w.submit(_ctx("g", None), "good"))
        await asyncio.sleep(0.05)
        rec.gate.set()
        assert await good == "good"
        with pytest.raises(StageError, match="bad input"):
            await bad
        await busy
    finally:
        await w.stop()

    def boom(payloads, urgent):
        raise RuntimeError("native fault")

    w = _worker(boom, window_s=0.0)
    try:
        with pytest.raises(StageError, match="native fault"):
            await w.submit(_ctx("a", None), 1)
        assert w.alive  # the stage goes on
    finally:
        await w.stop()


async def test_a_call_past_the_watchdog_fails_and_a_fresh_thread_runs_the_next():
    release = threading.Event()

    def fn(payloads, urgent):
        if payloads == ["hang"]:
            release.wait(10)
        return payloads

    w = _worker(fn, window_s=0.0, timeout_s=0.2)
    try:
        with pytest.raises(StageError, match="timed out"):
            await w.submit(_ctx("h", None), "hang")
        assert w.degraded is not None
        assert await w.submit(_ctx("n", None), "next") == "next"
    finally:
        release.set()
        await w.stop()


def test_bad_settings_are_refused():
    m = EngineMetrics()
    with pytest.raises(ValueError, match="max_batch"):
        GatheringWorker("asr", lambda p, u: p, max_batch=0, window_s=0.0, metrics=m)
    with pytest.raises(ValueError, match="window_s"):
        GatheringWorker("asr", lambda p, u: p, max_batch=2, window_s=-1.0, metrics=m)
