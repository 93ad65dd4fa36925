"""``tiny`` vision: read text in an image with RapidOCR (PP-OCRv4 det + rec, PP-OCR cls).

Weights: the three ONNX graphs inside ``rapidocr-onnxruntime`` 1.4.4 (Apache-2.0), checked
against :data:`~app.backend.models.tiny.weights.RAPIDOCR_FILES` and passed to RapidOCR by
explicit path. There is no bundled captioner/VLM on PyPI, so the ``tiny`` Thinker "sees" only
text; the reply prompt gets it as ``[The camera shows the text: ...]``.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import ModelAssetMissingError, verify_sha256
from app.backend.models.tiny.runtime import CORES, DEFAULT_THREADS, Priority

log = logging.getLogger(__name__)

DEFAULT_MIN_SCORE: Final[float] = 0.5
"""Recognition confidence below which a text line is dropped (RapidOCR's own default)."""

LINE_SEPARATOR: Final[str] = ", "
"""Separator between text lines in :meth:`RapidOcr.read_text`."""

_ROW_TOLERANCE: Final[float] = 0.5
"""Boxes whose centres differ by less than this fraction of the line height share a row."""


def rapidocr_model_paths() -> dict[str, Path]:
    """Verified paths of the det / cls / rec graphs.

    Returns:
        ``{"det": ..., "cls": ..., "rec": ...}``.

    Raises:
        ModelAssetMissingError: rapidocr-onnxruntime is not installed.
        WeightIntegrityError: a graph differs from its pinned digest.
    """
    try:
        import rapidocr_onnxruntime
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError(
            "rapidocr-onnxruntime is not installed; install the 'tiny' extra"
        ) from exc
    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    return {
        role: verify_sha256(models / name, digest, f"rapidocr {name}")
        for role, (name, digest) in weights.RAPIDOCR_FILES.items()
    }


class RapidOcr:
    """Image -> the text written in it.

    Args:
        threads: ONNX intra-op threads for each of the three graphs.
        min_score: drop lines whose recognition score is below this (0..1).

    Raises:
        ValueError: ``min_score`` outside [0, 1].
        ModelAssetMissingError / WeightIntegrityError: see :func:`rapidocr_model_paths`.
    """

    def __init__(
        self, threads: int = DEFAULT_THREADS, min_score: float = DEFAULT_MIN_SCORE, *,
        hold_cores: bool = True,
    ) -> None:
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {min_score}")
        from rapidocr_onnxruntime import RapidOCR

        self._hold_cores = hold_cores

        paths = rapidocr_model_paths()
        self._engine = RapidOCR(
            intra_op_num_threads=threads,
            inter_op_num_threads=1,
            det_model_path=str(paths["det"]),
            cls_model_path=str(paths["cls"]),
            rec_model_path=str(paths["rec"]),
        )
        self.min_score = min_score
        self._lock = threading.Lock()  # RapidOCR mutates per-call settings on the engine

    def read_lines(self, image: np.ndarray) -> list[tuple[str, float]]:
        """Text lines in reading order (top-to-bottom rows, left-to-right within a row).

        Args:
            image: uint8 RGB ``(h, w, 3)``; also accepted: grey ``(h, w)`` and RGBA
                ``(h, w, 4)``.

        Returns:
            ``[(text, score), ...]`` with ``score >= min_score``; ``[]`` if none.

        Raises:
            ValueError: not a uint8 image of a supported shape.
        """
        img = np.asarray(image)
        if img.dtype != np.uint8:
            raise ValueError(f"image must be uint8, got {img.dtype}")
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        if img.ndim != 3 or img.shape[2] not in (3, 4) or min(img.shape[:2]) < 1:
            raise ValueError(f"image must be (h, w, 3) RGB, got shape {img.shape}")
        bgr = np.ascontiguousarray(img[:, :, 2::-1])  # RGB(A) -> BGR, as OpenCV expects
        with self._lock, CORES.hold(Priority.WORK) if self._hold_cores else nullcontext():
            result, _elapse = self._engine(bgr)
        if not result:
            return []
        items = []
        for box, text, score in result:
            pts = np.asarray(box, dtype=np.float32)
            if float(score) < self.min_score or not str(text).strip():
                continue
            items.append(
                (
                    float(pts[:, 1].mean()),
                    float(pts[:, 0].min()),
                    float(np.ptp(pts[:, 1])),
                    str(text).strip(),
                    float(score),
                )
            )
        items.sort(key=lambda it: (it[0], it[1]))
        rows: list[list[tuple]] = []
        for it in items:
            if rows and abs(it[0] - rows[-1][0][0]) < _ROW_TOLERANCE * max(it[2], 1.0):
                rows[-1].append(it)
            else:
                rows.append([it])
        ordered = [it for row in rows for it in sorted(row, key=lambda r: r[1])]
        return [(it[3], it[4]) for it in ordered]

    def read_text(self, image: np.ndarray) -> str:
        """All confident text in ``image``, lines joined with ``", "``.

        Args:
            image: uint8 RGB ``(h, w, 3)``.

        Returns:
            E.g. ``"OPEN 24 HOURS, Coffee $3.50"``; ``""`` when no text is found.

        Raises:
            ValueError: see :meth:`read_lines`.
        """
        return LINE_SEPARATOR.join(text for text, _ in self.read_lines(image))


BACKGROUND_NICE: Final[int] = 19
"""OS niceness of the background reader's thread: the lowest priority (Linux sets it per thread)."""


def _lowest_priority() -> None:
    """Give the calling thread the lowest CPU priority (no-op where the OS refuses)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError) as exc:  # (not Linux, or not allowed)
        log.debug("background OCR thread keeps its priority: %s", exc)


class BackgroundOcr:
    """Camera reads that never hold up speech work.

    A duplex session reads its camera again every few seconds and at each speech onset
    (:mod:`app.backend.duplex.camera`). Through the Thinker stage and the core lock, one read
    (~0.6 s on 2 threads, one uninterruptible call) in flight when the user paused delayed that
    user's transcript, end-of-turn score and reply. Here reads run on one thread of their own at
    the lowest OS priority (:data:`BACKGROUND_NICE`), with a single-threaded RapidOCR (no thread
    pool that spins) and outside the core lock, so they use the cores only when speech work
    leaves them idle (a read is slower than a foreground one; on a busy machine, much slower).

    The engine (a second RapidOCR) is built on that thread when the reader is made.

    Args:
        min_score: see :class:`RapidOcr`.
    """

    def __init__(self, min_score: float = DEFAULT_MIN_SCORE) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ocr-background",
                                        initializer=_lowest_priority)
        self._ocr: Future[RapidOcr] = self._pool.submit(RapidOcr, 1, min_score, hold_cores=False)

    def submit(self, image: np.ndarray) -> Future[str]:
        """Queue a read of uint8 RGB ``image`` ``(h, w, 3)``; the future gives :meth:`RapidOcr.read_text`'s
        result, or its error (``ValueError`` for a bad image, the engine's load error)."""
        frame = np.array(image, copy=True)  # (the caller may reuse its buffer; read_text checks it)
        return self._pool.submit(lambda: self._ocr.result().read_text(frame))

    def close(self) -> None:
        """Stop the thread (queued reads are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
