"""ONNX Runtime session factory and thread defaults for the ``tiny`` family.

The reference machine has 2 CPU cores, so every session is capped at 1-2 intra-op threads and
1 inter-op thread; several sessions then share the cores without oversubscription.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

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


class UrgentWork:
    """Model calls that a turn decision waits for, ahead of a long call that can wait between pieces.

    On 2 cores the end-of-turn scorers (Smart Turn, the text model) and the Thinker writing a
    reply share the cores; the session holds its input until the score is back, so every
    millisecond a score loses to the Thinker delays the end of the turn. Scorers run their calls
    inside :meth:`running`; the Thinker calls :meth:`yield_to` between tokens and waits while any
    such call runs. Thread-safe.
    """

    def __init__(self) -> None:
        self._running = 0
        self._cond = threading.Condition()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Mark an urgent call for the duration of the ``with`` block."""
        with self._cond:
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self._cond.notify_all()

    def yield_to(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s`` seconds) until no urgent call runs; returns at once when none does."""
        with self._cond:
            self._cond.wait_for(lambda: self._running == 0, timeout_s)


TURN_SCORING: Final[UrgentWork] = UrgentWork()
"""The process's end-of-turn scoring (see :class:`UrgentWork`)."""
