"""Helpers for realtime tests: load speech, run a session, check the event log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from app.client.invariants import check_invariants
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ
from app.media import float_to_pcm16, pcm16_to_float, resample
from tests.conftest import ARTIFACTS


def wav_pcm16(path: Path) -> bytes:
    """PCM16 bytes of a 16 kHz mono WAV."""
    audio, rate = sf.read(str(path), dtype="float32")
    assert rate == INPUT_SAMPLE_RATE_HZ and audio.ndim == 1
    return float_to_pcm16(audio)


def silence(seconds: float) -> bytes:
    """PCM16 silence."""
    return b"\x00\x00" * int(seconds * INPUT_SAMPLE_RATE_HZ)


def response_audio(events: list[dict], response_id: str) -> np.ndarray:
    """float32 24 kHz audio of one response, from its deltas."""
    import base64

    parts = [
        pcm16_to_float(base64.b64decode(e["delta"]))
        for e in events
        if e["type"] == "response.output_audio.delta" and e.get("response_id") == response_id
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def transcribe_24k(family, audio: np.ndarray) -> str:
    """ASR of 24 kHz output audio with the bundled Whisper."""
    return family.thinker.transcribe(resample(audio, OUTPUT_SAMPLE_RATE_HZ, INPUT_SAMPLE_RATE_HZ))


def types(events: list[dict]) -> list[str]:
    """Event types in order."""
    return [e["type"] for e in events]


def assert_invariants(events: list[dict], name: str) -> None:
    """Save the event log under artifacts/ and assert the protocol invariants hold."""
    out = ARTIFACTS / "events"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.jsonl", "w") as f:
        for e in events:
            slim = {k: (v if k != "delta" or "audio" not in e["type"] else f"<{len(v)} b64>") for k, v in e.items()}
            f.write(json.dumps(slim) + "\n")
    violations = check_invariants(events)
    assert not violations, violations
