"""MiniCPM-o 4.5 context-token accounting.

Mirrors vLLM-Omni's ``tests/model_executor/models/minicpmo_4_5/duplex/test_scheduler_token_budget.py``:
12 per audio unit; 66 per image block; a stacked pair costs 132 at 448x448 and 264 at 960x540 /
1280x720; a lone frame is never sliced; only the first frame of a pair is sliced; each extra frame
66; the example first append ``5 + 12 - 1 + 4 * 66``.
"""

from __future__ import annotations

import math

import pytest

from app.backend.duplex.token_budget import (
    MAX_CONTEXT_TOKENS,
    base_frame_blocks,
    first_append_units,
    scheduler_append_tokens,
    session_context_tokens,
    unit_tokens,
    vision_tokens,
)

BLOCK = 66
SIZES = [(224, 224), (320, 180), (448, 448), (448, 449), (640, 480), (960, 540), (1280, 720), (540, 960)]


def _model_blocks(size: tuple[int, int], max_slice_nums: int, scale_resolution: int) -> int:
    """``MiniCPMVImageProcessor.get_sliced_grid`` outcome: no grid below 2 => 1 block; a 2-cell grid => 3."""
    multiple = min(math.ceil(size[0] * size[1] / scale_resolution**2), max_slice_nums)
    return 1 if multiple <= 1 else 1 + 2


@pytest.mark.parametrize("scale_resolution", [336, 448, 560])
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_a_stacked_pair_reserves_what_the_model_slices_it_into(size: tuple[int, int], scale_resolution: int) -> None:
    expected = _model_blocks(size, 2, scale_resolution) + _model_blocks(size, 1, scale_resolution)
    assert vision_tokens([size, size], tile_px=scale_resolution) == expected * BLOCK


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((448, 448), 132), ((448, 449), 264), ((960, 540), 264), ((1280, 720), 264), ((224, 224), 132)],
)
def test_pair_at_the_448_tile(size: tuple[int, int], tokens: int) -> None:
    assert vision_tokens([size, size]) == tokens


def test_a_lone_frame_is_never_sliced() -> None:
    assert vision_tokens([(1280, 720)]) == BLOCK
    assert vision_tokens([None]) == BLOCK
    assert vision_tokens([]) == 0


def test_only_the_first_frame_of_a_pair_is_sliced() -> None:
    small, large = (448, 448), (1280, 720)
    assert vision_tokens([small, large]) == 2 * BLOCK
    assert vision_tokens([large, small]) == 4 * BLOCK


def test_extra_frames_each_cost_one_block() -> None:
    assert vision_tokens([(448, 448)] * 3) == 3 * BLOCK
    assert vision_tokens([(1280, 720)] * 3) == 5 * BLOCK


def test_unknown_size_or_tile_keeps_the_sliced_reservation() -> None:
    assert vision_tokens([None, (224, 224)]) == 4 * BLOCK
    assert vision_tokens([(224, 224), (224, 224)], tile_px=None) == 4 * BLOCK
    assert base_frame_blocks(None) == 3
    with pytest.raises(ValueError, match="frame size must be positive"):
        vision_tokens([(0, 10), (10, 10)])


def test_unit_tokens() -> None:
    assert unit_tokens(1, []) == 12
    assert unit_tokens(3, []) == 36
    assert unit_tokens(1.0, []) == 12 and unit_tokens(0.5, []) == 6  # unit_ms / 1000
    assert isinstance(unit_tokens(1.0, []), int)
    assert unit_tokens(1, [], listen=True) == 13
    assert unit_tokens(1, [], text_tokens=20) == 12 + 20 + 1
    assert unit_tokens(1, [(960, 540)], listen=True) == 12 + 66 + 1  # 1 fps camera: the 79 tok/unit of PR #7271
    assert unit_tokens(1, [(960, 540), (960, 540)], listen=True) == 12 + 264 + 1  # stacked: 277
    with pytest.raises(ValueError, match="not both"):
        unit_tokens(1, [], text_tokens=3, listen=True)
    for bad in (-1, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="audio_units"):
            unit_tokens(bad, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="text_tokens"):
        unit_tokens(1, [], text_tokens=-2)


def test_session_context_tokens() -> None:
    assert session_context_tokens(0) == 48
    assert session_context_tokens(16000 * 5) == 48 + 50 + 8  # a 5 s reference voice
    assert session_context_tokens(1599) == 48 + 0 + 8
    assert session_context_tokens(16000, exact_tokens=5) == 5
    with pytest.raises(ValueError):
        session_context_tokens(-1)


def test_example_first_append() -> None:
    """vLLM-Omni's example: 2 s of audio + a 960x540 pair, exact context 5 => 5 + 12 - 1 + 4 * 66."""
    frames = [(960, 540), (960, 540)]
    assert first_append_units(32000) == 1
    assert scheduler_append_tokens(32000, frames, seq=1, context_tokens=5) == 5 + 12 - 1 + 4 * BLOCK


def test_scheduler_append_tokens() -> None:
    pair = [(448, 448), (448, 448)]
    assert scheduler_append_tokens(16000, seq=1, context_tokens=0) == 12 - 1
    assert scheduler_append_tokens(16000, pair, seq=2) == 12 + 2 * BLOCK + 1
    assert scheduler_append_tokens(16000, seq=2) == 13  # later whole-unit appends +1
    assert scheduler_append_tokens(3200, seq=2) == 16  # 200 ms partial: clamp(2 + 8, 16, 768)
    assert scheduler_append_tokens(3200, seq=1, context_tokens=48) == 16 + 48
    assert scheduler_append_tokens(None, seq=2) == 64
    assert first_append_units(16480) is None and first_append_units(0) is None


def test_minutes_to_full_matches_the_reference_arithmetic() -> None:
    """Audio-only listening fills 40960 in ~50 min; a 1 fps frame in ~8.5 min; a stacked pair in ~2.4 min."""
    per_unit = {
        "audio": unit_tokens(1, [], listen=True),
        "frame": unit_tokens(1, [(960, 540)], listen=True),
        "stacked": unit_tokens(1, [(960, 540)] * 2, listen=True),
    }
    minutes = {k: MAX_CONTEXT_TOKENS / v / 60 for k, v in per_unit.items()}
    assert 50 <= minutes["audio"] < 55 and 8 < minutes["frame"] < 9 and 2.3 < minutes["stacked"] < 2.6
