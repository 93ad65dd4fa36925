"""One-off model calls run in a thread that is gone when they return (see ``in_passing_thread``)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.backend.pipeline.workers import in_passing_thread


def test_the_call_runs_off_the_event_loop_and_its_thread_exits() -> None:
    seen: list[threading.Thread] = []

    def work(x: int) -> int:
        seen.append(threading.current_thread())
        return x * 2

    async def main() -> int:
        return await in_passing_thread(work, 21)

    assert asyncio.run(main()) == 42
    assert seen and seen[0] is not threading.main_thread()
    assert not seen[0].is_alive(), "a live thread would keep its OpenMP team (and throttle the Thinker's)"


def test_an_exception_reaches_the_caller() -> None:
    def boom() -> None:
        raise ValueError("bad weights")

    async def main() -> None:
        await in_passing_thread(boom)

    with pytest.raises(ValueError, match="bad weights"):
        asyncio.run(main())
