#!/usr/bin/env python
"""Fit the ``tiny`` family's codec codebook (dev tool; the runtime only loads the .npy).

Synthesises the fixed English sentences below (and their unit-sized segments, which is how the
Talker sees text at run time) with the Piper joe-medium front half (deterministic scales), takes
every latent frame (192 float32 channels, 86.13 frames/s), and fits a k-means codebook with
scikit-learn ``MiniBatchKMeans`` (fixed ``random_state``, one thread, so the result is
reproducible). Writes ``assets/tiny/codebook.npy`` (float32 ``[K, 192]``) and prints its sha256,
which must then be recorded as ``CODEBOOK_SHA256`` in ``app/backend/models/tiny/weights.py``.

Usage::

    python scripts/fit_codebook.py                # fit + write assets/tiny/codebook.npy
    python scripts/fit_codebook.py --check        # fit, compare with the shipped file, no write

Needs the ``tiny`` and ``dev`` extras (scikit-learn, threadpoolctl).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SENTENCES: tuple[str, ...] = (
    "Hello, I am Omni, a small voice assistant running on this computer.",
    "The capital of France is Paris, and the capital of Italy is Rome.",
    "What is the weather like today? It looks sunny and warm outside.",
    "Please tell me a short story about a cat who lived in a big old house.",
    "I can read text from the camera and answer simple questions.",
    "Sure! Let me think about that for a moment.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "My favourite colours are blue, green, and a warm shade of orange.",
    "Could you repeat that, please? I did not quite catch what you said.",
    "Seven plus five equals twelve, and nine times three is twenty seven.",
    "The train to Berlin leaves at half past eight from platform four.",
    "Thank you very much. Have a wonderful evening!",
    "A spider has eight legs, while an insect has only six.",
    "Yes, that is correct. No, I do not think so. Maybe tomorrow.",
    "She sells seashells by the seashore, and the shells she sells are surely seashells.",
    "Good morning! How can I help you today?",
    "The sign on the door says open twenty four hours.",
    "Music, books, and long walks in the park make people happy.",
    "Which planet is the largest in our solar system? Jupiter is the largest.",
    "I'm sorry, I don't know the answer to that question.",
    "Zebras, giraffes, and elephants live on the African savanna.",
)
"""The fixed training texts (22 sentences; the order matters for reproducibility)."""

DEFAULT_CLUSTERS = 1024
"""Codebook entries K (1024 x 192 float32 = 786 KB)."""

RANDOM_STATE = 0
"""MiniBatchKMeans seed."""

BATCH_SIZE = 2048
"""MiniBatchKMeans mini-batch size, frames."""

MAX_ITER = 100
"""MiniBatchKMeans passes over the data."""


def collect_latents() -> np.ndarray:
    """Latent frames of every sentence and of each of its segments, float32 ``[N, 192]``."""
    from app.backend.models.tiny.talker import PiperFront
    from app.backend.models.tiny.voice import load_piper_split
    from app.backend.pipeline.segmenter import segment_text

    front = PiperFront(load_piper_split())
    frames = []
    for sentence in SENTENCES:
        frames.append(front.latents(sentence))
        for seg in segment_text(sentence):
            frames.append(front.latents(seg))
    return np.concatenate(frames, axis=0)


def fit(latents: np.ndarray, clusters: int) -> np.ndarray:
    """Deterministic MiniBatchKMeans; returns float32 centres ``[clusters, 192]``."""
    from sklearn.cluster import MiniBatchKMeans
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        km = MiniBatchKMeans(
            n_clusters=clusters,
            random_state=RANDOM_STATE,
            batch_size=BATCH_SIZE,
            max_iter=MAX_ITER,
            n_init=1,
            reassignment_ratio=0.01,
        )
        km.fit(latents.astype(np.float64))
    return km.cluster_centers_.astype(np.float32)


CHECK_TOLERANCE = 0.01
"""``--check`` on another CPU: the refit and the shipped codebook reconstruct the training frames
within this relative margin of each other. (Float kernels differ between CPUs: a refit on an AMD
EPYC differs bitwise from the one shipped, fitted on an Intel Xeon, at the same error, 0.2320.)"""


def npy_bytes(arr: np.ndarray) -> bytes:
    """The exact bytes ``np.save`` writes for ``arr``."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    from app.backend.models.tiny.codebook import CODEBOOK_RELPATH, Codebook

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / CODEBOOK_RELPATH)
    ap.add_argument("--clusters", type=int, default=DEFAULT_CLUSTERS)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    latents = collect_latents()
    t1 = time.perf_counter()
    centres = fit(latents, args.clusters)
    t2 = time.perf_counter()
    cb = Codebook(centres)
    recon = cb.decode(cb.encode(latents))
    rel_err = float(np.linalg.norm(recon - latents) / np.linalg.norm(latents))
    data = npy_bytes(centres)
    digest = hashlib.sha256(data).hexdigest()
    print(f"frames={len(latents)} synth={t1 - t0:.1f}s fit={t2 - t1:.1f}s K={args.clusters}")
    print(f"relative reconstruction error on training frames: {rel_err:.4f}")
    print(f"codebook bytes={len(data)} sha256={digest}")
    if args.check:
        if args.out.is_file() and args.out.read_bytes() == data:
            print("matches shipped file (bit for bit)")
            return 0
        if not args.out.is_file():
            print(f"DIFFERS from {args.out} (missing)")
            return 1
        shipped = Codebook(np.load(args.out))
        shipped_err = float(np.linalg.norm(shipped.decode(shipped.encode(latents)) - latents)
                            / np.linalg.norm(latents))
        print(f"shipped codebook's relative reconstruction error on the same frames: {shipped_err:.4f}")
        if abs(shipped_err - rel_err) <= CHECK_TOLERANCE * rel_err:
            print(f"matches shipped file in quality, not bit for bit (within {CHECK_TOLERANCE:.0%}: "
                  "this CPU's float kernels give slightly different numbers)")
            return 0
        print(f"DIFFERS from {args.out}")
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".npy.tmp")
    tmp.write_bytes(data)
    tmp.replace(args.out)
    print(f"wrote {args.out}; record CODEBOOK_SHA256 = {digest!r} in weights.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
