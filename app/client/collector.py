"""Accumulate a session's server events for assertions, result files and latency figures.

:class:`EventCollector` keeps every event (unbounded: attach it to short probe/demo sessions,
not to an hours-long production client), the decoded output audio per response, and the
client-monotonic receive time of each event. All times are ``time.monotonic()`` seconds; all
durations it reports are milliseconds.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import math
import time
from collections.abc import Mapping
from typing import Any

from app.client.config import AudioFormat
from app.client.protocol import (
    AUDIO_DELTA,
    TEXT_DELTA_TYPES,
    event_response_id,
    event_type,
)
from app.constants import OUTPUT_SAMPLE_RATE_HZ

RECEIVED_AT_KEY = "_client_received_at_s"
"""Key the client adds to each received event: ``time.monotonic()`` at receipt, seconds."""


def decode_audio_delta(event: Mapping[str, Any]) -> bytes:
    """Decoded bytes of an audio delta's ``delta`` (or ``audio``) field; ``b""`` if absent/invalid."""
    payload = event.get("delta") or event.get("audio")
    if not isinstance(payload, str) or not payload:
        return b""
    try:
        return base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError):
        return b""


def _rounded_ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def interval_summary(values_ms: list[float]) -> dict[str, float | int]:
    """``{count, mean, p50, p95, max}`` of finite non-negative values (nearest-rank percentiles)."""
    clean = sorted(round(value, 3) for value in values_ms if math.isfinite(value) and value >= 0)
    if not clean:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}

    def nearest_rank(fraction: float) -> float:
        return clean[min(len(clean) - 1, max(0, math.ceil(fraction * len(clean)) - 1))]

    return {
        "count": len(clean),
        "mean": round(sum(clean) / len(clean), 3),
        "p50": nearest_rank(0.50),
        "p95": nearest_rank(0.95),
        "max": clean[-1],
    }


