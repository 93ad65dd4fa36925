"""Live page handlers by ``webrtc_id``, and the retry hint of a "server full" refusal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.ui.handler import OmniHandler

DEFAULT_RETRY_S = 30
"""Retry hint of a "server full" refusal when the session manager gives none, seconds."""


def retry_after_s(exc: Any) -> int:
    """When to try again after a capacity refusal, seconds: the refusal's own hint when it has one
    (``retry_after_ms``), else :data:`DEFAULT_RETRY_S`."""
    ms = getattr(exc, "retry_after_ms", None)
    return max(1, round(ms / 1000)) if isinstance(ms, (int, float)) and ms > 0 else DEFAULT_RETRY_S


class HandlerRegistry:
    """Live handlers by ``webrtc_id`` (side routes and the "force listen" button find them here)."""

    def __init__(self) -> None:
        self._by_id: dict[str, OmniHandler] = {}

    def add(self, webrtc_id: str, handler: OmniHandler) -> None:
        """Register a started handler."""
        self._by_id[webrtc_id] = handler

    def remove(self, webrtc_id: str, handler: OmniHandler) -> None:
        """Forget a handler (only if it is still the registered one)."""
        if self._by_id.get(webrtc_id) is handler:
            del self._by_id[webrtc_id]

    def get(self, webrtc_id: str | None) -> OmniHandler | None:
        """The handler of ``webrtc_id``, if live."""
        return self._by_id.get(webrtc_id or "")

    def __len__(self) -> int:
        return len(self._by_id)
