"""ONNX Runtime session factory, thread defaults and the core lock of the ``tiny`` family.

The reference machine has 2 CPU cores. Every model is capped at 1-2 intra-op threads and 1
inter-op thread, and its calls take turns on the cores (:data:`CORES`), so several sessions share
them without oversubscription.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

DEFAULT_THREADS: Final[int] = 2
"""Intra-op threads for compute-heavy graphs (Talker front, HiFi-GAN decoder, OCR, Whisper)."""

VAD_THREADS: Final[int] = 1
"""Intra-op threads for the Silero VAD (tiny graph, called every 32 ms)."""


def ort_session(model: Path | str | bytes, threads: int = DEFAULT_THREADS):
    """Open a CPU ``onnxruntime.InferenceSession`` with bounded threads and quiet logging.

    Args:
        model: path to an ``.onnx`` file, or the serialized model bytes.
        threads: intra-op thread count (>= 1).

    Returns:
        The ``onnxruntime.InferenceSession`` (CPUExecutionProvider only).

    Raises:
        ValueError: ``threads`` < 1.
        onnxruntime.capi.onnxruntime_pybind11_state.Fail: the model cannot be loaded.
    """
    import onnxruntime as ort

    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


class Priority(enum.IntEnum):
    """Who goes first for the cores (lower first; equal priorities in arrival order)."""

    TURN = 0
    """An end-of-turn score (Smart Turn, the text model): the session holds its input for it."""
    VOICE = 1
    """Talker and Code2Wav: audio of a reply that is due, or already playing."""
    WORK = 2
    """Everything else: ASR, OCR, each token the Thinker writes."""


@dataclass
class CoreUse:
    """What one kind of model call took of the cores so far (:meth:`CoreLock.stats`).

    Attributes:
        calls: holds of the lock (outermost only: a re-entered hold is part of its holder's).
        wait_s: seconds spent waiting for the lock, summed over the calls.
        hold_s: seconds the lock was held, summed over the calls.
    """

    calls: int = 0
    wait_s: float = 0.0
    hold_s: float = 0.0


class CoreLock:
    """One model call at a time on the process's CPU cores, by priority.

    The ``tiny`` models each use every core (:data:`DEFAULT_THREADS`) and their thread pools
    busy-wait (CTranslate2's and llama.cpp's OpenMP teams, ONNX Runtime's spinning pool). Two calls
    at once then do not share the cores, they fight over them: measured on this 2-core machine,
    Whisper's 160 ms took 440-1540 ms while Smart Turn scored in a loop beside it, and the Thinker's
    354 ms reply took 1.3-1.7 s beside the text end-of-turn model. Passive waiting
    (``OMP_WAIT_POLICY=PASSIVE``) ends the fight but makes every call slower (the reply 354 -> 621
    ms). So every model call of the family runs inside :meth:`hold`: one call at a time, the most
    urgent waiting call next. A long job holds it per piece (the Thinker per token), so an urgent
    call waits at most one piece.

    Liveness first: a call that has waited ``max_wait_s``, or finds the lock held that long, runs
    anyway (a model call hung inside the lock must not stop every session; the stage watchdog
    reports the hung one). Re-entrant per thread. Thread-safe.

    Each outermost hold is counted under its priority and ``work`` label (:meth:`stats`): with
    several sessions these waits, not any one model's speed, are where their turns lose time.

    Args:
        max_wait_s: longest wait for the lock, seconds.
    """

    def __init__(self, max_wait_s: float = 5.0) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[int, int]] = []  # heap of (priority, ticket)
        self._tickets = itertools.count()
        self._owner: int | None = None
        self._since = 0.0  # when the owner took the lock (time.monotonic)
        self._warned = -1.0
        self._depth = 0
        self._max_wait_s = max_wait_s
        self.waited_out = 0
        """Calls that ran without the lock (they waited ``max_wait_s``, or its holder had held it that long)."""
        self._use: dict[tuple[str, str], CoreUse] = {}

    @contextmanager
    def hold(self, priority: Priority, work: str = "model") -> Iterator[None]:
        """Run the ``with`` block as the only model call (see the class); ``work`` names the model
        call in :meth:`stats` (``thinker``, ``asr``, ``talker`` ...)."""
        me = threading.get_ident()
        asked = time.perf_counter()
        with self._cond:
            outermost = self._owner != me
            if not outermost:  # re-entered by the holder
                self._depth += 1
                owns = True
            else:
                owns = self._wait_turn((int(priority), next(self._tickets)))
        got = time.perf_counter()
        try:
            yield
        finally:
            with self._cond:
                if outermost:
                    use = self._use.setdefault((priority.name.lower(), work), CoreUse())
                    use.calls += 1
                    use.wait_s += got - asked
                    use.hold_s += time.perf_counter() - got
                if owns:
                    self._depth -= 1
                    if self._depth == 0:
                        self._owner = None
                        self._cond.notify_all()

    def stats(self) -> dict[tuple[str, str], CoreUse]:
        """``{(priority, work): CoreUse}`` since the process started (a copy; priority as
        ``turn``/``voice``/``work``). Process-wide: every engine of the process shares the cores."""
        with self._cond:
            return {key: CoreUse(u.calls, u.wait_s, u.hold_s) for key, u in self._use.items()}

    def _wait_turn(self, entry: tuple[int, int]) -> bool:
        """Queue ``entry`` and wait for its turn (under ``self._cond``); False: run without the lock."""
        heapq.heappush(self._queue, entry)
        deadline = time.monotonic() + self._max_wait_s
        try:
            while not (self._owner is None and self._queue[0] == entry):
                now = time.monotonic()
                stuck_at = self._since + self._max_wait_s if self._owner is not None else deadline
                if min(deadline, stuck_at) <= now:  # waited too long, or the holder is stuck: go on
                    self.waited_out += 1
                    if self._warned != self._since:  # once per holder
                        self._warned = self._since
                        log.warning("model calls run beside the one holding the cores (held %.1f s)", now - self._since)
                    return False
                self._cond.wait(min(deadline, stuck_at) - now)
            self._owner, self._since, self._depth = threading.get_ident(), time.monotonic(), 1
            return True
        finally:
            self._queue.remove(entry)
            heapq.heapify(self._queue)
            self._cond.notify_all()  # the head of the queue has changed


CORES: Final[CoreLock] = CoreLock()
"""The process's model calls of the ``tiny`` family (see :class:`CoreLock`)."""