class EventCollector:
    """Every server event of one session, plus per-response audio and text.

    Attributes:
        events: raw event dicts in arrival order, each with ``_client_received_at_s``.
        response_ids: ids of ``response.created`` events, in order, without duplicates.
        output_sample_rate_hz: rate of output audio (updated from ``sample_rate_hz`` on deltas).
    """

    def __init__(self, *, output_sample_rate_hz: int = OUTPUT_SAMPLE_RATE_HZ) -> None:
        self.events: list[dict[str, Any]] = []
        self.response_ids: list[str] = []
        self.output_sample_rate_hz = output_sample_rate_hz
        self._audio: list[tuple[str | None, bytes]] = []

    def add(self, event: dict[str, Any], *, received_at_s: float | None = None) -> dict[str, Any]:
        """Store one event, stamping ``_client_received_at_s`` if it has none; returns it.

        Args:
            event: the decoded server event (stored as-is, not copied).
            received_at_s: receive time, ``time.monotonic()`` seconds; default now.
        """
        if RECEIVED_AT_KEY not in event:
            event[RECEIVED_AT_KEY] = (
                time.monotonic() if received_at_s is None else float(received_at_s)
            )
        self.events.append(event)
        kind = event_type(event)
        response_id = event_response_id(event)
        if kind == "response.created" and response_id and response_id not in self.response_ids:
            self.response_ids.append(response_id)
        elif kind == AUDIO_DELTA:
            chunk = decode_audio_delta(event)
            if chunk:
                self._audio.append((response_id, chunk))
            rate = event.get("sample_rate_hz")
            if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0:
                self.output_sample_rate_hz = rate
        return event

    def count(self, event_type_name: str) -> int:
        """Number of events of one type (beta and GA names count as the same type)."""
        wanted = event_type({"type": event_type_name})
        return sum(event_type(event) == wanted for event in self.events)

    def errors(self) -> list[dict[str, Any]]:
        """All ``error`` events, in order."""
        return [event for event in self.events if event_type(event) == "error"]

    def audio_bytes(self, response_id: str | None = None) -> bytes:
        """Output PCM bytes of one response, or of all audio deltas when ``response_id`` is ``None``."""
        return b"".join(
            chunk for rid, chunk in self._audio if response_id is None or rid == response_id
        )

    def audio_duration_ms(self, response_id: str | None = None) -> float:
        """Duration, ms, of :meth:`audio_bytes` (PCM16 at ``output_sample_rate_hz``)."""
        output_format = AudioFormat("pcm16", self.output_sample_rate_hz)
        return output_format.duration_ms(len(self.audio_bytes(response_id)))

    def response_text(self, response_id: str | None = None) -> str:
        """Concatenated transcript/text deltas of one response (all responses when ``None``)."""
        return "".join(
            str(event.get("delta") or "")
            for event in self.events
            if event_type(event) in TEXT_DELTA_TYPES
            and (response_id is None or event_response_id(event) == response_id)
        )

    def response_is_done(self, response_id: str) -> bool:
        """Whether a ``response.done`` for ``response_id`` has arrived."""
        return any(
            event_type(event) == "response.done" and event_response_id(event) == response_id
            for event in self.events
        )

    def first(
        self,
        *event_types: str,
        after_s: float = float("-inf"),
        response_id: str | None = None,
        non_empty_delta: bool = False,
    ) -> dict[str, Any] | None:
        """First event of one of ``event_types`` received at or after ``after_s``.

        Args:
            event_types: GA or beta names.
            after_s: monotonic lower bound on receive time, seconds.
            response_id: only events of this response when given.
            non_empty_delta: skip events whose ``delta`` is empty or missing.
        """
        wanted = {event_type({"type": name}) for name in event_types}
        for event in self.events:
            if event[RECEIVED_AT_KEY] < after_s or event_type(event) not in wanted:
                continue
            if response_id is not None and event_response_id(event) != response_id:
                continue
            if non_empty_delta and not event.get("delta"):
                continue
            return event
        return None

    def first_received_at(self, *event_types: str, after_s: float = float("-inf")) -> float | None:
        """Receive time (monotonic s) of the first matching event at/after ``after_s``, else ``None``."""
        event = self.first(*event_types, after_s=after_s)
        return None if event is None else float(event[RECEIVED_AT_KEY])

    def timing_summary(
        self,
        *,
        after_s: float = float("-inf"),
        input_committed_at_s: float | None = None,
        response_id: str | None = None,
    ) -> dict[str, Any]:
        """Client-observed latency figures of one window.

        Only events received at/after ``after_s`` (and of ``response_id`` when given) count.
        The origin is ``input_committed_at_s`` (the commit's send time) when given, else the
        receive time of the window's first ``response.created``.

        Returns:
            ``{}`` when no audio delta is in the window, else a dict with ``measurement_origin``
            (when the window's first audio came before the commit was sent, the origin-based
            figures are ``None`` and ``measurement_origin`` says so: they would be negative),
            ``ttft_ms`` (origin -> first non-empty text delta; ``None`` if none),
            ``ttfp_ms`` (origin -> first audio delta), ``response_created_to_first_audio_ms``,
            ``commit_to_first_audio_ms``, ``audio_chunk_count``, ``inter_chunk_interval_ms``
            (``{count, mean, p50, p95, max}``), ``max_chunk_gap_ms``, ``audio_generation_ms``
            (origin -> last audio delta) and ``audio_duration_ms`` (from the window's audio bytes).
            Times are ms, rounded to µs. RTF is left to the caller (generation / duration).
        """
        window = [
            event
            for event in self.events
            if event[RECEIVED_AT_KEY] >= after_s
            and (response_id is None or event_response_id(event) == response_id)
        ]
        audio = [
            (float(event[RECEIVED_AT_KEY]), len(decode_audio_delta(event)))
            for event in window
            if event_type(event) == AUDIO_DELTA
        ]
        audio_times = [received_at for received_at, size in audio if size]
        if not audio_times:
            return {}
        created_at = next(
            (float(e[RECEIVED_AT_KEY]) for e in window if event_type(e) == "response.created"), None
        )
        text_at = next(
            (
                float(e[RECEIVED_AT_KEY])
                for e in window
                if event_type(e) in TEXT_DELTA_TYPES and e.get("delta")
            ),
            None,
        )
        output_format = AudioFormat("pcm16", self.output_sample_rate_hz)
        origin = input_committed_at_s if input_committed_at_s is not None else created_at
        early = origin is not None and audio_times[0] < origin  # the reply began before the commit
        if early:  # origin-based figures would be negative: none, and say why
            origin = input_committed_at_s = None
        gaps = [(b - a) * 1000.0 for a, b in itertools.pairwise(audio_times)]
        gap_summary = interval_summary(gaps)
        return {
            "source": "client_monotonic_receive",
            "measurement_origin": (
                "none: the reply's audio began before the commit was sent (read the speech-end figures)"
                if early
                else "input_audio_buffer.commit send"
                if input_committed_at_s is not None
                else "response.created receive"
            ),
            "ttft_ms": _rounded_ms(text_at - origin)
            if text_at is not None and origin is not None and text_at >= origin
            else None,
            "ttfp_ms": _rounded_ms(audio_times[0] - origin) if origin is not None else None,
            "response_created_to_first_audio_ms": (
                _rounded_ms(audio_times[0] - created_at) if created_at is not None else None
            ),
            "commit_to_first_audio_ms": (
                _rounded_ms(audio_times[0] - input_committed_at_s)
                if input_committed_at_s is not None
                else None
            ),
            "audio_chunk_count": len(audio_times),
            "inter_chunk_interval_ms": gap_summary,
            "max_chunk_gap_ms": gap_summary["max"],
            "audio_generation_ms": (
                _rounded_ms(max(0.0, audio_times[-1] - origin)) if origin is not None else None
            ),
            "audio_duration_ms": round(
                output_format.duration_ms(sum(size for _, size in audio)), 3
            ),
        }
