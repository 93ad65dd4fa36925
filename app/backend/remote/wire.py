"""Typed client commands -> the wire JSON a remote vLLM-Omni server receives.

Pure functions (plus one file read for the reference voice); no I/O on sockets. Used by
:class:`app.backend.remote.session.RemoteSession`'s sender.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np

from app.backend.protocol import commands as C
from app.constants import INPUT_SAMPLE_RATE_HZ, samples_to_ms
from app.media import (
    MediaError,
    decode_audio,
    encode_jpeg,
    encode_wav,
    float_to_pcm16,
    to_data_url,
)

REF_AUDIO_MAX_SECONDS = 30.0
"""Longest reference voice accepted from ``remote.ref_audio``, seconds (MiniCPM-o wants 3-10 s)."""

JPEG_QUALITY = 85
"""Quality of camera frames re-encoded for the remote (RGB arrays from the WebRTC handler)."""

_REF_KEYS = ("ref_audio", "tts_ref_audio")


class RefAudioError(ValueError):
    """``remote.ref_audio`` names a file that cannot be read or decoded (message says which)."""


def load_ref_audio(ref: str | None) -> str | None:
    """Turn ``remote.ref_audio`` into what a remote session object accepts.

    A remote server cannot read our files and vLLM-Omni rejects ``ref_audio_path``, so a local
    path is decoded (any format :func:`app.media.decode_audio` reads), resampled to 16 kHz mono
    and sent inline as a ``data:audio/wav;base64,...`` URL. ``data:`` and ``http(s)://`` URLs
    are passed unchanged (the remote fetches those itself).

    Args:
        ref: ``None``, a data URL, an http(s) URL, or a file path (absolute or relative to the
            working directory).

    Returns:
        The value for ``session.ref_audio``, or ``None``.

    Raises:
        RefAudioError: the file does not exist, is longer than :data:`REF_AUDIO_MAX_SECONDS`,
            or is not audio.
    """
    if ref is None:
        return None
    if ref.startswith(("data:", "http://", "https://")):
        return ref
    path = Path(ref).expanduser()
    if not path.is_file():
        raise RefAudioError(f"remote.ref_audio: no such file: {path}")
    try:
        audio = decode_audio(path.read_bytes(), target_rate=INPUT_SAMPLE_RATE_HZ, max_seconds=REF_AUDIO_MAX_SECONDS)
    except MediaError as exc:
        raise RefAudioError(f"remote.ref_audio: {path}: {exc}") from exc
    return to_data_url(encode_wav(audio, INPUT_SAMPLE_RATE_HZ), "audio/wav")


def session_update_wire(cmd: C.SessionUpdate, *, ref_audio: str | None, model: str | None) -> dict[str, Any]:
    """``session.update`` for the remote.

    Adds ``ref_audio`` when the client gave none (neither ``session.ref_audio`` nor
    ``session.extra_body.ref_audio|tts_ref_audio``), since MiniCPM-o needs a reference voice
    for speech, and replaces ``session.model`` with the remote's model name (the client names
    *our* served model). Everything else passes through unchanged.

    Args:
        cmd: the client's command.
        ref_audio: value from :func:`load_ref_audio` (``None``: add nothing).
        model: the remote's model name (``None``: drop ``session.model``).
    """
    wire = cmd.model_dump(exclude_none=True)
    session = dict(wire.get("session") or {})
    extra = session.get("extra_body") if isinstance(session.get("extra_body"), dict) else {}
    has_ref = session.get("ref_audio") or any(extra.get(k) for k in _REF_KEYS)
    if ref_audio and not has_ref:
        session["ref_audio"] = ref_audio
    if model:
        session["model"] = model
    else:
        session.pop("model", None)
    wire["session"] = session
    return wire


class AppendEncoder:
    """Renders in-process :class:`~app.backend.protocol.commands.AppendArrays` as ``input_audio_buffer.append``.

    Keeps the session's cumulative input clock so every append states ``duration_ms`` and
    ``audio_end_ms`` (rounded to whole ms, as vLLM-Omni's client does).

    Attributes:
        audio_end_ms: input audio sent so far through this encoder, ms (unrounded).
    """

    def __init__(self) -> None:
        self.audio_end_ms = 0.0

    def encode(self, cmd: C.AppendArrays) -> dict[str, Any]:
        """The wire append: base64 PCM16 at 16 kHz and base64 JPEG frames (base first).

        Raises:
            MediaError: ``bad_audio`` / ``bad_image`` for arrays of the wrong shape or dtype.
        """
        audio = np.asarray(cmd.audio, np.float32).reshape(-1)
        duration_ms = samples_to_ms(audio.size, INPUT_SAMPLE_RATE_HZ)
        self.audio_end_ms += duration_ms
        wire: dict[str, Any] = {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(float_to_pcm16(audio)).decode("ascii"),
            "format": "pcm16",
            "sample_rate_hz": INPUT_SAMPLE_RATE_HZ,
            "duration_ms": round(duration_ms),
            "audio_end_ms": round(self.audio_end_ms),
        }
        if cmd.frames:
            wire["video_frames"] = [
                base64.b64encode(encode_jpeg(np.asarray(f, np.uint8), quality=JPEG_QUALITY)).decode("ascii")
                for f in cmd.frames
            ]
        return wire

    def note_wire_append(self, cmd: C.AudioAppend) -> None:
        """Advance the clock past a client's own wire append (when it states ``audio_end_ms``)."""
        if cmd.audio_end_ms is not None:
            self.audio_end_ms = float(cmd.audio_end_ms)
        elif cmd.duration_ms is not None:
            self.audio_end_ms += float(cmd.duration_ms)
