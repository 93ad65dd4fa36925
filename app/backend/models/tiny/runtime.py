"""ONNX Runtime session factory and thread defaults for the ``tiny`` family.

The reference machine has 2 CPU cores, so every session is capped at 1-2 intra-op threads and
1 inter-op thread; several sessions then share the cores without oversubscription.
"""

from __future__ import annotations

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
