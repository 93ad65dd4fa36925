"""Session configuration, URL building and the client's unit-clock arithmetic.

Mirrors the configuration half of vLLM-Omni's ``vllm_omni.clients.duplex``
(``AudioFormat``, ``SessionConfig.to_session_payload``, ``build_realtime_url``) so a
``session.update`` from this client is byte-for-byte the shape vLLM-Omni's client sends.
Rates and unit lengths come from :mod:`app.constants`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from app.constants import (
    FIRST_UNIT_MS,
    INPUT_SAMPLE_RATE_HZ,
    OUTPUT_SAMPLE_RATE_HZ,
    UNIT_MS,
)

REALTIME_PATH = "/v1/realtime"
"""Default WebSocket path when a base URL carries none."""

_BYTES_PER_SAMPLE = {"pcm16": 2, "pcm_f32le": 4}


@dataclass(frozen=True)
class AudioFormat:
    """One mono PCM wire format.

    Attributes:
        encoding: ``"pcm16"`` (little-endian int16) or ``"pcm_f32le"``.
        sample_rate_hz: samples per second.
    """

    encoding: str
    sample_rate_hz: int

    @property
    def bytes_per_sample(self) -> int:
        """Bytes per mono sample; raises ``ValueError`` for an unknown encoding."""
        try:
            return _BYTES_PER_SAMPLE[self.encoding]
        except KeyError:
            raise ValueError(f"unknown audio encoding: {self.encoding!r}") from None

    def duration_ms(self, byte_count: int) -> float:
        """Duration, in ms, of ``byte_count`` bytes of this format (3200 B pcm16@16 kHz = 100 ms)."""
        return byte_count * 1000.0 / (self.sample_rate_hz * self.bytes_per_sample)

    def byte_count(self, duration_ms: float) -> int:
        """Whole-sample byte count closest to ``duration_ms`` milliseconds."""
        return round(self.sample_rate_hz * duration_ms / 1000.0) * self.bytes_per_sample


@dataclass
class SessionConfig:
    """Model-neutral duplex session configuration, rendered into ``session.update``.

    Attributes:
        modalities: output modalities, ``("audio", "text")`` by default.
        input_audio: format of appended audio (pcm16 @ 16 kHz by default).
        output_audio: format of output audio (pcm16 @ 24 kHz by default).
        instructions: system prompt; ``None`` keeps the server default.
        ref_audio: reference voice as a data URL / base64 (required by servers whose output
            includes audio and whose model clones voices).
        voice: a named server voice, if the server has any.
        auto_response: ``extra_body.auto_response``; ``False`` means commits only produce
            ``input_audio_buffer.committed`` until the client sends ``response.create``.
        temperature: sampling temperature; ``None`` keeps the server default.
        overlap_policy: ``"listen_only"`` or ``"barge_in_on_speech"``; ``None`` = server default.
        playback_commit_policy: ``"commit_all_on_done"`` or ``"ack_only"``; ``None`` = default.
        turn_detection: ``None`` (model-owned turns) or a ``server_vad`` dict.
        idle_timeout_s: server idle TTL override, seconds.
        extra_body: model-specific keys merged over ``{"auto_response": ...}``.
        chunk_period_ms: client-side fallback unit length, ms, used for frame placement only
            when ``session.created`` advertises no ``capabilities.chunk_period_ms``. Never sent.
    """

    modalities: tuple[str, ...] = ("audio", "text")
    input_audio: AudioFormat = AudioFormat("pcm16", INPUT_SAMPLE_RATE_HZ)
    output_audio: AudioFormat = AudioFormat("pcm16", OUTPUT_SAMPLE_RATE_HZ)
    instructions: str | None = None
    ref_audio: str | None = None
    voice: str | None = None
    auto_response: bool = True
    temperature: float | None = None
    overlap_policy: str | None = None
    playback_commit_policy: str | None = None
    turn_detection: dict[str, Any] | None = None
    idle_timeout_s: float | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    chunk_period_ms: int | None = None

    def to_session_payload(self, *, model: str | None) -> dict[str, Any]:
        """Render the ``session`` object of ``session.update``.

        Always states both sample rates (top-level ``sample_rate_hz`` for input and
        ``audio.input/output.sample_rate_hz``), ``turn_detection`` (``null`` included) and
        ``extra_body.auto_response``; optional fields are sent only when set.

        Args:
            model: served model name; omitted from the payload when ``None``.
        """
        payload: dict[str, Any] = {
            "modalities": list(self.modalities),
            "input_audio_format": self.input_audio.encoding,
            "output_audio_format": self.output_audio.encoding,
            "sample_rate_hz": self.input_audio.sample_rate_hz,
            "audio": {
                "input": {"sample_rate_hz": self.input_audio.sample_rate_hz},
                "output": {"sample_rate_hz": self.output_audio.sample_rate_hz},
            },
            "turn_detection": self.turn_detection,
        }
        if model is not None:
            payload["model"] = model
        optional = {
            "instructions": self.instructions,
            "ref_audio": self.ref_audio,
            "voice": self.voice,
            "temperature": self.temperature,
            "overlap_policy": self.overlap_policy,
            "playback_commit_policy": self.playback_commit_policy,
            "idle_timeout_s": self.idle_timeout_s,
        }
        payload.update({key: value for key, value in optional.items() if value is not None})
        payload["extra_body"] = {"auto_response": self.auto_response, **self.extra_body}
        return payload


def build_realtime_url(
    url: str,
    model: str | None = None,
    *,
    autostart: bool = False,
    extra_query: dict[str, str] | None = None,
) -> str:
    """Turn a server base URL into the duplex WebSocket URL.

    ``http``/``https`` become ``ws``/``wss``. An empty path (or ``/``) becomes
    ``/v1/realtime``; a path ending in ``/v1`` gets ``/realtime`` appended; any other path is
    kept (e.g. the ``/v1/duplex`` alias). The query always ends up with ``duplex=1`` and
    ``autostart=0`` (``1`` only when ``autostart`` is true: the client sends its own
    ``session.update``, and an autostarted bare session would drop ``ref_audio``); ``model`` is
    set when given. Other query keys in ``url`` and ``extra_query`` are kept.

    Args:
        url: e.g. ``http://127.0.0.1:8000`` or ``ws://host:8000/v1/realtime?foo=1``.
        model: served model name for the ``model`` query key; ``None`` leaves it out.
        autostart: value of the ``autostart`` query key.
        extra_query: further query keys (do not override ``duplex``/``model``/``autostart``).

    Returns:
        The ``ws://`` / ``wss://`` URL.

    Raises:
        ValueError: the scheme is not http/https/ws/wss or the URL has no host.
    """
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in {"ws", "wss"} or not parts.netloc:
        raise ValueError(f"unsupported realtime URL: {url!r}")
    path = parts.path.rstrip("/")
    if not path:
        path = REALTIME_PATH
    elif path.endswith("/v1"):
        path += "/realtime"
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update({key: value for key, value in (extra_query or {}).items() if key not in query})
    query["duplex"] = "1"
    if model:
        query["model"] = model
    query["autostart"] = "1" if autostart else "0"
    return urlunsplit((scheme, parts.netloc, path, urlencode(query), parts.fragment))


def unit_boundary_ms(unit_index: int, unit_ms: int = UNIT_MS) -> int:
    """Cumulative input audio, ms, that closes model unit ``unit_index``.

    Unit 0 closes at ``FIRST_UNIT_MS``; unit ``k`` at ``FIRST_UNIT_MS + k * unit_ms``.

    Args:
        unit_index: zero-based unit number (negative values count as 0).
        unit_ms: unit length in ms (the server's ``capabilities.chunk_period_ms``).
    """
    return FIRST_UNIT_MS + max(0, int(unit_index)) * int(unit_ms)


def units_closed_by(audio_end_ms: float, unit_ms: int = UNIT_MS) -> int:
    """Number of units whose boundary lies at or before ``audio_end_ms`` (cumulative ms)."""
    if audio_end_ms < FIRST_UNIT_MS:
        return 0
    return int((audio_end_ms - FIRST_UNIT_MS) // unit_ms) + 1


def api_key_from_env() -> str | None:
    """The key for a keyed server: ``OPENAI_API_KEY``, else the first of ``OMNI_API_KEY`` (comma-separated)."""
    import os

    keys = [k.strip() for k in os.environ.get("OMNI_API_KEY", "").split(",") if k.strip()]
    return os.environ.get("OPENAI_API_KEY") or (keys[0] if keys else None)
