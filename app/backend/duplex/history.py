"""The conversation history of a duplex session, as the Thinker sees it: turns keyed by item id."""

from __future__ import annotations

from app.backend.pipeline.stages import Turn


class History:
    """Finished turns in order, each under its conversation item id (``item_*``).

    An item keeps its place when its text is replaced (a truncating ``playback.ack``); a dropped
    item (context eviction) can come back at the end (an ``ack_only`` ack after eviction).
    """

    def __init__(self) -> None:
        self._items: dict[str, Turn] = {}

    def __len__(self) -> int:
        return len(self._items)

    def turns(self) -> list[Turn]:
        """A copy of the turns, oldest first."""
        return list(self._items.values())

    def has(self, item_id: str) -> bool:
        """Whether item ``item_id`` is in the history."""
        return item_id in self._items

    def put(self, item_id: str, turn: Turn) -> None:
        """Append ``turn`` under ``item_id``, or replace that item's text where it stands."""
        self._items[item_id] = turn

    def drop(self, item_id: str) -> bool:
        """Remove item ``item_id``; returns whether it was there."""
        return self._items.pop(item_id, None) is not None
