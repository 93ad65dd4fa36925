"""Audio decode / encode / resample: bytes in any common format <-> float32 mono.

Conventions used throughout:
    * "audio" arrays are ``np.ndarray`` of dtype ``float32``, shape ``(n,)`` (mono), nominal
      range ``[-1, 1]``; a sample rate in Hz always travels beside them.
    * PCM16 is little-endian signed 16-bit. Float -> PCM16 scales by 32767 after clipping to
      ``[-1, 1]`` (so ``+1.0 -> 32767``, ``-1.0 -> -32767``; ``-32768`` is never produced and
      nothing wraps); PCM16 -> float divides by 32768 (libsndfile's convention), so any
      int16 maps into ``[-1, 32767/32768]``.
    * Every failure raises :class:`app.media.errors.MediaError`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any, Final

import numpy as np
import soundfile as sf
import soxr

from app.media import g711
from app.media.dataurl import guess_audio_format
from app.media.errors import BAD_AUDIO, TOO_LARGE, UNSUPPORTED_FORMAT, MediaError

PCM16_SCALE_OUT: Final[float] = 32767.0
"""Float -> PCM16 multiplier (after clipping to [-1, 1])."""

PCM16_SCALE_IN: Final[float] = 32768.0
"""PCM16 -> float divisor."""

RESAMPLE_QUALITY: Final[str] = "HQ"
"""soxr quality recipe used by :func:`resample` and :class:`PcmStreamResampler`."""

OPUS_RATES_HZ: Final[tuple[int, ...]] = (8_000, 12_000, 16_000, 24_000, 48_000)
"""Sample rates the Opus codec accepts; other rates are resampled to the last one."""

RAW_PCM16_FORMATS: Final[frozenset[str]] = frozenset(
    {"pcm16", "pcm_s16le", "s16le", "pcm"}
)
RAW_F32_FORMATS: Final[frozenset[str]] = frozenset({"pcm_f32le", "f32le", "float32"})
RAW_G711_FORMATS: Final[frozenset[str]] = frozenset({"g711_ulaw", "g711_alaw"})
CONTAINER_FORMATS: Final[frozenset[str]] = frozenset(
    {"wav", "flac", "ogg", "opus", "mp3", "webm", "m4a", "aac"}
)
"""``fmt`` hints for self-describing containers (auto-detected; the hint only validates)."""

ENCODE_FORMATS: Final[frozenset[str]] = frozenset(
    {
        "wav",
        "pcm16",
        "pcm_f32le",
        "flac",
        "ogg",
        "mp3",
        "opus",
        "g711_ulaw",
        "g711_alaw",
    }
)
"""Formats :func:`encode_audio` writes."""

_EMPTY: Final[np.ndarray] = np.zeros(0, dtype=np.float32)
_OBJ_REPR = re.compile(r"<[^<>]* object at 0x[0-9a-fA-F]+>")


# ----------------------------------------------------------------------------- helpers


def _check_rate(rate: Any, name: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise MediaError(
            BAD_AUDIO, f"{name} must be a positive integer, got {rate!r}", param=name
        )
    return int(rate)


def _as_float_audio(audio: Any, *, allow_2d: bool = False) -> np.ndarray:
    """Validate a float array (shape (n,), or (n, ch) when ``allow_2d``) -> float32, finite."""
    arr = np.asarray(audio)
    if arr.dtype.kind not in "fiu" or arr.ndim not in ((1, 2) if allow_2d else (1,)):
        raise MediaError(
            BAD_AUDIO,
            f"expected a float audio array of shape (n,), got {arr.dtype} {arr.shape}",
        )
    if arr.dtype.kind in "iu":
        raise MediaError(BAD_AUDIO, f"expected floating-point samples, got {arr.dtype}")
    out = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.all(np.isfinite(out)):
        out = np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0)
    return out


def _to_mono(x: np.ndarray) -> np.ndarray:
    """(n,) or (n, ch) float -> (n,) float32 by averaging channels."""
    if x.ndim == 2:
        x = x.mean(axis=1) if x.shape[1] != 1 else x[:, 0]
    return np.ascontiguousarray(x, dtype=np.float32)


def _finish(mono: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    out = resample(mono, rate, target_rate)
    out = np.nan_to_num(out, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.clip(out, -1.0, 1.0).astype(np.float32, copy=False)


def _check_duration(n_samples: int, rate: int, max_seconds: float | None) -> None:
    if max_seconds is not None and n_samples / rate > max_seconds:
        raise MediaError(
            TOO_LARGE,
            f"audio is {n_samples / rate:.2f} s long, limit is {max_seconds:g} s",
            param="max_seconds",
        )


# ----------------------------------------------------------------------------- PCM16


def float_to_pcm16(audio: np.ndarray) -> bytes:
    """Float audio -> little-endian PCM16 bytes.

    Args:
        audio: float array, shape (n,), nominal range [-1, 1]; NaN becomes 0.

    Returns:
        ``2 * n`` bytes. Values are clipped to [-1, 1] first, then scaled by 32767 and rounded:
        ``1.0 -> 32767``, ``1.5 -> 32767`` (no wrap-around), ``-1.0 -> -32767``.

    Raises:
        MediaError: ``bad_audio`` if ``audio`` is not a 1-D float array.
    """
    x = _as_float_audio(audio)
    pcm = np.rint(np.clip(x, -1.0, 1.0) * PCM16_SCALE_OUT).astype("<i2")
    return pcm.tobytes()


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian PCM16 bytes -> float32 audio, shape (len(data) // 2,), ``x / 32768``.

    Raises:
        MediaError: ``bad_audio`` on an odd byte count.
    """
    buf = bytes(data)
    if len(buf) % 2:
        raise MediaError(BAD_AUDIO, f"PCM16 data has an odd byte count ({len(buf)})")
    return (np.frombuffer(buf, dtype="<i2").astype(np.float32) / PCM16_SCALE_IN).astype(
        np.float32
    )


