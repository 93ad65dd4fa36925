"""Decoding of a duplex session's input: appended audio to float32 16 kHz, camera frames to RGB.

Pure of session state except the streaming resampler for input rates other than 16 kHz.
"""

from __future__ import annotations

import numpy as np

from app.backend.duplex.settings import SessionSettings
from app.backend.protocol.commands import AudioAppend, ProtocolError
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import (
    MediaError,
    PcmStreamResampler,
    decode_audio,
    decode_base64,
    decode_image,
)

APPEND_FORMATS = ("pcm16", "pcm_s16le", "s16le", "pcm_f32le", "f32le", "g711_ulaw", "g711_alaw", "audio/pcm")
"""Format names an append's own ``format`` field may carry."""


class InputDecoder:
    """Turns ``input_audio_buffer.append`` payloads into session audio and frames.

    Args:
        limits: the deploy config's ``limits`` (``max_audio_seconds``, ``max_image_bytes``,
            ``max_image_pixels``).
    """

    def __init__(self, limits: object) -> None:
        self._limits = limits
        self._resampler: PcmStreamResampler | None = None

    def configure(self, settings: SessionSettings) -> None:
        """Follow the session's input rate (a stream resampler when it is not 16 kHz)."""
        if settings.input_rate_hz != INPUT_SAMPLE_RATE_HZ:
            self._resampler_for(settings.input_rate_hz)
        else:
            self._resampler = None

    def _resampler_for(self, rate: int) -> PcmStreamResampler:
        if self._resampler is None or self._resampler.from_rate != rate:
            self._resampler = PcmStreamResampler(rate, INPUT_SAMPLE_RATE_HZ)
        return self._resampler

    def audio(self, msg: AudioAppend, settings: SessionSettings) -> np.ndarray:
        """The append's audio as float32 16 kHz mono, shape ``(n,)``.

        Raises:
            ProtocolError: ``unsupported_audio_format``, ``bad_base64``/``bad_audio`` (undecodable).
        """
        fmt = msg.format or msg.input_audio_format
        if fmt is not None and fmt.lower() not in APPEND_FORMATS:
            raise ProtocolError("unsupported_audio_format", f"unsupported append format '{fmt}'",
                                event_id=msg.event_id, param="format")
        raw = decode_base64(msg.audio)
        canon = settings.input_format if fmt is None else fmt.lower()
        rate = msg.sample_rate_hz or settings.input_rate_hz
        try:
            audio = decode_audio(raw, target_rate=rate, fmt=canon if canon != "audio/pcm" else "pcm16", input_rate=rate,
                                 max_seconds=self._limits.max_audio_seconds)  # type: ignore[attr-defined]
        except MediaError as err:
            raise ProtocolError("bad_audio", str(err), event_id=msg.event_id, param="audio") from None
        if rate != INPUT_SAMPLE_RATE_HZ:
            audio = self._resampler_for(rate).process(audio)
        return audio

    def frames(self, msg: AudioAppend, room: int, max_frames: int) -> tuple[list[np.ndarray], list[ProtocolError]]:
        """Decode the append's ``video_frames`` (base first) that fit in ``room``.

        Returns:
            ``(uint8 RGB images (h, w, 3), problems)``: each problem is an ``invalid_video_frames``
            error to report (frames over the per-unit limit of ``max_frames``, undecodable frames);
            the good frames are kept.
        """
        lim = self._limits
        frames = msg.video_frames or []
        problems: list[ProtocolError] = []
        if len(frames) > room:
            problems.append(ProtocolError("invalid_video_frames", f"at most {max_frames} frames per unit "
                                          f"(base + composite); {len(frames) - max(room, 0)} dropped",
                                          event_id=msg.event_id))
            frames = frames[: max(room, 0)]
        images = []
        for i, f in enumerate(frames):
            try:
                images.append(decode_image(decode_base64(f), max_bytes=lim.max_image_bytes,  # type: ignore[attr-defined]
                                           max_pixels=lim.max_image_pixels))  # type: ignore[attr-defined]
            except MediaError as err:
                problems.append(ProtocolError("invalid_video_frames", f"video_frames[{i}]: {err}",
                                              event_id=msg.event_id, param=f"video_frames[{i}]"))
        return images, problems

    def ref_audio_samples(self, ref: str | None) -> int:
        """Length of a data-URL reference voice at 16 kHz, samples (0 for none or a non-data URI).

        Raises:
            ProtocolError: ``bad_audio`` (``param: session.ref_audio``).
        """
        if not ref or not ref.startswith("data:"):
            return 0
        try:
            return int(decode_audio(decode_base64(ref), target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=30).size)
        except MediaError as err:
            raise ProtocolError("bad_audio", f"ref_audio: {err}", param="session.ref_audio") from None
