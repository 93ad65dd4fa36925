"""Demote FastRTC's and aiortc's warnings about ICE candidates that arrive before the offer.

FastRTC's page component trickles its ICE candidates to the server as the browser gathers them,
each in its own request, while the offer is still being answered. The ones that come first find
no peer connection yet (fastrtc 0.0.34, ``handle_offer``: "Received ICE candidate for unknown
connection") or one without its remote description (aiortc 1.16, ``addIceCandidate``: "called
without remote description"), and are dropped. Nothing is lost: the offer's SDP and the STUN
checks that follow carry the same addresses (loopback, LAN) and the call connects, so every call
start wrote one to three WARNING lines that call for no action. :class:`EarlyCandidateFilter`
turns exactly those two into DEBUG records; any other warning of those loggers stays one.
"""

from __future__ import annotations

import logging
from typing import Final

EARLY_CANDIDATE: Final[dict[str, str]] = {
    "fastrtc.webrtc_connection_mixin": "Received ICE candidate for unknown connection",
    "aiortc.rtcpeerconnection": "RTCPeerConnection addIceCandidate called without remote description",
}
"""Logger name -> the start of its message about a candidate that came before the offer."""


class EarlyCandidateFilter(logging.Filter):
    """On one of :data:`EARLY_CANDIDATE`'s loggers: its early-candidate WARNING becomes a DEBUG
    record (kept only when that logger logs at DEBUG); every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        prefix = EARLY_CANDIDATE.get(record.name)
        if prefix is None or record.levelno != logging.WARNING or not record.getMessage().startswith(prefix):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def install() -> None:
    """Put :class:`EarlyCandidateFilter` on the loggers of :data:`EARLY_CANDIDATE` (idempotent)."""
    for name in EARLY_CANDIDATE:
        logger = logging.getLogger(name)
        if not any(isinstance(f, EarlyCandidateFilter) for f in logger.filters):
            logger.addFilter(EarlyCandidateFilter())
