"""UrgentWork: the Thinker waits between tokens while an end-of-turn score runs."""

from __future__ import annotations

import threading
import time

from app.backend.models.tiny.runtime import UrgentWork


def test_yield_to_waits_while_urgent_work_runs_and_not_otherwise() -> None:
    gate = UrgentWork()
    t0 = time.perf_counter()
    gate.yield_to(1.0)
    assert time.perf_counter() - t0 < 0.05, "nothing urgent: no wait"

    started, release = threading.Event(), threading.Event()

    def score() -> None:
        with gate.running():
            started.set()
            release.wait(2.0)

    th = threading.Thread(target=score)
    th.start()
    started.wait(1.0)
    threading.Timer(0.2, release.set).start()
    t0 = time.perf_counter()
    gate.yield_to(2.0)
    waited = time.perf_counter() - t0
    th.join()
    assert 0.15 <= waited < 1.5, waited


def test_yield_to_gives_up_after_its_timeout() -> None:
    gate = UrgentWork()
    with gate.running():
        t0 = time.perf_counter()
        gate.yield_to(0.1)
        assert 0.09 <= time.perf_counter() - t0 < 0.5
