"""Latency figures for a recorded duplex session: commit-origin and speech-end-origin.

Two clocks meet here. Wall-clock instants are client ``time.monotonic()`` seconds (the send
time of a client event, the receive time ``_client_received_at_s`` of a server event). Media
instants are milliseconds of cumulative input audio (the ``audio_end_ms`` clock of appends).
Reported figures are milliseconds unless the name ends in ``_s``; ratios are plain floats.

* Commit origin (vLLM-Omni ``realtime_duplex_demo.py``): ``ttft_ms`` / ``ttfp_ms`` = receive time
  of the first non-empty text delta / first audio delta received after the commit was sent,
  minus the commit's send time. A native duplex model often answers *before* the commit, so
  these may be ``None``.
* Speech-end origin (figures prefixed ``stream_``): ``speech_end_ms`` is where the user's speech
  stops on the media clock (given, or found by :func:`detect_speech_end_ms`). The *speech-end
  append* is the first append whose cumulative ``audio_end_ms`` is at or past
  ``speech_end_ms``; its send time is the origin. ``stream_ttft_ms`` / ``stream_ttfp_ms`` =
  receive time of the first non-empty text / audio delta received after that send, minus the
  send time. ``stream_rtf`` = (receive time of the last audio delta of the responses whose first
  audio came after the origin − origin) / (seconds of those responses' audio). Only meaningful
  with real-time pacing (the audio clock then tracks the wall clock); without it the figures are
  ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.client.collector import RECEIVED_AT_KEY, EventCollector, decode_audio_delta
from app.client.duplex import AppendRecord
from app.client.protocol import (
    AUDIO_DELTA,
    TEXT_DELTA_TYPES,
    event_response_id,
    event_type,
)
from app.constants import INPUT_SAMPLE_RATE_HZ, samples_to_ms

SPEECH_FRAME_MS = 20
"""Analysis frame of :func:`detect_speech_end_ms`, ms."""

SPEECH_FLOOR_DBFS = -45.0
"""A frame quieter than this (RMS, dB re full scale) is never speech."""

SPEECH_RELATIVE_DB = 30.0
"""A frame more than this many dB below the loudest frame is not speech."""


def speech_frames(
    pcm16: bytes,
    sample_rate_hz: int = INPUT_SAMPLE_RATE_HZ,
    *,
    frame_ms: int = SPEECH_FRAME_MS,
    floor_dbfs: float = SPEECH_FLOOR_DBFS,
    relative_db: float = SPEECH_RELATIVE_DB,
) -> tuple[np.ndarray, int, int]:
    """Which ``frame_ms`` frames of mono PCM16 are speech, by a simple energy threshold.

    A frame is speech when its RMS level is at least ``max(floor_dbfs, loudest_frame_dbfs -
    relative_db)``. Good enough for clean recorded prompts (speech then silence); not a VAD for
    noisy audio.

    Args:
        pcm16: little-endian int16 mono samples.
        sample_rate_hz: their rate, Hz.
        frame_ms: analysis frame length, ms.
        floor_dbfs: absolute level below which nothing is speech, dBFS.
        relative_db: dynamic range below the loudest frame still counted as speech, dB.

    Returns:
        ``(indices of speech frames, frame length in samples, number of samples)``.
    """
    samples = np.frombuffer(pcm16[: len(pcm16) // 2 * 2], dtype="<i2").astype(np.float64) / 32768.0
    frame = max(1, int(sample_rate_hz * frame_ms / 1000))
    count = math.ceil(samples.size / frame)
    if count == 0:
        return np.zeros(0, np.int64), frame, 0
    padded = np.zeros(count * frame)
    padded[: samples.size] = samples
    rms = np.sqrt(np.mean(padded.reshape(count, frame) ** 2, axis=1))
    level_db = 20.0 * np.log10(np.maximum(rms, 1e-10))
    threshold = max(floor_dbfs, float(level_db.max()) - relative_db)
    return np.flatnonzero(level_db >= threshold), frame, samples.size


def detect_speech_end_ms(pcm16: bytes, sample_rate_hz: int = INPUT_SAMPLE_RATE_HZ, **kw: float) -> float | None:
    """End of the last speech frame (see :func:`speech_frames`), capped at the audio length.

    Returns:
        Milliseconds from the start of the audio, or ``None`` when no frame is speech.
    """
    speech, frame, n = speech_frames(pcm16, sample_rate_hz, **kw)  # type: ignore[arg-type]
    if speech.size == 0:
        return None
    return samples_to_ms(min(n, (int(speech[-1]) + 1) * frame), sample_rate_hz)


def detect_speech_start_ms(pcm16: bytes, sample_rate_hz: int = INPUT_SAMPLE_RATE_HZ, **kw: float) -> float | None:
    """Start of the first speech frame (see :func:`speech_frames`).

    Returns:
        Milliseconds from the start of the audio, or ``None`` when no frame is speech.
    """
    speech, frame, _ = speech_frames(pcm16, sample_rate_hz, **kw)  # type: ignore[arg-type]
    if speech.size == 0:
        return None
    return samples_to_ms(int(speech[0]) * frame, sample_rate_hz)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _first_at(
    collector: EventCollector, types: frozenset[str], after_s: float
) -> dict[str, Any] | None:
    for event in collector.events:
        if event[RECEIVED_AT_KEY] < after_s or event_type(event) not in types:
            continue
        if event_type(event) == AUDIO_DELTA and not decode_audio_delta(event):
            continue
        if event_type(event) in TEXT_DELTA_TYPES and not event.get("delta"):
            continue
        return event
    return None


def commit_latency(collector: EventCollector, commit_sent_at_s: float | None) -> dict[str, Any]:
    """Commit-origin figures in the shape of vLLM-Omni's demo ``latency`` block.

    Returns:
        ``ttft_ms``, ``ttfp_ms`` (from the commit send; ``None`` without a commit or output
        after it), ``rtf`` = (first ``response.done`` − first ``response.created``, receive
        times) / that response's output audio seconds, ``response_generation_ms`` (the
        numerator), ``rtf_response_id``, ``text_stream_ms`` (first text delta → that response's
        done), ``transcript_delta_count``, ``audio_duration_s`` (all output audio) and
        ``measurement_origin``.
    """
    text = _first_at(collector, TEXT_DELTA_TYPES, commit_sent_at_s) if commit_sent_at_s else None
    audio = (
        _first_at(collector, frozenset({AUDIO_DELTA}), commit_sent_at_s)
        if commit_sent_at_s
        else None
    )
    created = collector.first("response.created")
    rid = event_response_id(created) if created else None
    done = collector.first("response.done", response_id=rid) if rid else None
    generation_s = done[RECEIVED_AT_KEY] - created[RECEIVED_AT_KEY] if created and done else None
    audio_s = collector.audio_duration_ms(rid) / 1000.0 if rid else 0.0
    first_text = (
        collector.first(*TEXT_DELTA_TYPES, response_id=rid, non_empty_delta=True) if rid else None
    )
    return {
        "ttft_ms": _ms(text[RECEIVED_AT_KEY] - commit_sent_at_s)
        if text and commit_sent_at_s
        else None,
        "ttfp_ms": _ms(audio[RECEIVED_AT_KEY] - commit_sent_at_s)
        if audio and commit_sent_at_s
        else None,
        "rtf": round(generation_s / audio_s, 4)
        if generation_s is not None and audio_s > 0
        else None,
        "rtf_response_id": rid,
        "response_generation_ms": _ms(generation_s) if generation_s is not None else None,
        "text_stream_ms": (
            _ms(done[RECEIVED_AT_KEY] - first_text[RECEIVED_AT_KEY])
            if done and first_text
            else None
        ),
        "transcript_delta_count": sum(event_type(e) in TEXT_DELTA_TYPES for e in collector.events),
        "audio_duration_s": round(collector.audio_duration_ms() / 1000.0, 4),
        "measurement_origin": "input_audio_buffer.commit send",
    }


def speech_end_latency(
    collector: EventCollector,
    appends: Sequence[AppendRecord],
    speech_end_ms: float | None,
    *,
    realtime: bool,
) -> dict[str, Any]:
    """Speech-end-origin figures (see the module docstring for the exact definitions).

    Args:
        collector: the session's events.
        appends: the client's append records (send time and ``audio_end_ms`` of each).
        speech_end_ms: end of the user's speech on the media clock, ms; ``None`` = unknown.
        realtime: whether the input was paced in real time (figures are ``None`` otherwise).

    Returns:
        ``speech_end_ms``, ``speech_end_append_audio_end_ms``, ``stream_ttft_ms``,
        ``stream_ttfp_ms``, ``stream_rtf``, ``stream_audio_duration_s`` and
        ``stream_measurement_origin`` (a sentence, or why the figures are missing).
    """
    result: dict[str, Any] = {
        "speech_end_ms": round(speech_end_ms, 3) if speech_end_ms is not None else None,
        "speech_end_append_audio_end_ms": None,
        "stream_ttft_ms": None,
        "stream_ttfp_ms": None,
        "stream_rtf": None,
        "stream_audio_duration_s": None,
    }
    append = next(
        (a for a in appends if speech_end_ms is not None and a.audio_end_ms >= speech_end_ms), None
    )
    if not realtime:
        result["stream_measurement_origin"] = "not measured: input was not paced in real time"
        return result
    if append is None:
        result["stream_measurement_origin"] = (
            "not measured: no speech end within the streamed input"
        )
        return result
    origin = append.sent_at_s
    result["speech_end_append_audio_end_ms"] = round(append.audio_end_ms, 3)
    result["stream_measurement_origin"] = (
        "send time of the append containing the end of the user's speech"
    )
    text = _first_at(collector, TEXT_DELTA_TYPES, origin)
    audio = _first_at(collector, frozenset({AUDIO_DELTA}), origin)
    result["stream_ttft_ms"] = _ms(text[RECEIVED_AT_KEY] - origin) if text else None
    result["stream_ttfp_ms"] = _ms(audio[RECEIVED_AT_KEY] - origin) if audio else None
    first_audio_at: dict[str, float] = {}
    last_audio_at = None
    for event in collector.events:
        rid = event_response_id(event)
        if event_type(event) != AUDIO_DELTA or rid is None or not decode_audio_delta(event):
            continue
        first_audio_at.setdefault(rid, event[RECEIVED_AT_KEY])
        if first_audio_at[rid] >= origin:
            last_audio_at = event[RECEIVED_AT_KEY]
    later = [rid for rid, at in first_audio_at.items() if at >= origin]
    audio_s = sum(collector.audio_duration_ms(rid) for rid in later) / 1000.0
    if later and audio_s > 0 and last_audio_at is not None:
        result["stream_audio_duration_s"] = round(audio_s, 4)
        result["stream_rtf"] = round((last_audio_at - origin) / audio_s, 4)
    return result
