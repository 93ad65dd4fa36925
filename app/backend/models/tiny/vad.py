"""Streaming Silero VAD v6 on ONNX Runtime (no torch).

Weights: ``faster_whisper/assets/silero_vad_v6.onnx`` (faster-whisper 1.2.1, MIT; 1.2 MB),
checked against :data:`~app.backend.models.tiny.weights.SILERO_V6_SHA256`.

Graph I/O (inspected with onnxruntime; same use as ``faster_whisper.vad.SileroVADModel``):

* ``input`` float32 ``[n_windows, 576]``: each row is 64 samples of context (the last 64
  samples before the window) followed by one 512-sample window at 16 kHz;
* ``h``, ``c`` float32 ``[1, 1, 128]``: LSTM state carried from window to window;
* outputs ``speech_probs`` float32 ``[n_windows]`` (probability each window is speech),
  ``hn``, ``cn`` (the new state).

:class:`SileroVad` keeps the state, the 64-sample context and any leftover samples (< 512)
between calls, so feeding audio in arbitrary chunk sizes gives the same probabilities as
feeding it all at once.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import ModelAssetMissingError, verify_sha256
from app.backend.models.tiny.runtime import VAD_THREADS, ort_session
from app.constants import INPUT_SAMPLE_RATE_HZ, samples_to_ms

WINDOW_SAMPLES: Final[int] = 512
"""Samples per VAD window at 16 kHz (Silero v5/v6 fixed window)."""

CONTEXT_SAMPLES: Final[int] = 64
"""Samples of left context prepended to each window (Silero v5/v6 at 16 kHz)."""

STATE_SHAPE: Final[tuple[int, int, int]] = (1, 1, 128)
"""Shape of each LSTM state tensor ``h`` / ``c``."""


def vad_window_ms() -> float:
    """Duration of one VAD window: 512 samples at 16 kHz = 32.0 ms."""
    return samples_to_ms(WINDOW_SAMPLES, INPUT_SAMPLE_RATE_HZ)


def silero_model_path() -> Path:
    """Verified path of the Silero v6 ONNX bundled with faster-whisper.

    Raises:
        ModelAssetMissingError: faster-whisper is not installed.
        WeightIntegrityError: the file differs from the pinned digest.
    """
    try:
        import faster_whisper
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError(
            "faster-whisper is not installed; install the 'tiny' extra"
        ) from exc
    path = Path(faster_whisper.__file__).parent / "assets" / "silero_vad_v6.onnx"
    return verify_sha256(path, weights.SILERO_V6_SHA256, "silero_vad_v6.onnx (faster-whisper)")


@functools.lru_cache(maxsize=1)
def shared_silero_session():
    """One process-wide ``InferenceSession`` (``run`` is thread-safe; state lives per stream)."""
    return ort_session(silero_model_path(), VAD_THREADS)


class SileroVad:
    """Per-stream speech probability over 16 kHz float32 audio.

    Args:
        session: an ONNX session of the Silero v6 graph; default :func:`shared_silero_session`.
    """

    def __init__(self, session=None) -> None:
        self._session = session if session is not None else shared_silero_session()
        self._lock = threading.Lock()
        self.reset()

    @property
    def window_samples(self) -> int:
        """Samples per window (512)."""
        return WINDOW_SAMPLES

    @property
    def window_ms(self) -> float:
        """Window duration, ms (32.0)."""
        return vad_window_ms()

    @property
    def pending_samples(self) -> int:
        """Samples buffered until the next full window (0 .. 511)."""
        return int(self._pending.size)

    def reset(self) -> None:
        """Forget all state: LSTM state, context and leftover samples."""
        self._h = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Feed audio; get one probability per completed 512-sample window.

        Args:
            chunk: float32 mono at :data:`~app.constants.INPUT_SAMPLE_RATE_HZ` (16 kHz),
                shape ``(n,)``, any ``n`` >= 0, values in [-1, 1].

        Returns:
            float32 ``[k]`` speech probabilities in [0, 1], one per window completed by this
            call (``k = (pending + n) // 512``); leftovers wait for the next call.

        Raises:
            ValueError: ``chunk`` is not 1-D.
        """
        x = np.asarray(chunk, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"chunk must be 1-D mono at {INPUT_SAMPLE_RATE_HZ} Hz, got {x.shape}")
        with self._lock:
            buf = np.concatenate([self._pending, x]) if self._pending.size else x
            k = buf.size // WINDOW_SAMPLES
            if k == 0:
                self._pending = buf.copy()
                return np.zeros(0, dtype=np.float32)
            windows = buf[: k * WINDOW_SAMPLES].reshape(k, WINDOW_SAMPLES)
            contexts = np.empty((k, CONTEXT_SAMPLES), dtype=np.float32)
            contexts[0] = self._context
            contexts[1:] = windows[:-1, -CONTEXT_SAMPLES:]
            batch = np.ascontiguousarray(np.concatenate([contexts, windows], axis=1))
            probs, self._h, self._c = self._session.run(
                None, {"input": batch, "h": self._h, "c": self._c}
            )
            self._context = windows[-1, -CONTEXT_SAMPLES:].copy()
            self._pending = buf[k * WINDOW_SAMPLES :].copy()
            return np.asarray(probs, dtype=np.float32).reshape(-1)
