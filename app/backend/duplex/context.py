"""The Thinker context of a duplex session, counted per unit, with eviction past a watermark.

Each closed unit adds its tokens (audio, frames, text; MiniCPM-o 4.5's accounting from
:mod:`app.backend.duplex.token_budget`). When the total passes ``watermark_ratio * max_tokens`` the
oldest units are dropped, whole, while the fixed prefix (system prompt + reference audio)
stays; conversation items that lived only in dropped units are reported for deletion.
Only when nothing can be dropped and the budget is still exceeded is the context
overflowing (the session then ends with ``context_length_exceeded``).

vLLM-Omni has no eviction and ends a stacked-frame session after ~2.5 minutes; this
mirrors the later window-KV design (keep prefix, drop oldest whole units).
"""

from __future__ import annotations

from collections import deque

from app.backend.duplex.token_budget import session_context_tokens, unit_tokens
from app.constants import AUDIO_TOKENS_PER_UNIT


class ContextWindow:
    """Token accounting for one session.

    Args:
        max_tokens: the Thinker's context budget, tokens.
        watermark_ratio: evict once the total exceeds this share of ``max_tokens``.
    """

    def __init__(self, max_tokens: int, watermark_ratio: float) -> None:
        self.max_tokens = int(max_tokens)
        self._watermark = int(max_tokens * watermark_ratio)
        self.prefix = 0
        self._units: deque[tuple[int, int]] = deque()  # (unit_index, tokens)
        self._units_total = 0
        self._items: dict[str, int] = {}  # item id -> last unit index it lives in
        self.evicted_units = 0

    @property
    def total(self) -> int:
        """Tokens in context now (prefix + retained units)."""
        return self.prefix + self._units_total

    def set_prefix(self, ref_audio_samples: int) -> None:
        """Set the fixed prefix from the reference audio length (16 kHz samples)."""
        self.prefix = session_context_tokens(ref_audio_samples)

    def note_item(self, item_id: str, unit_index: int) -> None:
        """Record that conversation item ``item_id`` ends in unit ``unit_index``."""
        self._items[item_id] = unit_index

    def add_unit(
        self, unit_index: int, unit_ms: int, frame_sizes: list[tuple[int, int]], text_tokens: int, listen: bool
    ) -> tuple[list[str], bool]:
        """Account one closed unit and evict if needed.

        Args:
            unit_index: the unit.
            unit_ms: its length, ms (audio tokens scale with it).
            frame_sizes: ``(width, height)`` of each frame of the unit (base first).
            text_tokens: text tokens the model spoke in it.
            listen: the unit was a listen unit.

        Returns:
            ``(evicted item ids, overflow)``; ``overflow`` is True when the budget is
            exceeded and no unit is left to drop.
        """
        audio = round(AUDIO_TOKENS_PER_UNIT * unit_ms / 1000.0)
        tokens = audio + unit_tokens(0, frame_sizes, text_tokens=text_tokens, listen=listen and not text_tokens)
        self._units.append((unit_index, tokens))
        self._units_total += tokens
        evicted: list[str] = []
        if self.total > self._watermark:
            while self._units and self.total > self._watermark:
                _, t = self._units.popleft()
                self._units_total -= t
                self.evicted_units += 1
            oldest = self._units[0][0] if self._units else unit_index + 1
            for item_id, last in list(self._items.items()):
                if last < oldest:
                    evicted.append(item_id)
                    del self._items[item_id]
        return evicted, self.total > self.max_tokens
