"""The client-settable part of a duplex session (``session.update``), validated.

Accepts both spellings vLLM-Omni accepts: flat ``input_audio_format`` / ``output_audio_format``
and nested ``audio.input.format`` / ``audio.output.format``; ``extra_body`` keys too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from app.backend.protocol.commands import ProtocolError
from app.backend.turns.learned import PATIENCE_RANGE
from app.constants import (
    DEFAULT_INSTRUCTIONS,
    INPUT_SAMPLE_RATE_HZ,
    MAX_INPUT_RATE_HZ,
    MIN_INPUT_RATE_HZ,
    OUTPUT_SAMPLE_RATE_HZ,
)

INPUT_FORMATS: dict[str, str] = {
    "pcm16": "pcm16",
    "pcm_s16le": "pcm16",
    "s16le": "pcm16",
    "audio/pcm": "pcm16",
    "pcm_f32le": "pcm_f32le",
    "f32le": "pcm_f32le",
    "g711_ulaw": "g711_ulaw",
    "g711_alaw": "g711_alaw",
}
"""Accepted input audio format names -> canonical name."""

G711_RATE_HZ = 8_000
"""Default rate of G.711 input (ITU-T G.711), Hz."""


@dataclass(frozen=True)
class SessionSettings:
    """Settings of one duplex session.

    Attributes:
        instructions: system prompt.
        modalities: ``("audio", "text")`` or ``("text",)``.
        input_format: canonical input format (``pcm16``, ``pcm_f32le``, ``g711_ulaw``, ``g711_alaw``).
        input_rate_hz: rate of appended audio, Hz (resampled to 16 kHz server-side).
        output_rate_hz: rate of output deltas, Hz (24 kHz).
        temperature: Thinker temperature.
        max_tokens: Thinker reply budget, tokens.
        auto_response: answer on the model's own end-of-turn (True) or only on ``response.create``.
        playback_commit_policy: ``commit_all_on_done`` or ``ack_only``.
        overlap_policy: ``listen_only`` (soft interrupt) or ``barge_in_on_speech`` (hard cancel on overlap).
        ref_audio: the reference voice as given (URI / data URL), if any.
        force_listen_count: the first N units are forced to listen.
        turn_patience: how long the learned turn detector waits in a pause, x the default
            (``extra_body.turn_patience``, 0.5-3.0; slow or non-native speakers want more).
        turn_detection: always None (the model owns turn-taking).
    """

    instructions: str = DEFAULT_INSTRUCTIONS
    modalities: tuple[str, ...] = ("audio", "text")
    input_format: str = "pcm16"
    input_rate_hz: int = INPUT_SAMPLE_RATE_HZ
    output_rate_hz: int = OUTPUT_SAMPLE_RATE_HZ
    temperature: float = 0.0
    max_tokens: int | None = None
    auto_response: bool = True
    playback_commit_policy: str = "commit_all_on_done"
    overlap_policy: str = "listen_only"
    ref_audio: str | None = None
    force_listen_count: int = 0
    turn_patience: float = 1.0
    turn_detection: None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def speech_out(self) -> bool:
        """True when audio output is requested."""
        return "audio" in self.modalities

    def describe(self) -> dict[str, Any]:
        """The settings as they appear in the wire session object."""
        return {
            "instructions": self.instructions,
            "modalities": list(self.modalities),
            "output_modalities": list(self.modalities),
            "input_audio_format": self.input_format,
            "output_audio_format": "pcm16",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": INPUT_SAMPLE_RATE_HZ}, "sample_rate_hz": self.input_rate_hz},
                "output": {"format": {"type": "audio/pcm", "rate": self.output_rate_hz}, "sample_rate_hz": self.output_rate_hz},
            },
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "turn_detection": None,
            "overlap_policy": self.overlap_policy,
            "playback_commit_policy": self.playback_commit_policy,
            "extra_body": {"auto_response": self.auto_response, "force_listen_count": self.force_listen_count,
                           "turn_patience": self.turn_patience},
        }


def _fmt_name(value: Any) -> tuple[str | None, int | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict):
        rate = value.get("rate") or value.get("sample_rate_hz")
        inner = value.get("format", value.get("type"))
        if isinstance(inner, dict):
            name, r2 = _fmt_name(inner)
            return name, rate or r2
        return inner, rate
    raise ProtocolError("unsupported_audio_format", f"audio format must be a string or object, got {type(value).__name__}")


def apply_update(current: SessionSettings, session: dict[str, Any], *, audio_started: bool,
                 max_instructions_chars: int | None = None) -> SessionSettings:
    """Merge a ``session.update`` ``session`` object into ``current``.

    Args:
        current: the settings so far.
        session: the client's ``session`` object.
        audio_started: audio was already appended (some fields are then immutable).
        max_instructions_chars: longest ``instructions`` accepted, characters (the chat route's
            ``limits.max_text_chars``); None = no limit.

    Returns:
        The new settings.

    Raises:
        ProtocolError: ``unsupported_audio_format``, ``unsupported_turn_detection``,
            ``unsupported_response_modality``, ``unsupported_ref_audio_path``,
            ``instructions_update_unsupported``, ``ref_audio_update_unsupported``, ``bad_event``.
    """
    if not isinstance(session, dict):
        raise ProtocolError("bad_event", "session must be an object", param="session")
    extra = dict(session.get("extra_body") or {})
    changes: dict[str, Any] = {}

    if "instructions" in session and session["instructions"] is not None:
        if not isinstance(session["instructions"], str):
            raise ProtocolError("bad_event", "instructions must be a string", param="session.instructions")
        if max_instructions_chars is not None and len(session["instructions"]) > max_instructions_chars:
            raise ProtocolError("bad_event", f"instructions hold {len(session['instructions'])} characters, limit "
                                f"{max_instructions_chars} (limits.max_text_chars)", param="session.instructions")
        if audio_started and session["instructions"] != current.instructions:
            raise ProtocolError("instructions_update_unsupported", "instructions cannot change after audio started")
        changes["instructions"] = session["instructions"] or current.instructions

    mods = session.get("output_modalities", session.get("modalities"))
    if mods is not None:
        if not isinstance(mods, list) or not all(isinstance(m, str) for m in mods):
            raise ProtocolError("bad_event", "modalities must be a list of strings", param="session.modalities")
        bad = [m for m in mods if m not in ("audio", "text")]
        if bad or "text" not in mods and "audio" not in mods:
            raise ProtocolError("unsupported_response_modality", f"unsupported output modalities {bad or mods}")
        changes["modalities"] = tuple(m for m in ("audio", "text") if m in mods or m == "text")

    audio = session.get("audio") if isinstance(session.get("audio"), dict) else {}
    in_spec = session.get("input_audio_format", (audio.get("input") or {}).get("format"))
    name, rate = _fmt_name(in_spec)
    rate = rate or session.get("sample_rate_hz") or (audio.get("input") or {}).get("sample_rate_hz")
    if name is not None:
        canon = INPUT_FORMATS.get(name.lower())
        if canon is None:
            raise ProtocolError("unsupported_audio_format", f"unsupported input audio format '{name}'", param="session.input_audio_format")
        changes["input_format"] = canon
        if canon.startswith("g711") and rate is None:
            rate = G711_RATE_HZ
    if rate is not None:
        if not isinstance(rate, int) or not MIN_INPUT_RATE_HZ <= rate <= MAX_INPUT_RATE_HZ:
            raise ProtocolError("unsupported_audio_format", f"unsupported input sample rate {rate!r}", param="session.sample_rate_hz")
        changes["input_rate_hz"] = rate

    out_spec = session.get("output_audio_format", (audio.get("output") or {}).get("format"))
    oname, orate = _fmt_name(out_spec)
    if oname is not None and INPUT_FORMATS.get(oname.lower()) != "pcm16":
        raise ProtocolError("unsupported_audio_format", f"unsupported output audio format '{oname}' (pcm16 only)")
    if orate is not None and orate != OUTPUT_SAMPLE_RATE_HZ:
        raise ProtocolError("unsupported_audio_format", f"output audio is {OUTPUT_SAMPLE_RATE_HZ} Hz PCM16")

    if "turn_detection" in session and session["turn_detection"] is not None:
        raise ProtocolError(
            "unsupported_turn_detection", "turn_detection must be null: the model owns turn-taking", param="session.turn_detection"
        )
    if "ref_audio_path" in session or "ref_audio_path" in extra:
        raise ProtocolError("unsupported_ref_audio_path", "ref_audio_path is not accepted; send ref_audio as a data URL")
    ref = session.get("ref_audio", extra.get("ref_audio", extra.get("tts_ref_audio")))
    if ref is not None:
        if not isinstance(ref, str):
            raise ProtocolError("bad_event", "ref_audio must be a string (data URL)", param="session.ref_audio")
        if audio_started and ref != current.ref_audio:
            raise ProtocolError("ref_audio_update_unsupported", "ref_audio cannot change after audio started")
        changes["ref_audio"] = ref

    if "temperature" in session and session["temperature"] is not None:
        t = session["temperature"]
        if not isinstance(t, (int, float)) or not 0 <= t <= 2:
            raise ProtocolError("bad_event", "temperature must be a number in [0, 2]", param="session.temperature")
        changes["temperature"] = float(t)
    mt = session.get("max_tokens", session.get("max_response_output_tokens"))
    if mt is not None and mt != "inf":
        if not isinstance(mt, int) or mt < 1:
            raise ProtocolError("bad_event", "max_tokens must be a positive integer", param="session.max_tokens")
        changes["max_tokens"] = mt
    for key, allowed in (
        ("playback_commit_policy", ("commit_all_on_done", "ack_only")),
        ("overlap_policy", ("listen_only", "barge_in_on_speech")),
    ):
        if key in session and session[key] is not None:
            if session[key] not in allowed:
                raise ProtocolError("bad_event", f"{key} must be one of {allowed}", param=f"session.{key}")
            changes[key] = session[key]
    if "auto_response" in extra:
        changes["auto_response"] = bool(extra["auto_response"])
    if "force_listen_count" in extra:
        n = extra["force_listen_count"]
        if not isinstance(n, int) or n < 0:
            raise ProtocolError("bad_event", "force_listen_count must be an integer >= 0", param="extra_body.force_listen_count")
        changes["force_listen_count"] = n
    if "turn_patience" in extra:
        v = extra["turn_patience"]
        lo, hi = PATIENCE_RANGE
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise ProtocolError("bad_event", f"turn_patience must be a number from {lo:g} to {hi:g}",
                                param="extra_body.turn_patience")
        changes["turn_patience"] = float(v)
    return replace(current, **changes)
