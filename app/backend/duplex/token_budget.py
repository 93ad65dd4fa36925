"""MiniCPM-o 4.5 Thinker context-token accounting for duplex sessions.

How many context (KV) tokens each duplex unit adds, so a session can tell how close it is to the
Thinker's limit (``max_position_embeddings`` 40960; nothing is evicted) and refuse or reclaim at
``duplex_session.context_watermark_ratio``.

Source of every number: vLLM-Omni's MiniCPM-o 4.5 duplex plugin
(``vllm_omni/model_executor/models/minicpmo_4_5/duplex/plugin.py``: ``_duplex_vision_tokens``,
``duplex_scheduler_token_budget``, ``duplex_first_append_context_reserve``,
``build_duplex_data_plane_prompt``) and its test ``test_scheduler_token_budget.py``:

* audio: one embedding per 100 ms (1600 samples at 16 kHz) => 10 per 1 s unit, plus the
  ``<unit>``/``</unit>`` markers => **12 per unit**;
* vision: one block is ``<image>`` + 64 resampler queries + ``</image>`` => **66**;
* a lone frame is never HD-sliced (``max_slice_nums [1]``) => 66 at any size;
* a stacked pair (base frame + composite) uses ``max_slice_nums [2, 1]``: only the base frame may
  be sliced, and at ``max_slice_nums`` 2 the processor's grid search has two outcomes:
  ``w*h <= tile**2`` => 1 block, else source + 2 patches = 3 blocks. So a pair costs **132** at
  448x448 and **264** at 960x540 or 1280x720 (tile 448, the released checkpoint's
  ``scale_resolution``); an unknown size or tile keeps the sliced count;
* every frame after the first costs one block (66);
* the first append also carries the session context: the exact template prefix + reference
  audio + suffix tokens when known, else 48, plus ``ref_samples // 1600 + 8`` with a reference;
* a speaking unit adds its text tokens (<= 20 for MiniCPM-o) + 1 end token; a listen unit 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.constants import (
    AUDIO_TOKENS_PER_UNIT,
    FRAME_BLOCK_TOKENS,
    INPUT_SAMPLE_RATE_HZ,
    UNIT_MS,
    VISION_TILE_PX,
)

FrameSize = tuple[int, int]
"""A frame's ``(width, height)`` in pixels."""

SAMPLES_PER_AUDIO_TOKEN: int = INPUT_SAMPLE_RATE_HZ // 10
"""16 kHz samples per audio embedding (100 ms => 1600)."""

SAMPLES_PER_UNIT: int = INPUT_SAMPLE_RATE_HZ * UNIT_MS // 1000
"""16 kHz samples per 1 s unit (16000)."""

SLICED_FRAME_BLOCKS: int = 3
"""Blocks of an HD-sliced base frame: the source tile + 2 patches."""

DEFAULT_CONTEXT_TOKENS: int = 48
"""First-append context reserve when the exact template length is unknown."""

REF_AUDIO_EXTRA_TOKENS: int = 8
"""Reserve added on top of the reference audio's embeddings (its markers / template text)."""

UNIT_END_TOKENS: int = 1
"""The token that ends a speaking unit (chunk EOS / chunk-TTS EOS / ``<|turn_eos|>``)."""

LISTEN_TOKENS: int = 1
"""A listen decision (``<|listen|>``)."""

MAX_CONTEXT_TOKENS: int = 40960
"""MiniCPM-o 4.5 Thinker ``max_position_embeddings``."""


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def base_frame_blocks(size: FrameSize | None, tile_px: int | None = VISION_TILE_PX) -> int:
    """Blocks the base frame of a stacked pair costs (1 unsliced, 3 sliced).

    Args:
        size: ``(width, height)`` in pixels; ``None`` = unknown (=> sliced).
        tile_px: the checkpoint's slice edge (``scale_resolution``); ``None`` = unknown (=> sliced).

    Raises:
        ValueError: a non-positive width or height.
    """
    if size is None or tile_px is None:
        return SLICED_FRAME_BLOCKS
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"frame size must be positive, got {size!r}")
    return 1 if width * height <= tile_px * tile_px else SLICED_FRAME_BLOCKS


def vision_tokens(frame_sizes: Sequence[FrameSize | None], tile_px: int | None = VISION_TILE_PX) -> int:
    """Context tokens of one unit's images (first = base frame, rest = composites / extra frames).

    Returns:
        0 without frames; 66 for a lone frame; ``(base_frame_blocks + n - 1) * 66`` otherwise.

    Raises:
        ValueError: a non-positive frame dimension.
    """
    frames = list(frame_sizes)
    if not frames:
        return 0
    if len(frames) == 1:
        return FRAME_BLOCK_TOKENS
    return (base_frame_blocks(frames[0], tile_px) + len(frames) - 1) * FRAME_BLOCK_TOKENS


