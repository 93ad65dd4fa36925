"""Context accounting per unit and eviction of the oldest units past the watermark."""

from app.backend.duplex.context import ContextWindow
from app.constants import AUDIO_TOKENS_PER_UNIT, FRAME_BLOCK_TOKENS


def test_units_add_audio_frame_and_decision_tokens():
    w = ContextWindow(10_000, 0.85)
    w.add_unit(0, 1000, [], 0, listen=True)
    assert w.total == AUDIO_TOKENS_PER_UNIT + 1
    w.add_unit(1, 1000, [(320, 240)], 0, listen=True)
    assert w.total == 2 * (AUDIO_TOKENS_PER_UNIT + 1) + FRAME_BLOCK_TOKENS
    w.add_unit(2, 1000, [(960, 540), (960, 540)], 7, listen=False)
    assert w.total == 2 * (AUDIO_TOKENS_PER_UNIT + 1) + FRAME_BLOCK_TOKENS + AUDIO_TOKENS_PER_UNIT + 264 + 8


def test_half_second_units_cost_half_the_audio():
    w = ContextWindow(10_000, 0.85)
    w.add_unit(0, 500, [], 0, listen=True)
    assert w.total == AUDIO_TOKENS_PER_UNIT // 2 + 1


def test_eviction_keeps_prefix_drops_oldest_units_and_their_items():
    w = ContextWindow(200, 0.5)  # watermark 100
    w.set_prefix(16_000)  # 1 s of reference audio
    prefix = w.prefix
    assert prefix > 0
    w.note_item("item_old", 0)
    evicted_all = []
    for k in range(40):
        w.note_item("item_new", k)
        evicted, overflow = w.add_unit(k, 1000, [], 0, listen=True)
        evicted_all += evicted
        assert not overflow
        assert w.total <= 100
    assert w.prefix == prefix
    assert "item_old" in evicted_all and "item_new" not in evicted_all
    assert w.evicted_units > 0


def test_overflow_only_when_nothing_can_be_dropped():
    w = ContextWindow(50, 0.85)
    w.set_prefix(16_000 * 30)  # 30 s reference: prefix alone beyond the budget
    _, overflow = w.add_unit(0, 1000, [], 0, listen=True)
    assert overflow
