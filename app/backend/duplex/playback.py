"""The playback clock: what a response has released, what the user has heard of it, and the
finished responses kept for ``playback.ack``.

Server side, a response's playback clock runs with the session's input audio from the moment
its first audio was released (the client plays while it streams the microphone). Audio is
released at most :data:`RELEASE_LEAD_UNITS` units ahead of that clock, so the server's view of
the response stays close to what the user hears and a soft interrupt can end it; the response
stays open while its audio is, by that clock, still playing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.backend.protocol.commands import PlaybackAck, ProtocolError
from app.constants import INPUT_SAMPLE_RATE_HZ

RELEASE_LEAD_UNITS = 1.5
"""Audio is released at most this many units ahead of the response's playback clock."""

HEARD_TOLERANCE_MS = 1.0
"""A delta counts as heard in full when the acknowledged position is this close to its end, ms
(clients send whole milliseconds: 2356 for a reply of 2356.8 ms must not lose its last word)."""

OPEN_TAIL_UNITS = 0.5
"""A response whose audio is all sent closes once its clock is within this many units of the end."""


@dataclass
class ResponseClock:
    """Released audio and text of one response, and its playback clock.

    Attributes:
        speak_sample: session input sample (16 kHz) at which its first audio was released;
            None before.
        sent_ms: audio released so far, ms.
        text_sent: transcript released so far.
        marks: ``(text_chars, audio_end_ms)`` after each audio delta.
    """

    speak_sample: int | None = None
    sent_ms: float = 0.0
    text_sent: str = ""
    marks: list[tuple[int, float]] = field(default_factory=list)

    @property
    def started(self) -> bool:
        """Whether anything was released."""
        return self.speak_sample is not None

    def start(self, now_sample: int) -> None:
        """The first release happens at input sample ``now_sample``."""
        self.speak_sample = now_sample

    def release(self, text: str, audio_ms: float) -> None:
        """Record a released delta: ``text`` and ``audio_ms`` of audio (0 for text only)."""
        self.text_sent += text
        if audio_ms:
            self.sent_ms += audio_ms
            self.marks.append((len(self.text_sent), self.sent_ms))

    def played_ms(self, now_sample: int) -> float:
        """How much has played by the clock at input sample ``now_sample`` (16 kHz), ms (0 before the first audio)."""
        if self.speak_sample is None:
            return 0.0
        return (now_sample - self.speak_sample) * 1000.0 / INPUT_SAMPLE_RATE_HZ

    def may_release(self, played_ms: float, unit_ms: int) -> bool:
        """Whether one more delta may go out now (paced at most :data:`RELEASE_LEAD_UNITS` ahead)."""
        return self.sent_ms < played_ms + RELEASE_LEAD_UNITS * unit_ms

    def done_playing(self, played_ms: float, unit_ms: int) -> bool:
        """Whether everything released has (nearly) played, so the response may close."""
        return played_ms >= self.sent_ms - OPEN_TAIL_UNITS * unit_ms


@dataclass
class FinishedResponse:
    """What the session remembers of a finished response for ``playback.ack``.

    Attributes:
        response_id: the response.
        text: its full transcript as sent.
        marks: ``(text_chars, audio_end_ms)`` after each delta.
        turn_id: the session's committed-turn counter when it finished.
        user_item_id: the user item it answered.
    """

    response_id: str
    text: str
    marks: list[tuple[int, float]]
    turn_id: int
    user_item_id: str = ""

    @property
    def item_id(self) -> str:
        """Its assistant item id (``item_<response_id>``)."""
        return f"item_{self.response_id}"


@dataclass(frozen=True)
class Heard:
    """What a ``playback.ack`` established.

    Attributes:
        response: the finished response acknowledged.
        text: the part of its transcript the user heard.
        committed_ms: the acknowledged position, capped at the audio released, ms.
        delivered_ms: the audio released for the response, ms.
    """

    response: FinishedResponse
    text: str
    committed_ms: float
    delivered_ms: float = 0.0