# ----------------------------------------------------------------------------- silence


def drop_leading_silence(audio: np.ndarray, rate: int, *, keep_ms: float = 5.0,
                         floor_dbfs: float = -60.0) -> np.ndarray:
    """``audio`` (float32 mono, shape (n,), at ``rate`` Hz) from ``keep_ms`` before its first sample
    at or above ``floor_dbfs`` (peak): the silence before it is dropped (Piper begins a reply with
    ~30-45 ms below -90 dBFS, measured on four replies). A view; ``audio`` itself when no sample
    reaches the floor (all silence is left for the caller to judge).

    Raises:
        MediaError: ``bad_audio`` for a bad rate or array.
    """
    rate = _check_rate(rate, "rate")
    x = _as_float_audio(audio)
    loud = np.flatnonzero(np.abs(x) >= 10.0 ** (floor_dbfs / 20.0))
    if loud.size == 0:
        return x
    return x[max(0, int(loud[0]) - round(keep_ms * rate / 1000.0)):]


# ----------------------------------------------------------------------------- resampling


def resample(audio: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample with soxr (quality :data:`RESAMPLE_QUALITY`).

    Args:
        audio: float array, shape (n,) or (n, channels).
        from_rate: input rate, Hz (> 0).
        to_rate: output rate, Hz (> 0).

    Returns:
        float32 array of shape (m,) / (m, channels) with ``m ~= round(n * to_rate / from_rate)``;
        a float32 copy when the rates are equal; empty input gives empty output.

    Raises:
        MediaError: ``bad_audio`` for a bad rate or array.
    """
    from_rate = _check_rate(from_rate, "from_rate")
    to_rate = _check_rate(to_rate, "to_rate")
    x = _as_float_audio(audio, allow_2d=True)
    if from_rate == to_rate:
        return x.copy()
    if x.shape[0] == 0:
        return np.zeros((0,) + x.shape[1:], dtype=np.float32)
    try:
        out = soxr.resample(x, from_rate, to_rate, quality=RESAMPLE_QUALITY)
    except Exception as exc:  # soxr raises ValueError/RuntimeError on odd input
        raise MediaError(BAD_AUDIO, f"resampling failed: {exc}") from exc
    return np.ascontiguousarray(out, dtype=np.float32)


class PcmStreamResampler:
    """Streaming float32 mono resampler (wraps :class:`soxr.ResampleStream`).

    Feed consecutive chunks; the output is continuous (no clicks at chunk borders) and its
    total length converges to ``round(total_in * to_rate / from_rate)`` once ``last=True``
    flushes the filter delay. With equal rates it passes chunks through (copied).

    Example::

        rs = PcmStreamResampler(48_000, INPUT_SAMPLE_RATE_HZ)
        for chunk in mic_chunks:
            out = rs.process(chunk)
        tail = rs.process(np.zeros(0, np.float32), last=True)
    """

    def __init__(
        self, from_rate: int, to_rate: int, *, quality: str = RESAMPLE_QUALITY
    ) -> None:
        """Create the stream.

        Args:
            from_rate: input rate, Hz (> 0).
            to_rate: output rate, Hz (> 0).
            quality: soxr quality recipe (``"QQ"``, ``"LQ"``, ``"MQ"``, ``"HQ"``, ``"VHQ"``).

        Raises:
            MediaError: ``bad_audio`` for a bad rate or quality.
        """
        self.from_rate = _check_rate(from_rate, "from_rate")
        self.to_rate = _check_rate(to_rate, "to_rate")
        self.quality = quality
        self._finished = False
        self._stream: soxr.ResampleStream | None = None
        self._make()

    def _make(self) -> None:
        self._finished = False
        if self.from_rate == self.to_rate:
            self._stream = None
            return
        try:
            self._stream = soxr.ResampleStream(
                self.from_rate, self.to_rate, 1, dtype="float32", quality=self.quality
            )
        except Exception as exc:
            raise MediaError(BAD_AUDIO, f"cannot create resampler: {exc}") from exc

    @property
    def finished(self) -> bool:
        """True after a ``last=True`` call (until :meth:`reset`)."""
        return self._finished

    def process(self, chunk: np.ndarray, last: bool = False) -> np.ndarray:
        """Resample the next chunk.

        Args:
            chunk: float array, shape (n,) (n may be 0), at ``from_rate``.
            last: True for the final chunk: flushes the remaining filter delay.

        Returns:
            float32 array, shape (m,), at ``to_rate`` (m may be 0 early in the stream).

        Raises:
            MediaError: ``bad_audio`` for a non-1-D/non-float chunk or a call after ``last``.
        """
        if self._finished:
            raise MediaError(
                BAD_AUDIO, "resampler stream already finished; call reset()"
            )
        x = _as_float_audio(chunk)
        if last:
            self._finished = True
        if self._stream is None:
            return x.copy()
        try:
            out = self._stream.resample_chunk(x, last=last)
        except Exception as exc:
            raise MediaError(BAD_AUDIO, f"resampling failed: {exc}") from exc
        return np.ascontiguousarray(out, dtype=np.float32)

    def reset(self) -> None:
        """Drop buffered state and start a fresh stream."""
        self._make()


# ----------------------------------------------------------------------------- decode


class AvAudioCollector:
    """Accumulates decoded PyAV audio frames into float32 mono at the first frame's rate.

    Shared by the PyAV audio fallback and :func:`app.media.video.demux_video`. Internal API.
    """

    def __init__(self, max_seconds: float | None = None) -> None:
        self.rate: int | None = None
        self.max_seconds = max_seconds
        self._chunks: list[np.ndarray] = []
        self._n = 0

    def add(self, frame: Any) -> None:
        """Append one ``av.AudioFrame``; raises ``MediaError(too_large)`` past ``max_seconds``."""
        arr = frame.to_ndarray()
        channels = max(
            1,
            frame.layout.nb_channels
            if hasattr(frame.layout, "nb_channels")
            else len(frame.layout.channels),
        )
        if frame.format.is_planar:
            arr = arr.reshape(arr.shape[0], -1)
        else:
            arr = arr.reshape(-1, channels).T
        kind = arr.dtype
        if kind == np.int16:
            arr = arr.astype(np.float32) / PCM16_SCALE_IN
        elif kind == np.int32:
            arr = arr.astype(np.float32) / 2147483648.0
        elif kind == np.uint8:
            arr = (arr.astype(np.float32) - 128.0) / 128.0
        elif kind == np.int64:
            arr = arr.astype(np.float32) / 9223372036854775808.0
        mono = np.ascontiguousarray(arr.astype(np.float32).mean(axis=0))
        rate = int(frame.sample_rate)
        if self.rate is None:
            self.rate = rate
        elif rate != self.rate and mono.size:
            mono = resample(mono, rate, self.rate)
        self._chunks.append(mono)
        self._n += mono.size
        _check_duration(self._n, self.rate, self.max_seconds)

    def result(self) -> tuple[np.ndarray, int | None]:
        """Returns ``(mono float32 (n,), rate or None if no frame was seen)``."""
        if not self._chunks:
            return _EMPTY.copy(), self.rate
        return np.concatenate(self._chunks).astype(np.float32, copy=False), self.rate


def _decode_soundfile(data: bytes, max_seconds: float | None) -> tuple[np.ndarray, int]:
    with sf.SoundFile(io.BytesIO(data)) as f:
        rate = int(f.samplerate)
        if f.frames > 0:
            _check_duration(int(f.frames), rate, max_seconds)
        x = f.read(dtype="float32", always_2d=True)
    _check_duration(x.shape[0], rate, max_seconds)
    return _to_mono(x), rate


def _decode_pyav(data: bytes, max_seconds: float | None) -> tuple[np.ndarray, int]:
    import av  # local: PyAV import is slow-ish and only needed for the fallback

    coll = AvAudioCollector(max_seconds)
    with av.open(io.BytesIO(data), mode="r") as container:
        if not container.streams.audio:
            raise MediaError(BAD_AUDIO, "no audio stream in the input")
        stream = container.streams.audio[0]
        for packet in container.demux(stream):
            for frame in packet.decode():
                coll.add(frame)
        mono, rate = coll.result()
        if rate is None:
            rate = int(stream.rate or stream.codec_context.sample_rate or 0)
    if not rate:
        raise MediaError(BAD_AUDIO, "audio stream has no sample rate")
    return mono, rate


def _decode_container(data: bytes, max_seconds: float | None) -> tuple[np.ndarray, int]:
    errors: list[str] = []
    try:
        return _decode_soundfile(data, max_seconds)
    except MediaError:
        raise
    except Exception as exc:  # noqa: BLE001 - any libsndfile failure means "try PyAV"
        errors.append(f"soundfile: {exc}")
    try:
        return _decode_pyav(data, max_seconds)
    except MediaError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported below as bad_audio
        errors.append(f"pyav: {exc}")
    detail = _OBJ_REPR.sub("input", "; ".join(errors))
    raise MediaError(BAD_AUDIO, f"could not decode audio ({detail})")


def decode_audio(
    data: bytes,
    *,
    target_rate: int,
    fmt: str | None = None,
    input_rate: int | None = None,
    max_seconds: float | None = None,
) -> np.ndarray:
    """Decode audio bytes to float32 mono at ``target_rate``.

    Containers (WAV, FLAC, OGG Vorbis/Opus, MP3 via libsndfile; WebM/M4A/AAC and anything
    libsndfile rejects via PyAV/ffmpeg) are auto-detected. Raw formats need ``fmt``:

    * ``pcm16`` / ``pcm_s16le`` / ``s16le``: little-endian int16, needs ``input_rate``;
    * ``pcm_f32le`` / ``f32le`` / ``float32``: little-endian float32, needs ``input_rate``;
    * ``g711_ulaw`` / ``g711_alaw``: one byte a sample, ``input_rate`` defaults to
      :data:`app.media.g711.G711_SAMPLE_RATE_HZ`.

    Multichannel input is averaged to mono; the result is resampled with soxr and clipped.

    Args:
        data: the encoded bytes (empty bytes -> empty result).
        target_rate: output rate, Hz (e.g. ``INPUT_SAMPLE_RATE_HZ``).
        fmt: raw format name or a container hint; also accepts MIME types / extensions
            understood by :func:`app.media.dataurl.guess_audio_format`. ``None`` = auto-detect.
        input_rate: rate of raw input, Hz (ignored for containers, which carry their own).
        max_seconds: optional duration limit of the input.

    Returns:
        float32 array, shape (n,), values in [-1, 1], at ``target_rate``; shape (0,) for empty
        audio.

    Raises:
        MediaError: ``bad_audio`` (undecodable, odd PCM16/float32 byte count, missing
            ``input_rate``), ``unsupported_format`` (unknown ``fmt``), ``too_large`` (longer
            than ``max_seconds``).
    """
    target_rate = _check_rate(target_rate, "target_rate")
    canon: str | None = None
    if fmt is not None:
        key = str(fmt).strip().lower()
        canon = (
            key
            if key in RAW_PCM16_FORMATS | RAW_F32_FORMATS
            else guess_audio_format(key)
        )
        if canon is None:
            raise MediaError(
                UNSUPPORTED_FORMAT, f"unsupported audio format {fmt!r}", param="fmt"
            )
    try:
        buf = bytes(data)
    except TypeError as exc:
        raise MediaError(
            BAD_AUDIO, f"audio data must be bytes, got {type(data).__name__}"
        ) from exc

    if canon in RAW_PCM16_FORMATS or canon in RAW_F32_FORMATS:
        if input_rate is None:
            raise MediaError(
                BAD_AUDIO, f"raw format {fmt!r} needs input_rate", param="input_rate"
            )
        rate = _check_rate(input_rate, "input_rate")
        if canon in RAW_PCM16_FORMATS:
            mono = pcm16_to_float(buf)
        else:
            if len(buf) % 4:
                raise MediaError(
                    BAD_AUDIO, f"float32 data length {len(buf)} is not a multiple of 4"
                )
            mono = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        _check_duration(mono.size, rate, max_seconds)
    elif canon in RAW_G711_FORMATS:
        rate = _check_rate(
            input_rate if input_rate is not None else g711.G711_SAMPLE_RATE_HZ,
            "input_rate",
        )
        _check_duration(len(buf), rate, max_seconds)
        pcm = g711.ulaw_decode(buf) if canon == "g711_ulaw" else g711.alaw_decode(buf)
        mono = pcm.astype(np.float32) / PCM16_SCALE_IN
    else:
        if not buf:
            return _EMPTY.copy()
        mono, rate = _decode_container(buf, max_seconds)
    if mono.size == 0:
        return _EMPTY.copy()
    return _finish(_as_float_audio(mono), rate, target_rate)


# ----------------------------------------------------------------------------- encode


def encode_wav(audio: np.ndarray, rate: int) -> bytes:
    """Float audio -> PCM16 mono WAV bytes (RIFF, 44-byte header), written by soundfile.

    Args:
        audio: float array, shape (n,), clipped to [-1, 1] (see :func:`float_to_pcm16`).
        rate: sample rate, Hz.

    Raises:
        MediaError: ``bad_audio`` for a bad array or rate.
    """
    return _sf_write(float_to_int16(audio), _check_rate(rate, "rate"), "WAV", "PCM_16")


def float_to_int16(audio: np.ndarray) -> np.ndarray:
    """Float audio -> int16 samples ``(n,)``, as :func:`float_to_pcm16` scales and clips them.

    Raises:
        MediaError: ``bad_audio`` (see :func:`float_to_pcm16`).
    """
    return np.frombuffer(float_to_pcm16(audio), dtype="<i2").astype(np.int16)


def _sf_write(x: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    bio = io.BytesIO()
    try:
        sf.write(bio, x, rate, format=fmt, subtype=subtype)
    except Exception as exc:
        raise MediaError(BAD_AUDIO, f"encoding {fmt}/{subtype} failed: {exc}") from exc
    return bio.getvalue()


def _av_write(x: np.ndarray, rate: int, container: str, codec: str) -> bytes:
    import av

    pcm = float_to_int16(x)
    bio = io.BytesIO()
    try:
        with av.open(bio, mode="w", format=container) as out:
            stream = out.add_stream(codec, rate=rate, layout="mono")
            frame = av.AudioFrame.from_ndarray(
                pcm.reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate = rate
            frames: Iterable[Any] = [frame] if pcm.size else []
            for fr in frames:
                for packet in stream.encode(fr):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
    except Exception as exc:
        raise MediaError(
            BAD_AUDIO, f"encoding {container}/{codec} failed: {exc}"
        ) from exc
    return bio.getvalue()


def _sf_supports(fmt: str, subtype: str) -> bool:
    return fmt in sf.available_formats() and subtype in sf.available_subtypes(fmt)


def encode_audio(audio: np.ndarray, rate: int, fmt: str) -> bytes:
    """Encode float mono audio.

    Args:
        audio: float array, shape (n,), clipped to [-1, 1].
        rate: its sample rate, Hz.
        fmt: one of :data:`ENCODE_FORMATS` (MIME types / extensions are accepted too):
            ``wav`` (PCM16 WAV), ``pcm16`` (raw little-endian int16, no header),
            ``pcm_f32le`` (raw float32), ``flac`` (16-bit), ``ogg`` (Vorbis), ``mp3``,
            ``opus`` (Ogg Opus; rates other than :data:`OPUS_RATES_HZ` are resampled to
            48 kHz), ``g711_ulaw`` / ``g711_alaw`` (raw, at ``rate`` as given — resample to
            8 kHz first for telephony).

    Returns:
        The encoded bytes.

    Raises:
        MediaError: ``unsupported_format`` for another ``fmt``; ``bad_audio`` for a bad array
            or rate, or an encoder failure.
    """
    key = str(fmt).strip().lower() if fmt is not None else ""
    canon = key if key in ENCODE_FORMATS else guess_audio_format(key)
    if canon not in ENCODE_FORMATS:
        raise MediaError(
            UNSUPPORTED_FORMAT, f"cannot encode audio as {fmt!r}", param="fmt"
        )
    rate = _check_rate(rate, "rate")
    x = np.clip(_as_float_audio(audio), -1.0, 1.0)
    if canon == "wav":
        return encode_wav(x, rate)
    if canon == "pcm16":
        return float_to_pcm16(x)
    if canon == "pcm_f32le":
        return x.astype("<f4").tobytes()
    if canon == "g711_ulaw":
        return g711.ulaw_encode(float_to_int16(x))
    if canon == "g711_alaw":
        return g711.alaw_encode(float_to_int16(x))
    if canon == "flac":
        return _sf_write(float_to_int16(x), rate, "FLAC", "PCM_16")
    if canon == "ogg":
        return _sf_write(x, rate, "OGG", "VORBIS")
    if canon == "mp3":
        if _sf_supports("MP3", "MPEG_LAYER_III"):
            return _sf_write(x, rate, "MP3", "MPEG_LAYER_III")
        return _av_write(x, rate, "mp3", "libmp3lame")
    # opus
    if rate not in OPUS_RATES_HZ:
        x = np.clip(resample(x, rate, OPUS_RATES_HZ[-1]), -1.0, 1.0)
        rate = OPUS_RATES_HZ[-1]
    if _sf_supports("OGG", "OPUS"):
        return _sf_write(x, rate, "OGG", "OPUS")
    return _av_write(x, rate, "ogg", "libopus")
