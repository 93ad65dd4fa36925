"""The page's conversation settings and their mapping to a duplex ``session.update``.

FastRTC hands the values of the stream's ``additional_inputs`` to the handler as
``latest_args`` (first the WebRTC value, then the inputs in order); :func:`parse_args` reads
them back into :class:`UISettings`, tolerating the leading ``"__webrtc_value__"`` marker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.constants import DEFAULT_INSTRUCTIONS, INPUT_SAMPLE_RATE_HZ
from app.media import MediaError, decode_audio, encode_wav, to_data_url

log = logging.getLogger(__name__)

OVERLAP_CHOICES: dict[str, str] = {
    "Interrupt as soon as I speak": "barge_in_on_speech",
    "Stop only when I take the turn (not for mm-hm or yeah)": "listen_only",
}
"""Barge-in radio label -> session ``overlap_policy``."""

FIELDS: tuple[str, ...] = ("instructions", "speech", "temperature", "max_tokens", "stack_frames", "overlap",
                           "voice_ref")
"""Order of the page inputs after the WebRTC component (must match the page wiring)."""

MAX_REF_SECONDS = 30.0
"""Longest reference voice accepted from the upload, seconds."""


@dataclass(frozen=True)
class UISettings:
    """Settings chosen on the page.

    Attributes:
        instructions: system prompt (fixed once audio started).
        speech: speak replies (False = text-only replies, captions only).
        temperature: Thinker temperature.
        max_tokens: Thinker reply budget, tokens.
        stack_frames: camera frames per unit (1..5).
        overlap_policy: ``barge_in_on_speech`` or ``listen_only``.
        voice_ref: path of an uploaded reference voice (only used when the family clones voices).
    """

    instructions: str = DEFAULT_INSTRUCTIONS
    speech: bool = True
    temperature: float = 0.0
    max_tokens: int = 48
    stack_frames: int = 1
    overlap_policy: str = "barge_in_on_speech"
    voice_ref: str | None = None

    def session_update(self, *, voice_cloning: bool, first: bool) -> dict[str, Any]:
        """The ``session`` object of a ``session.update`` for these settings.

        Args:
            voice_cloning: the family takes a reference voice (capability flag).
            first: the session has not received audio yet (instructions / ref_audio allowed).
        """
        out: dict[str, Any] = {
            "modalities": ["audio", "text"] if self.speech else ["text"],
            "temperature": float(self.temperature),
            "max_tokens": int(self.max_tokens),
            "overlap_policy": self.overlap_policy,
        }
        if first:
            out["instructions"] = self.instructions or DEFAULT_INSTRUCTIONS
            if voice_cloning and self.voice_ref:
                ref = ref_audio_data_url(self.voice_ref)
                if ref:
                    out["ref_audio"] = ref
        return out


def ref_audio_data_url(path: str) -> str | None:
    """A 16 kHz mono WAV data URL of the uploaded reference voice (None if unreadable)."""
    try:
        audio = decode_audio(Path(path).read_bytes(), target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=MAX_REF_SECONDS)
    except (OSError, MediaError) as exc:
        log.warning("reference voice %s unreadable: %s", path, exc)
        return None
    return to_data_url(encode_wav(audio, INPUT_SAMPLE_RATE_HZ), "audio/wav")


def parse_args(args: Any, defaults: UISettings) -> UISettings:
    """Read the page inputs out of FastRTC's ``latest_args`` (missing or odd values keep defaults)."""
    if not isinstance(args, (list, tuple)) or len(args) < len(FIELDS):
        return defaults
    vals = dict(zip(FIELDS, list(args)[-len(FIELDS):]))
    s = defaults
    if isinstance(vals["instructions"], str):
        s = replace(s, instructions=vals["instructions"].strip() or DEFAULT_INSTRUCTIONS)
    if isinstance(vals["speech"], bool):
        s = replace(s, speech=vals["speech"])
    if isinstance(vals["temperature"], (int, float)) and 0 <= vals["temperature"] <= 2:
        s = replace(s, temperature=float(vals["temperature"]))
    if isinstance(vals["max_tokens"], (int, float)) and vals["max_tokens"] >= 1:
        s = replace(s, max_tokens=int(vals["max_tokens"]))
    if isinstance(vals["stack_frames"], (int, float)) and vals["stack_frames"] >= 1:
        s = replace(s, stack_frames=int(vals["stack_frames"]))
    if vals["overlap"] in OVERLAP_CHOICES:
        s = replace(s, overlap_policy=OVERLAP_CHOICES[vals["overlap"]])
    elif vals["overlap"] in OVERLAP_CHOICES.values():
        s = replace(s, overlap_policy=vals["overlap"])
    ref = vals["voice_ref"]
    if isinstance(ref, dict):  # gradio FileData-like
        ref = ref.get("path")
    s = replace(s, voice_ref=ref if isinstance(ref, str) and ref else None)
    return s
