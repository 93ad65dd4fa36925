"""ITU-T G.711 mu-law / A-law codecs (vectorised, no ``audioop``; it left the stdlib in 3.13).

Bit-exact with the classic Sun reference implementation (``g711.c``) that ffmpeg, sox and
``audioop`` also follow. One byte per sample; the telephony rate is
:data:`G711_SAMPLE_RATE_HZ`.
"""

from __future__ import annotations

from typing import Final

import numpy as np

G711_SAMPLE_RATE_HZ: Final[int] = 8_000
"""Conventional G.711 sample rate, Hz (OpenAI realtime ``g711_ulaw``/``g711_alaw``)."""

_QUANT_MASK = 0x0F
_SEG_SHIFT = 4
_SEG_MASK = 0x70
_SIGN_BIT = 0x80
_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # 14-bit magnitude limit after >> 2
_ULAW_SEG_END = np.array(
    [0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32
)
_ALAW_SEG_END = np.array(
    [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32
)


def _ulaw_table() -> np.ndarray:
    u = (~np.arange(256, dtype=np.int32)) & 0xFF
    t = ((u & _QUANT_MASK) << 3) + _ULAW_BIAS
    t = t << ((u & _SEG_MASK) >> _SEG_SHIFT)
    return np.where(u & _SIGN_BIT, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    t = (a & _QUANT_MASK) << 4
    seg = (a & _SEG_MASK) >> _SEG_SHIFT
    t = np.where(seg == 0, t + 8, t + 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    return np.where(a & _SIGN_BIT, t, -t).astype(np.int16)


ULAW_TO_PCM16: Final[np.ndarray] = _ulaw_table()
"""Decode table, shape (256,) int16: mu-law byte -> linear PCM16 (range +-32124)."""

ALAW_TO_PCM16: Final[np.ndarray] = _alaw_table()
"""Decode table, shape (256,) int16: A-law byte -> linear PCM16 (range +-32256)."""


def ulaw_decode(data: bytes) -> np.ndarray:
    """Decode mu-law bytes to PCM16: returns shape (len(data),) int16."""
    return ULAW_TO_PCM16[np.frombuffer(data, dtype=np.uint8)]


def alaw_decode(data: bytes) -> np.ndarray:
    """Decode A-law bytes to PCM16: returns shape (len(data),) int16."""
    return ALAW_TO_PCM16[np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(pcm: np.ndarray) -> bytes:
    """Encode PCM16 samples (any int array, shape (n,)) to ``n`` mu-law bytes."""
    v = np.asarray(pcm, dtype=np.int32).reshape(-1) >> 2
    mask = np.where(v < 0, 0x7F, 0xFF)
    v = np.minimum(np.abs(v), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, v, side="left")
    uval = (np.minimum(seg, 7) << _SEG_SHIFT) | (
        (v >> (np.minimum(seg, 7) + 1)) & _QUANT_MASK
    )
    uval = np.where(seg >= 8, 0x7F, uval)
    return (uval ^ mask).astype(np.uint8).tobytes()


def alaw_encode(pcm: np.ndarray) -> bytes:
    """Encode PCM16 samples (any int array, shape (n,)) to ``n`` A-law bytes."""
    v = np.asarray(pcm, dtype=np.int32).reshape(-1) >> 3
    mask = np.where(v >= 0, 0xD5, 0x55)
    v = np.where(v >= 0, v, -v - 1)
    seg = np.searchsorted(_ALAW_SEG_END, v, side="left")
    segc = np.minimum(seg, 7)
    quant = np.where(segc < 2, v >> 1, v >> np.maximum(segc, 1)) & _QUANT_MASK
    aval = np.where(seg >= 8, 0x7F, (segc << _SEG_SHIFT) | quant)
    return (aval ^ mask).astype(np.uint8).tobytes()
