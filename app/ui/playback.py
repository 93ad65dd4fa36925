"""Real-time pacing of assistant speech toward the browser, with captions that follow playback.

The session hands out audio up to two units ahead of time; FastRTC would queue all of it at
once and play it in real time. Keeping the backlog here instead (and feeding FastRTC only a
short lead) gives two things: captions are released when their audio actually starts
playing, and a flush drops everything not yet heard at once (``clear()`` here plus
FastRTC's ``clear_queue()`` for the short lead already handed over).

Pure logic, no FastRTC or asyncio: time is passed in, so it is unit-testable.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

LEAD_S = 0.25
"""Audio handed to FastRTC ahead of the playback clock, seconds (its queue is flushed on barge-in)."""

SLICE_S = 0.06
"""Length of each piece handed to FastRTC, seconds (FastRTC re-chunks to 20 ms frames)."""

TRIM_RMS = 0.001
"""A reply's leading audio quieter than this (RMS of 5 ms windows, -60 dBFS) is not sent: the
tiny voice starts every utterance with ~40 ms of digital silence, which would only delay the
first audible sample."""

TRIM_KEEP_S = 0.005
"""Quiet audio kept before the first window above :data:`TRIM_RMS`, seconds."""

TRIM_MAX_S = 0.2
"""At most this much leading audio is trimmed, seconds."""


@dataclass
class _Segment:
    response_id: str
    audio: np.ndarray
    text: str = ""
    pos: int = 0
    text_released: bool = False


@dataclass
class Released:
    """What :meth:`Playback.pop_due` hands out.

    Attributes:
        audio: float32 mono slice at the playback rate (may be empty when only text is due).
        captions: ``(response_id, text)`` pieces whose audio starts in this slice.
        first_of: response ids whose first audio sample is in this slice.
        response_id: the response of the slice's first audio sample (None when no audio).
        gap_s: how long the playback clock had run dry before this slice continued the same
            response (an underrun at the source: the page hears a gap), seconds; 0 otherwise.
    """

    audio: np.ndarray
    captions: list[tuple[str, str]] = field(default_factory=list)
    first_of: list[str] = field(default_factory=list)
    response_id: str | None = None
    gap_s: float = 0.0


def leading_quiet(audio: np.ndarray, rate_hz: int) -> int:
    """Samples of leading quiet to drop from a reply's first audio (see :data:`TRIM_RMS`)."""
    w = max(1, rate_hz // 200)
    head = audio[: int(TRIM_MAX_S * rate_hz)]
    m = head.size // w
    if not m:
        return 0
    loud = np.flatnonzero(np.sqrt(np.mean(np.square(head[: m * w].reshape(m, w)), axis=1)) > TRIM_RMS)
    first = int(loud[0]) * w if loud.size else m * w
    return max(0, min(first - int(TRIM_KEEP_S * rate_hz), audio.size - 1))


class Playback:
    """A backlog of assistant audio segments, released in real time.

    A reply's leading quiet is trimmed (:func:`leading_quiet`); it still counts as played in
    :attr:`played_ms`, which stays on the session's timeline of the reply's audio.

    Args:
        rate_hz: sample rate of the audio pushed and popped.
        lead_s: how far ahead of the playback clock audio is released.
        slice_s: size of each released slice.
    """

    def __init__(self, rate_hz: int, *, lead_s: float = LEAD_S, slice_s: float = SLICE_S) -> None:
        self.rate_hz = rate_hz
        self.lead_s = lead_s
        self._slice = max(1, round(slice_s * rate_hz))
        self._segments: deque[_Segment] = deque()
        self._play_end = 0.0  # monotonic time at which the audio released so far has played out
        self._last_released: str | None = None  # response id of the newest released audio
        self.played_ms: dict[str, float] = {}
        """Audio of each response released so far, ms (what the user heard, give or take the lead)."""
        self.started: set[str] = set()

    # ------------------------------------------------------------------ input
    def push(self, response_id: str, audio: np.ndarray, text: str = "") -> None:
        """Queue one audio delta (and the caption text it speaks, if already known)."""
        a = np.asarray(audio, dtype=np.float32).reshape(-1)
        if response_id not in self.played_ms and not any(s.response_id == response_id for s in self._segments):
            cut = leading_quiet(a, self.rate_hz)
            a = a[cut:]
            self.played_ms[response_id] = cut * 1000.0 / self.rate_hz
        self._segments.append(_Segment(response_id, a, text))

    def attach_text(self, response_id: str, text: str) -> str | None:
        """Attach caption text to the newest queued segment of ``response_id``.

        Returns:
            The text when it must be shown now (its audio already started or nothing of the
            response is queued), else None (it is released with its audio).
        """
        for seg in reversed(self._segments):
            if seg.response_id == response_id:
                if seg.text_released:
                    return text
                seg.text += text
                return None
        return text

    # ------------------------------------------------------------------ state
    def has_audio(self, response_id: str | None = None) -> bool:
        """True while audio (of ``response_id``, or any) waits to be released."""
        return any(s.pos < s.audio.size for s in self._segments
                   if response_id is None or s.response_id == response_id)

    def queued_responses(self) -> set[str]:
        """Response ids with audio still waiting."""
        return {s.response_id for s in self._segments if s.pos < s.audio.size}

    def playing_response(self, now: float) -> str | None:
        """The response heard now: the one whose released audio still plays, else the next queued."""
        if self._last_released is not None and now < self._play_end:
            return self._last_released
        return self._segments[0].response_id if self._segments else None

    def playing_until(self) -> float:
        """Monotonic time at which the released speech will have played out."""
        return self._play_end

    def is_playing(self, now: float) -> bool:
        """True while released speech is still playing (or more is waiting)."""
        return now < self._play_end or self.has_audio()

    # ------------------------------------------------------------------ output
    def next_due(self, now: float) -> float:
        """Seconds until the next slice may be released (0 when due now, inf when nothing waits)."""
        if not self._segments:
            return float("inf")
        return max(0.0, self._play_end - self.lead_s - now)

    def pop_due(self, now: float) -> Released | None:
        """Release the next slice if the playback clock allows it, else None."""
        if not self._segments or self.next_due(now) > 0:
            return None
        out = Released(np.zeros(0, np.float32))
        prev = self._last_released
        pieces: list[np.ndarray] = []
        need = self._slice
        while need > 0 and self._segments:
            seg = self._segments[0]
            if not seg.text_released:
                seg.text_released = True
                if seg.text:
                    out.captions.append((seg.response_id, seg.text))
            if seg.pos == 0 and seg.audio.size and seg.response_id not in self.started:
                self.started.add(seg.response_id)
                out.first_of.append(seg.response_id)
            take = seg.audio[seg.pos : seg.pos + need]
            seg.pos += take.size
            need -= take.size
            if take.size:
                if not pieces:
                    out.response_id = seg.response_id
                pieces.append(take)
                self._last_released = seg.response_id
                self.played_ms[seg.response_id] = self.played_ms.get(seg.response_id, 0.0) + \
                    take.size * 1000.0 / self.rate_hz
            if seg.pos >= seg.audio.size:
                self._segments.popleft()
                if take.size == 0 and not seg.audio.size:
                    continue
        if pieces:
            out.audio = np.concatenate(pieces)
            if out.response_id == prev and out.response_id not in out.first_of and 0.0 < self._play_end < now:
                out.gap_s = now - self._play_end
            self._play_end = max(self._play_end, now) + out.audio.size / self.rate_hz
        return out

    def clear(self, response_id: str | None = None, now: float | None = None) -> list[str]:
        """Drop queued audio (of one response, or all) and reset the playback clock.

        Args:
            response_id: the response to drop, or None for all.
            now: monotonic time; with it, a response whose released audio is still playing
                (the lead already handed to FastRTC) counts as cut even when nothing of it waits
                here (the session hands audio out at about the pace it plays).

        Returns:
            The response ids whose audio was cut (it had started playing and was not finished,
            or had not started at all).
        """
        ids = {s.response_id for s in self._segments if response_id is None or s.response_id == response_id}
        last = self._last_released
        if now is not None and last is not None and now < self._play_end and response_id in (None, last):
            ids.add(last)
        cut = sorted(ids)
        if response_id is None:
            self._segments.clear()
        else:
            self._segments = deque(s for s in self._segments if s.response_id != response_id)
        self._play_end = 0.0
        return cut
