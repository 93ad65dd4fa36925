"""``tiny`` vision: read text in an image with RapidOCR (PP-OCRv4 det + rec, PP-OCR cls).

Weights: the three ONNX graphs inside ``rapidocr-onnxruntime`` 1.4.4 (Apache-2.0), checked
against :data:`~app.backend.models.tiny.weights.RAPIDOCR_FILES` and passed to RapidOCR by
explicit path. The words read here are one part of the ``tiny`` Thinker's description of a
frame (:mod:`.vision`, which also reads colours, shapes and clocks).
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import ModelAssetMissingError, verify_sha256
from app.backend.models.tiny.runtime import CORES, DEFAULT_THREADS, Priority

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
        return [(text, score) for text, score, _box in self.read_boxes(image)]

    def read_boxes(self, image: np.ndarray) -> list[tuple[str, float, tuple[float, float, float, float]]]:
        """:meth:`read_lines` with each line's box ``(x0, y0, x1, y1)`` in pixels of ``image``.

        Raises:
            ValueError: see :meth:`read_lines`.
        """
        img = np.asarray(image)
        if img.dtype != np.uint8:
            raise ValueError(f"image must be uint8, got {img.dtype}")
        if img.ndim == 2:
            img = np.repeat(img[:, :, None], 3, axis=2)
        if img.ndim != 3 or img.shape[2] not in (3, 4) or min(img.shape[:2]) < 1:
            raise ValueError(f"image must be (h, w, 3) RGB, got shape {img.shape}")
        bgr = np.ascontiguousarray(img[:, :, 2::-1])  # RGB(A) -> BGR, as OpenCV expects
        with self._lock, CORES.hold(Priority.WORK, "ocr") if self._hold_cores else nullcontext():
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
                    (float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max())),
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
        return [(it[3], it[4], it[5]) for it in ordered]

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
