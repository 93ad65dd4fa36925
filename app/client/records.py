"""What a duplex client has sent, as records the latency tools read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AppendRecord:
    """One sent ``input_audio_buffer.append``.

    Attributes:
        event_id: the stamped client ``event_id``.
        audio_start_ms: cumulative input audio before this append, ms.
        audio_end_ms: cumulative input audio including this append, ms (unrounded).
        sent_at_s: ``time.monotonic()`` right after the frame was handed to the socket.
        frame_count: number of ``video_frames`` entries it carried.
    """

    event_id: str
    audio_start_ms: float
    audio_end_ms: float
    sent_at_s: float
    frame_count: int