class PlaybackLedger:
    """Finished responses (the newest ``cache_size``) and the acknowledgements of their playback.

    Args:
        cache_size: responses kept (``duplex_session.completed_append_cache_size``).
    """

    def __init__(self, cache_size: int) -> None:
        self._cache_size = int(cache_size)
        self._finished: dict[str, FinishedResponse] = {}

    def remember(self, fin: FinishedResponse) -> None:
        """Keep a finished response (the oldest is forgotten past the cache size)."""
        self._finished[fin.response_id] = fin
        while len(self._finished) > self._cache_size:
            self._finished.pop(next(iter(self._finished)))

    def last_answer_to(self, user_item_id: str) -> FinishedResponse | None:
        """The newest finished response to user item ``user_item_id``, if it is still kept."""
        for fin in reversed(self._finished.values()):
            if fin.user_item_id == user_item_id:
                return fin
        return None

    def acknowledge(self, msg: PlaybackAck, turn_id: int) -> Heard:
        """Resolve a ``playback.ack`` against the finished responses.

        Raises:
            ProtocolError: ``missing_item_id`` (neither id given), ``playback_item_not_found``
                (unknown or forgotten response), ``playback_ack_too_late`` (a later user turn
                was committed after the response finished).
        """
        rid = msg.response_id or (msg.item_id[5:] if msg.item_id and msg.item_id.startswith("item_") else None)
        if rid is None:
            raise ProtocolError("missing_item_id", "playback.ack needs response_id or item_id", event_id=msg.event_id)
        fin = self._finished.get(rid)
        if fin is None:
            raise ProtocolError("playback_item_not_found", f"no finished response '{rid}'", event_id=msg.event_id)
        if fin.turn_id < turn_id:
            raise ProtocolError("playback_ack_too_late", "a later user turn was already committed",
                                event_id=msg.event_id)
        delivered = fin.marks[-1][1] if fin.marks else 0.0
        return Heard(fin, heard_text(fin.text, fin.marks, msg.played_ms), min(msg.played_ms, delivered), delivered)


def clamp_ack(played_ms: float, delivered_ms: float) -> dict[str, float | None]:
    """``playback.acknowledged`` fields for a client position ``played_ms`` against ``delivered_ms``
    of audio delivered: ``committed_ms`` (the position, capped at the audio delivered) and
    ``delivered_ms`` (set only when the position was beyond it, to say that it was clamped)."""
    if played_ms > delivered_ms + HEARD_TOLERANCE_MS:
        return {"committed_ms": delivered_ms, "delivered_ms": delivered_ms}
    return {"committed_ms": min(played_ms, delivered_ms), "delivered_ms": None}


def heard_text(text: str, marks: list[tuple[int, float]], played_ms: float) -> str:
    """The part of ``text`` the user heard after ``played_ms`` of playback.

    Whole deltas up to ``played_ms`` count fully; inside a delta the cut is proportional to
    duration (vLLM-Omni's ``audio_text_marks`` rule), then moved back to a word boundary.

    Args:
        text: the response transcript.
        marks: ``(text_chars, audio_end_ms)`` after each delta, increasing.
        played_ms: playback position, ms.
    """
    prev_chars, prev_ms = 0, 0.0
    for chars, end_ms in marks:
        if played_ms + HEARD_TOLERANCE_MS >= end_ms:
            prev_chars, prev_ms = chars, end_ms
            continue
        span = max(end_ms - prev_ms, 1e-6)
        cut = prev_chars + int((chars - prev_chars) * max(0.0, played_ms - prev_ms) / span)
        part = text[:cut]
        if cut < len(text) and cut > prev_chars and " " in part[prev_chars:]:
            part = part[: part.rfind(" ")]
        elif cut < chars:
            part = text[:prev_chars]
        return part.rstrip()
    return text[:prev_chars] if marks else ""
