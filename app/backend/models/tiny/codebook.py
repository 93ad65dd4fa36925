"""Vector-quantisation codebook that turns Piper latent frames into integer codec tokens.

The ``tiny`` family has no trained neural codec; its "codec tokens" are the indices of the
nearest entries of a k-means codebook over the VITS latent ``z`` (192 channels, 86.13 frames/s).
The codebook (``assets/tiny/codebook.npy``, float32 ``[K, 192]``) is fitted offline by
``scripts/fit_codebook.py``; the runtime only loads it (sha256-checked).

* encode: nearest entry by squared Euclidean distance, computed with matrix products
  (``|c|^2 - 2 x.c``; ``|x|^2`` is constant per row); ties go to the lowest index.
* decode: table lookup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import repo_root, verify_sha256

CODEBOOK_RELPATH: Final[str] = "assets/tiny/codebook.npy"
"""Codebook location relative to the repository root."""

_ENCODE_BLOCK: Final[int] = 4096
"""Frames per distance-matrix block in :meth:`Codebook.encode` (bounds memory to ~16 MB)."""


def default_codebook_path() -> Path:
    """``<repo>/assets/tiny/codebook.npy``."""
    return repo_root() / CODEBOOK_RELPATH


class Codebook:
    """A fixed set of ``K`` latent vectors of dimension ``D``.

    Args:
        vectors: float32-convertible array ``[K, D]`` with ``K >= 1``; finite values.

    Raises:
        ValueError: wrong rank, empty, or non-finite entries.
    """

    def __init__(self, vectors: np.ndarray) -> None:
        v = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        if v.ndim != 2 or v.shape[0] < 1 or v.shape[1] < 1:
            raise ValueError(f"codebook must be [K, D] with K, D >= 1, got shape {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError("codebook has non-finite entries")
        v.setflags(write=False)
        self._vectors = v
        self._sq_norms = np.einsum("kd,kd->k", v, v)

    @classmethod
    def load(cls, path: Path | str | None = None, *, verify: bool = True) -> Codebook:
        """Load a ``.npy`` codebook.

        Args:
            path: file to load; default :func:`default_codebook_path`.
            verify: check the sha256 against ``weights.CODEBOOK_SHA256`` (only meaningful for
                the shipped file; pass ``False`` for a freshly fitted one).

        Returns:
            The codebook.

        Raises:
            FileNotFoundError: the file is missing.
            WeightIntegrityError: ``verify`` and the digest differs.
            ValueError: the array is not a valid codebook.
        """
        p = Path(path) if path is not None else default_codebook_path()
        if verify:
            verify_sha256(p, weights.CODEBOOK_SHA256, "tiny codebook (assets/tiny/codebook.npy)")
        return cls(np.load(p, allow_pickle=False))

    @property
    def vectors(self) -> np.ndarray:
        """Read-only float32 ``[K, D]`` entries."""
        return self._vectors

    @property
    def size(self) -> int:
        """Number of entries ``K`` (token ids are ``0 .. K-1``)."""
        return int(self._vectors.shape[0])

    @property
    def dim(self) -> int:
        """Vector dimension ``D`` (192 for the Piper latent)."""
        return int(self._vectors.shape[1])

    def encode(self, latents: np.ndarray) -> np.ndarray:
        """Quantise frames to the index of their nearest entry.

        Args:
            latents: float array ``[T, D]`` (``T`` may be 0).

        Returns:
            int32 tokens ``[T]`` in ``[0, K)``.

        Raises:
            ValueError: wrong shape.
        """
        x = np.asarray(latents, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"latents must be [T, {self.dim}], got shape {x.shape}")
        out = np.empty(x.shape[0], dtype=np.int32)
        for s in range(0, x.shape[0], _ENCODE_BLOCK):
            blk = x[s : s + _ENCODE_BLOCK]
            dist = self._sq_norms[None, :] - 2.0 * (blk @ self._vectors.T)
            out[s : s + len(blk)] = np.argmin(dist, axis=1)
        return out

    def decode(self, tokens: np.ndarray) -> np.ndarray:
        """Look tokens up.

        Args:
            tokens: integer array ``[T]`` with values in ``[0, K)``.

        Returns:
            float32 ``[T, D]`` (a new array).

        Raises:
            ValueError: not 1-D integers, or an id out of range.
        """
        t = np.asarray(tokens)
        if t.ndim != 1 or (t.size and not np.issubdtype(t.dtype, np.integer)):
            raise ValueError(f"tokens must be a 1-D integer array, got {t.dtype} {t.shape}")
        if t.size and (int(t.min()) < 0 or int(t.max()) >= self.size):
            raise ValueError(f"token ids must be in [0, {self.size}), got [{t.min()}, {t.max()}]")
        return self._vectors[t.astype(np.intp, copy=False)]
