"""``tiny`` Talker: text -> Piper VITS latent -> int32 codec tokens.

Pipeline per text segment:

1. espeak-ng phonemes through piper-tts 1.8's own API (``PiperVoice.phonemize`` -> one list of
   phonemes per sentence, ``PiperVoice.phonemes_to_ids``);
2. the front half of the split joe-medium graph (:mod:`.voice`) with deterministic scales
   (noise 0, length 1.0, noise_w 0), one run per sentence, latents concatenated in time ->
   ``z`` float32 ``[T, 192]`` at ``sample_rate / hop`` = 86.13 frames/s;
3. nearest-entry vector quantisation with the shipped codebook (:mod:`.codebook`) ->
   int32 tokens ``[T]``.

The same text always gives the same tokens.
"""

from __future__ import annotations

import threading
from typing import Final

import numpy as np

from app.backend.models.tiny.codebook import Codebook
from app.backend.models.tiny.runtime import (
    CORES,
    DEFAULT_THREADS,
    Priority,
    ort_session,
)
from app.backend.models.tiny.voice import LATENT_DIM, PiperSplit
from app.backend.pipeline.stages import Talker

NOISE_SCALE: Final[float] = 0.0
"""VITS prior noise scale; 0 makes synthesis deterministic (Piper's default is 0.667)."""

LENGTH_SCALE: Final[float] = 1.0
"""Phoneme duration scale (1.0 = the voice's natural rate)."""

NOISE_W_SCALE: Final[float] = 0.0
"""Duration-predictor noise; 0 makes durations deterministic (Piper's default is 0.8)."""


class PiperFront:
    """Text -> unquantised VITS latent (the front half of the split Piper graph).

    Args:
        voice: the split voice (:func:`~app.backend.models.tiny.voice.load_piper_split`).
        threads: ONNX intra-op threads.
    """

    def __init__(self, voice: PiperSplit, threads: int = DEFAULT_THREADS) -> None:
        from piper import PiperVoice

        self._voice = voice
        self._session = ort_session(voice.front_path, threads)
        # PiperVoice is a dataclass; we only use its phonemizer, so hand it our front session
        # instead of letting PiperVoice.load open the full 63 MB graph a second time.
        self._piper = PiperVoice(session=self._session, config=voice.piper_config())
        self._scales = np.array([NOISE_SCALE, LENGTH_SCALE, NOISE_W_SCALE], dtype=np.float32)
        self._phonemize_lock = threading.Lock()

    @property
    def voice(self) -> PiperSplit:
        """The split voice this front belongs to."""
        return self._voice

    def phoneme_ids(self, text: str) -> list[list[int]]:
        """Phoneme ids per sentence of ``text`` (``[]`` when there is nothing to say)."""
        if not text.strip():
            return []
        with self._phonemize_lock:  # espeak-ng is a process-global C library
            sentences = self._piper.phonemize(text)
            return [self._piper.phonemes_to_ids(p) for p in sentences if p]

    def latents(self, text: str) -> np.ndarray:
        """Unquantised latent of ``text``.

        Args:
            text: any text (English).

        Returns:
            float32 ``[T, 192]`` at ``voice.frame_rate_hz``; ``T`` = 0 for blank text.
        """
        parts = []
        for ids in self.phoneme_ids(text):
            with CORES.hold(Priority.VOICE, "talker"):
                z = self._session.run(
                    None,
                    {
                        "input": np.asarray([ids], dtype=np.int64),
                        "input_lengths": np.asarray([len(ids)], dtype=np.int64),
                        "scales": self._scales,
                    },
                )[0]
            parts.append(z[0].T)
        if not parts:
            return np.zeros((0, LATENT_DIM), dtype=np.float32)
        return np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=np.float32)


class TinyTalker(Talker):
    """Piper joe-medium front half + k-means codebook.

    Args:
        front: the latent front (:class:`PiperFront`).
        codebook: codebook over the ``[T, 192]`` latent.

    Raises:
        ValueError: the codebook dimension is not the latent dimension (192).
    """

    def __init__(self, front: PiperFront, codebook: Codebook) -> None:
        if codebook.dim != LATENT_DIM:
            raise ValueError(f"codebook dim {codebook.dim} != latent dim {LATENT_DIM}")
        self._front = front
        self._codebook = codebook

    @property
    def frame_rate_hz(self) -> float:
        """Codec frames per second of speech (86.13 for joe-medium)."""
        return self._front.voice.frame_rate_hz

    @property
    def codebook(self) -> Codebook:
        """The codebook used for quantisation."""
        return self._codebook

    @property
    def front(self) -> PiperFront:
        """The latent front."""
        return self._front

    def latents(self, text: str) -> np.ndarray:
        """Unquantised latent ``[T, 192]`` float32 of ``text`` (see :meth:`PiperFront.latents`)."""
        return self._front.latents(text)

    def synthesize(self, text: str) -> np.ndarray:
        """Turn one text segment into codec tokens.

        Args:
            text: one unit-sized segment (about 28 characters); blank gives no tokens.

        Returns:
            int32 tokens ``[frames]`` in ``[0, codebook.size)`` at :attr:`frame_rate_hz`.
        """
        return self._codebook.encode(self._front.latents(text))
