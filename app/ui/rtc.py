"""Receive-side tuning of aiortc for the mic path: an audio jitter buffer without prefetch.

aiortc's ``RTCRtpReceiver`` puts every audio packet through ``JitterBuffer(capacity=16,
prefetch=4)``: a packet is decoded only once four newer ones have arrived (80 ms of Opus at
20 ms a packet), so every word reaches the VAD 80 ms late, and the end of the user's turn too.
Worse, a lost packet stalls it until 16 newer ones have piled up and it then hands out one
frame per arriving packet, so one loss leaves the mic path ~300 ms late for the rest of the
call (aiortc issue #543).

:class:`AudioJitterBuffer` replaces it for audio receivers: a packet that is next in sequence is
decoded at once (Opus carries one frame per packet); a gap waits for at most
:data:`REORDER_PACKETS` newer packets (late, reordered packets still fill it), then the missing
packet counts as lost and everything buffered behind it is decoded at once, so the latency
never builds up. Installed by :func:`install` (idempotent) from :func:`app.ui.page.mount_ui`:
it wraps ``RTCRtpReceiver.__init__`` and swaps the buffer of audio receivers only (video keeps
aiortc's). It needs three private attributes of aiortc's receiver (checked at install: without
them nothing is changed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

log = logging.getLogger(__name__)

REORDER_PACKETS: Final[int] = 3
"""A missing packet counts as lost once this many newer ones have arrived (3 x 20 ms)."""

_PRIVATE = ("_RTCRtpReceiver__jitter_buffer", "_RTCRtpReceiver__decoder_queue", "_RTCRtpReceiver__codecs",
            "_RTCRtpReceiver__timestamp_mapper")


class AudioJitterBuffer:
    """In-order audio packets out at once; a gap held for at most ``reorder`` newer packets.

    Same interface as aiortc's ``JitterBuffer`` for what ``RTCRtpReceiver`` uses: ``add(packet)``
    returns ``(pli_flag, frame_or_None)``. When a gap closes (or is given up), more than one
    frame may be ready: all but the newest go to ``deliver`` first, in order, and the newest is
    returned (the receiver decodes it right after them).

    Args:
        deliver: takes ``(packet, JitterFrame)`` for the extra frames (the receiver's decoder queue).
        reorder: :data:`REORDER_PACKETS`.
    """

    def __init__(self, deliver: Callable[[Any, Any], None], *, reorder: int = REORDER_PACKETS) -> None:
        from aiortc.jitterbuffer import JitterFrame

        self._frame = JitterFrame
        self._deliver = deliver
        self._reorder = max(0, int(reorder))
        self._next: int | None = None
        self._held: dict[int, Any] = {}
        self.lost = 0
        """Packets given up as lost so far."""

    @property
    def capacity(self) -> int:  # (aiortc's interface)
        return 16

    def add(self, packet: Any) -> tuple[bool, Any]:
        """One packet in; the frame to decode now (or None)."""
        seq = int(packet.sequence_number)
        if self._next is None:
            self._next = seq
        ahead = (seq - self._next) & 0xFFFF
        if ahead >= 0x8000:  # older than what was already handed out: too late (or a duplicate)
            return False, None
        self._held[seq] = packet
        ready: list[Any] = []
        while True:
            p = self._held.pop(self._next, None)
            if p is not None:
                ready.append(p)
                self._next = (self._next + 1) & 0xFFFF
                continue
            if len(self._held) >= max(1, self._reorder):  # waited long enough: the missing one is lost
                self.lost += 1
                self._next = (self._next + 1) & 0xFFFF
                continue
            break
        if not ready:
            return False, None
        for p in ready[:-1]:
            self._deliver(p, self._to_frame(p))
        return False, self._to_frame(ready[-1])

    def _to_frame(self, packet: Any) -> Any:
        return self._frame(data=packet._data, timestamp=packet.timestamp)

    def remove(self, count: int) -> None:  # (aiortc's interface; never needed here)
        self._held.clear()


_installed = False


def install() -> bool:
    """Give every aiortc audio receiver created from now on an :class:`AudioJitterBuffer`.

    Returns:
        Whether it is installed (False when aiortc's receiver does not look as expected).
    """
    global _installed
    if _installed:
        return True
    try:
        from aiortc import rtcrtpreceiver
    except ImportError:
        return False
    cls = rtcrtpreceiver.RTCRtpReceiver
    orig_init = cls.__init__

    def __init__(self: Any, kind: str, transport: Any) -> None:
        orig_init(self, kind, transport)
        if kind != "audio" or not all(hasattr(self, a) for a in _PRIVATE):
            return
        queue = self._RTCRtpReceiver__decoder_queue
        codecs = self._RTCRtpReceiver__codecs
        mapper = self._RTCRtpReceiver__timestamp_mapper

        def deliver(packet: Any, frame: Any) -> None:
            codec = codecs.get(packet.payload_type)
            if codec is None:
                return
            frame.timestamp = mapper.map(frame.timestamp)
            queue.put((codec, frame))

        self._RTCRtpReceiver__jitter_buffer = AudioJitterBuffer(deliver)

    # aiortc's receiver must still keep the buffer, the decoder queue, the codecs and the
    # timestamp mapper under these names (name-mangled private attributes, set in __init__)
    names = set(orig_init.__code__.co_names) | set(cls._handle_rtp_packet.__code__.co_names)
    if not set(_PRIVATE) <= names:
        log.warning("aiortc's RTCRtpReceiver changed; keeping its audio jitter buffer")
        return False
    cls.__init__ = __init__  # type: ignore[method-assign]
    _installed = True
    return True
