"""``tiny`` Code2Wav: codec tokens -> codebook lookup -> Piper HiFi-GAN -> 24 kHz, streamed.

Decoder: the second half of the split joe-medium VITS graph (:mod:`.voice`), latent
``[1, 192, T]`` -> waveform ``[T * hop]`` float32 at the voice rate (22050 Hz, hop 256).
The output is clipped to [-1, 1] (as Piper does) and resampled to
:data:`~app.constants.OUTPUT_SAMPLE_RATE_HZ` with a per-stream stateful
``soxr.ResampleStream``.

Streaming exactness. HiFi-GAN is a stack of non-causal convolutions: output frame ``t``
depends on latent frames ``t - 11 .. t + 11`` (measured: perturbing one frame changes
samples from 10.08 frames before its start to 10.08 frames after its end; see
:func:`measure_receptive_field`, asserted in ``tests/unit/test_tiny_code2wav.py``).
A stream therefore

* keeps :data:`LEFT_CONTEXT_FRAMES` already-emitted frames as left context, and
* holds back the last :data:`LOOKAHEAD_FRAMES` frames until their right context has arrived
  (or ``final`` is pushed),

and emits only the samples of frames whose full receptive field is inside the decoded window.
Those samples equal the one-shot decode of all tokens up to float rounding (max abs error
~2e-6 measured), and ``soxr``'s streaming resampler is chunking-invariant, so concatenating
every push equals ``decode(all_tokens)`` with exactly the same length. The latency this costs is
``LOOKAHEAD_FRAMES / frame_rate`` = 139 ms of audio.
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
from app.backend.models.tiny.voice import (
    DECODER_OUTPUT,
    LATENT_DIM,
    SPLIT_TENSOR,
    PiperSplit,
)
from app.backend.pipeline.stages import Code2Wav, Code2WavStream
from app.constants import OUTPUT_SAMPLE_RATE_HZ

LEFT_CONTEXT_FRAMES: Final[int] = 12
"""Latent frames of left context re-decoded per chunk (receptive field 11 frames + 1 margin)."""

LOOKAHEAD_FRAMES: Final[int] = 12
"""Latent frames held back until their right context arrives (receptive field 11 + 1 margin)."""

RESAMPLE_QUALITY: Final[str] = "HQ"
"""soxr quality preset for voice-rate -> 24 kHz."""


class TinyCode2Wav(Code2Wav):
    """Token decoder shared by all streams (one ONNX session; ``run`` is thread-safe).

    Args:
        voice: the split voice (decoder graph, sample rate, hop).
        codebook: the same codebook the Talker quantised with.
        threads: ONNX intra-op threads.
        left_context: frames of left context (>= receptive field for exact streaming).
        lookahead: frames held back (>= receptive field for exact streaming).

    Raises:
        ValueError: negative context, or codebook dim != 192.
    """

    def __init__(
        self,
        voice: PiperSplit,
        codebook: Codebook,
        threads: int = DEFAULT_THREADS,
        left_context: int = LEFT_CONTEXT_FRAMES,
        lookahead: int = LOOKAHEAD_FRAMES,
    ) -> None:
        if left_context < 0 or lookahead < 0:
            raise ValueError("left_context and lookahead must be >= 0")
        if codebook.dim != LATENT_DIM:
            raise ValueError(f"codebook dim {codebook.dim} != latent dim {LATENT_DIM}")
        self._voice = voice
        self._codebook = codebook
        self._session = ort_session(voice.decoder_path, threads)
        self.left_context = left_context
        self.lookahead = lookahead

    @property
    def input_sample_rate_hz(self) -> int:
        """Rate the HiFi-GAN produces, Hz (22050)."""
        return self._voice.sample_rate_hz

    @property
    def output_sample_rate_hz(self) -> int:
        """Rate of everything :meth:`Code2WavStream.push` returns (24000)."""
        return OUTPUT_SAMPLE_RATE_HZ

    @property
    def hop_length(self) -> int:
        """Voice-rate samples per codec frame (256)."""
        return self._voice.hop_length

    @property
    def frame_rate_hz(self) -> float:
        """Codec frames per second (86.13)."""
        return self._voice.frame_rate_hz

    @property
    def codebook(self) -> Codebook:
        """The codebook used for lookup."""
        return self._codebook

    def decode_latents(self, latents: np.ndarray) -> np.ndarray:
        """Run the HiFi-GAN on a whole latent window (no clipping, no resampling).

        Args:
            latents: float32 ``[T, 192]``, ``T`` >= 1.

        Returns:
            float32 ``[T * hop]`` at :attr:`input_sample_rate_hz`.
        """
        z = np.ascontiguousarray(np.asarray(latents, dtype=np.float32).T[None])
        with CORES.hold(Priority.VOICE, "code2wav"):
            out = self._session.run([DECODER_OUTPUT], {SPLIT_TENSOR: z})[0]
        return out.reshape(-1)

    def new_stream(self) -> TinyCode2WavStream:
        """Open a decoder stream for one response."""
        return TinyCode2WavStream(self)

    def decode(self, tokens: np.ndarray) -> np.ndarray:
        """One-shot decode: ``new_stream().push(tokens, final=True)`` (float32 at 24 kHz)."""
        return self.new_stream().push(tokens, final=True)


class TinyCode2WavStream(Code2WavStream):
    """Per-response streaming state: held latent frames and the resampler.

    Not thread-safe for concurrent ``push`` on one stream (a lock serialises them).
    """

    def __init__(self, decoder: TinyCode2Wav) -> None:
        import soxr

        self._dec = decoder
        self._buf = np.zeros((0, LATENT_DIM), dtype=np.float32)
        self._buf_start = 0  # absolute frame index of self._buf[0]
        self._total = 0  # frames received
        self._emitted = 0  # frames whose audio has been produced
        self._closed = False
        self._lock = threading.Lock()
        self._resampler = soxr.ResampleStream(
            decoder.input_sample_rate_hz,
            OUTPUT_SAMPLE_RATE_HZ,
            1,
            dtype="float32",
            quality=RESAMPLE_QUALITY,
        )

    @property
    def frames_received(self) -> int:
        """Codec frames pushed so far."""
        return self._total

    @property
    def frames_emitted(self) -> int:
        """Codec frames whose voice-rate audio has been decoded (the rest is held back)."""
        return self._emitted

    @property
    def closed(self) -> bool:
        """``True`` after a ``final`` push."""
        return self._closed

    def push(self, tokens: np.ndarray, final: bool) -> np.ndarray:
        """Decode the next codec tokens.

        Args:
            tokens: int32 codec tokens ``[frames]`` (may be empty).
            final: no more tokens follow; flush everything held back (and the resampler).

        Returns:
            float32 mono audio at 24 kHz in [-1, 1]; possibly empty while frames are held back.

        Raises:
            ValueError: bad token array (see :meth:`Codebook.decode`).
            RuntimeError: the stream was already finalised.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("Code2Wav stream already finalised")
            new = self._dec.codebook.decode(np.asarray(tokens))
            if len(new):
                self._buf = np.concatenate([self._buf, new], axis=0)
                self._total += len(new)
            end = self._total if final else max(self._emitted, self._total - self._dec.lookahead)
            voice_audio = np.zeros(0, dtype=np.float32)
            if end > self._emitted:
                hop = self._dec.hop_length
                lo = max(0, self._emitted - self._dec.left_context)
                hi = min(self._total, end + self._dec.lookahead)
                window = self._buf[lo - self._buf_start : hi - self._buf_start]
                wav = self._dec.decode_latents(window)
                voice_audio = np.clip(
                    wav[(self._emitted - lo) * hop : (end - lo) * hop], -1.0, 1.0
                ).astype(np.float32, copy=False)
                self._emitted = end
                keep_from = max(0, self._emitted - self._dec.left_context)
                self._buf = self._buf[keep_from - self._buf_start :]
                self._buf_start = keep_from
            if final:
                self._closed = True
            out = self._resampler.resample_chunk(voice_audio, last=final)
            return np.asarray(out, dtype=np.float32).reshape(-1)


def measure_receptive_field(decoder: TinyCode2Wav, latents: np.ndarray) -> tuple[float, float]:
    """Measure how far one latent frame influences the decoder output (diagnostic/test aid).

    Perturbs the middle frame of ``latents`` and finds the first and last changed sample.

    Args:
        decoder: the Code2Wav.
        latents: float32 ``[T, 192]`` with ``T`` comfortably larger than 2 x 12.

    Returns:
        ``(frames_before, frames_after)``: how far the change reaches before the start and
        after the end of the perturbed frame, in frames (``(10.08, 10.08)`` for joe-medium).
    """
    z = np.asarray(latents, dtype=np.float32)
    k = len(z) // 2
    base = decoder.decode_latents(z)
    zp = z.copy()
    zp[k] += 1.0
    diff = np.nonzero(decoder.decode_latents(zp) != base)[0]
    hop = decoder.hop_length
    return (k - diff.min() / hop, (diff.max() + 1) / hop - k - 1)