def unit_tokens(
    audio_units: float,
    frame_sizes: Sequence[FrameSize | None],
    text_tokens: int = 0,
    listen: bool = False,
    *,
    tile_px: int | None = VISION_TILE_PX,
) -> int:
    """Context tokens a unit (or a group of units sharing one set of frames) adds to the Thinker.

    Args:
        audio_units: 1 s audio units (12 tokens each); a fraction scales linearly and rounds up
            (a 500 ms unit is ``0.5`` => 6), so the count never under-reserves.
        frame_sizes: ``(width, height)`` of the unit's images, base frame first.
        text_tokens: tokens the Thinker spoke in this unit (> 0 => speaking: + 1 end token).
        listen: the unit ended in a listen decision (+ 1).
        tile_px: slice edge; ``None`` = unknown (sliced reservation).

    Returns:
        ``ceil(12 * audio_units) + vision_tokens(frame_sizes) + decision tokens``.

    Raises:
        ValueError: negative counts, or ``listen`` together with ``text_tokens > 0``.
    """
    if isinstance(audio_units, bool) or not isinstance(audio_units, int | float) or not audio_units >= 0:
        raise ValueError(f"audio_units must be a number >= 0, got {audio_units!r}")
    _check_count("text_tokens", text_tokens)
    if listen and text_tokens:
        raise ValueError("a unit either speaks (text_tokens > 0) or listens, not both")
    decision = text_tokens + UNIT_END_TOKENS if text_tokens else (LISTEN_TOKENS if listen else 0)
    audio = math.ceil(audio_units * AUDIO_TOKENS_PER_UNIT - 1e-9)
    return audio + vision_tokens(frame_sizes, tile_px) + decision


def session_context_tokens(ref_audio_samples: int, *, exact_tokens: int | None = None) -> int:
    """Tokens the session context (system template + reference voice) adds on the first append.

    Args:
        ref_audio_samples: reference-voice samples at 16 kHz (0 = no reference).
        exact_tokens: the exact prefix + reference + suffix count, when the tokenizer is at hand;
            returned as is.

    Returns:
        ``exact_tokens`` if given, else ``48 + (ref_audio_samples // 1600 + 8 if a reference)``.

    Raises:
        ValueError: negative counts.
    """
    if exact_tokens is not None:
        _check_count("exact_tokens", exact_tokens)
        return exact_tokens
    _check_count("ref_audio_samples", ref_audio_samples)
    extra = ref_audio_samples // SAMPLES_PER_AUDIO_TOKEN + REF_AUDIO_EXTRA_TOKENS if ref_audio_samples else 0
    return DEFAULT_CONTEXT_TOKENS + extra


def first_append_units(audio_samples: int) -> int | None:
    """Units vLLM-Omni counts for a first append of whole units: ``max(1, samples // 16000 - 1)``.

    ``None`` when ``audio_samples`` is 0 or not a whole number of units.
    """
    _check_count("audio_samples", audio_samples)
    if not audio_samples or audio_samples % SAMPLES_PER_UNIT:
        return None
    return max(1, audio_samples // SAMPLES_PER_UNIT - 1)


def scheduler_append_tokens(
    audio_samples: int | None,
    frame_sizes: Sequence[FrameSize | None] = (),
    *,
    seq: int = 2,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    default: int = 64,
    tile_px: int | None = VISION_TILE_PX,
) -> int:
    """Scheduler slots vLLM-Omni reserves for one duplex append (``build_duplex_data_plane_prompt``).

    Args:
        audio_samples: 16 kHz samples in the append; ``None`` = not raw PCM (=> ``default``).
        frame_sizes: the append's images, base frame first.
        seq: 1-based append number in the session (``<= 1`` = first append, adds the context).
        context_tokens: :func:`session_context_tokens` of the session.
        default: slots for a non-PCM append.
        tile_px: slice edge; ``None`` = unknown (sliced reservation).

    Returns:
        Whole units: ``12 * units + vision`` (+1 after the first append); first append of whole
        units: ``context + 12 * first_append_units - 1 + vision``; a partial unit:
        ``clamp(samples // 1600 + 8, 16, 768) + vision``.

    Raises:
        ValueError: negative counts or frame sizes.
    """
    vision = vision_tokens(frame_sizes, tile_px)
    if audio_samples is None:
        budget = max(1, default) + vision
    else:
        _check_count("audio_samples", audio_samples)
        samples = max(1, audio_samples)
        if samples % SAMPLES_PER_UNIT == 0:
            budget = samples // SAMPLES_PER_UNIT * AUDIO_TOKENS_PER_UNIT + vision
        else:
            budget = max(16, min(768, samples // SAMPLES_PER_AUDIO_TOKEN + 8)) + vision
    exact = audio_samples is not None and audio_samples > 0 and audio_samples % SAMPLES_PER_UNIT == 0
    if seq <= 1:
        budget += context_tokens
        units = first_append_units(audio_samples) if audio_samples is not None else None
        if units is not None:
            budget = context_tokens + units * AUDIO_TOKENS_PER_UNIT - 1 + vision
    elif exact:
        budget += 1
    return budget
