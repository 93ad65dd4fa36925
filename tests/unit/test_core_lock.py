"""CoreLock: the tiny family's model calls take turns on the cores, the most urgent first."""

from __future__ import annotations

import threading
import time

from app.backend.models.tiny.runtime import CoreLock, Priority


def _queued(lock: CoreLock, n: int, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(lock._queue) < n:  # the waiters have queued (test-only peek)
        assert time.monotonic() < deadline, "waiters did not queue"
        time.sleep(0.001)


def test_one_call_at_a_time_and_the_most_urgent_waiter_goes_next() -> None:
    lock, order, inside = CoreLock(), [], []
    release = threading.Event()

    def call(name: str, priority: Priority) -> None:
        with lock.hold(priority):
            inside.append(name)
            assert len(inside) == 1, f"{inside} ran at once"
            order.append(name)
            if name == "first":
                release.wait(2.0)
            inside.remove(name)

    first = threading.Thread(target=call, args=("first", Priority.WORK))
    first.start()
    _queued_until = time.monotonic() + 2.0
    while not order and time.monotonic() < _queued_until:
        time.sleep(0.001)
    waiters = [threading.Thread(target=call, args=(name, prio)) for name, prio in
               (("token", Priority.WORK), ("chunk", Priority.VOICE), ("asr", Priority.WORK), ("score", Priority.TURN))]
    for i, w in enumerate(waiters):
        w.start()
        _queued(lock, i + 1)
    release.set()
    for t in (first, *waiters):
        t.join(5.0)
    assert order == ["first", "score", "chunk", "token", "asr"]  # by priority, then by arrival
    assert lock.waited_out == 0


def test_the_holder_may_reenter() -> None:
    lock = CoreLock(max_wait_s=0.5)
    with lock.hold(Priority.WORK), lock.hold(Priority.TURN):
        pass
    assert lock.waited_out == 0
    with lock.hold(Priority.WORK):  # and it is free again afterwards
        pass


def test_a_call_that_waited_too_long_runs_anyway() -> None:
    lock, ran = CoreLock(max_wait_s=0.1), threading.Event()
    stuck = threading.Event()

    def hung() -> None:
        with lock.hold(Priority.WORK):
            stuck.set()
            time.sleep(1.0)  # a model call hung inside the lock

    threading.Thread(target=hung, daemon=True).start()
    stuck.wait(2.0)
    t0 = time.monotonic()
    with lock.hold(Priority.TURN):
        ran.set()
    assert ran.is_set() and time.monotonic() - t0 < 0.9
    assert lock.waited_out == 1


def test_once_the_holder_is_stuck_later_calls_do_not_wait() -> None:
    lock = CoreLock(max_wait_s=0.2)
    stuck = threading.Event()

    def hung() -> None:
        with lock.hold(Priority.WORK):
            stuck.set()
            time.sleep(1.5)

    threading.Thread(target=hung, daemon=True).start()
    stuck.wait(2.0)
    time.sleep(0.3)  # the holder has now held the cores past max_wait_s
    t0 = time.monotonic()
    with lock.hold(Priority.WORK):
        pass
    assert time.monotonic() - t0 < 0.1
    assert lock.waited_out == 1


def test_stats_count_each_outermost_hold_with_its_wait_and_hold_time() -> None:
    lock = CoreLock()
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock.hold(Priority.VOICE, "talker"):
            holding.set()
            release.wait(2.0)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(2.0)
    threading.Timer(0.1, release.set).start()
    with lock.hold(Priority.WORK, "thinker"), lock.hold(Priority.WORK, "thinker"):  # re-entered: one call
        time.sleep(0.02)
    t.join(2.0)
    stats = lock.stats()
    assert set(stats) == {("voice", "talker"), ("work", "thinker")}
    thinker, talker = stats[("work", "thinker")], stats[("voice", "talker")]
    assert thinker.calls == 1 and talker.calls == 1
    assert thinker.wait_s >= 0.08  # it waited for the talker's hold to end
    assert thinker.hold_s >= 0.02 and talker.hold_s >= 0.08
    assert talker.wait_s < 0.05
