"""The three stage interfaces every model family implements, and the data they exchange.

Thinker (multimodal understanding -> text), Talker (text -> integer codec tokens) and
Code2Wav (codec tokens -> 24 kHz waveform). Callers branch on :class:`FamilyCapabilities`,
never on a family's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np


@dataclass(frozen=True)
class FamilyCapabilities:
    """What a model family can do, declared as data.

    Attributes:
        name: family id (``tiny``, ``minicpmo``, ``remote``).
        vision: the Thinker reads images / camera frames.
        voice_cloning: the Talker/Code2Wav take a reference voice.
        requires_ref_audio: speech output needs a reference voice (MiniCPM-o does).
        max_context_tokens: Thinker context budget, tokens.
        codec_frame_rate_hz: codec frames per second of speech.
        output_sample_rate_hz: rate of Code2Wav output, Hz.
        unit_ms_options: unit lengths (ms) the family supports.
    """

    name: str
    vision: bool
    voice_cloning: bool
    requires_ref_audio: bool
    max_context_tokens: int
    codec_frame_rate_hz: float
    output_sample_rate_hz: int
    unit_ms_options: tuple[int, ...]


@dataclass(frozen=True)
class SamplingParams:
    """Per-request Thinker sampling parameters (vLLM ``default_sampling_params`` names).

    Attributes:
        temperature: 0 = greedy.
        top_p: nucleus mass in (0, 1].
        top_k: -1 = off.
        repetition_penalty: >= 1.
        max_tokens: reply budget, tokens.
        seed: sampling seed or None.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.1
    max_tokens: int = 48
    seed: int | None = 42


@dataclass(frozen=True)
class Turn:
    """One finished turn of conversation history: ``role`` is ``user`` or ``assistant``."""

    role: Literal["user", "assistant"]
    text: str


@dataclass
class ThinkerPrompt:
    """Everything the Thinker's reply is conditioned on.

    Attributes:
        instructions: system prompt text.
        history: earlier turns, oldest first.
        user_text: the current user turn as text (typed text and/or an ASR transcript).
        seen_text: text read from images / camera frames (OCR for ``tiny``), one entry per image.
    """

    instructions: str
    history: list[Turn] = field(default_factory=list)
    user_text: str = ""
    seen_text: list[str] = field(default_factory=list)


class Thinker(ABC):
    """Stage 0: multimodal understanding -> reply text."""

    @abstractmethod
    def transcribe(self, audio: np.ndarray) -> str:
        """Speech to text.

        Args:
            audio: float32 mono at ``INPUT_SAMPLE_RATE_HZ`` (16 kHz), shape ``(n,)``, in [-1, 1].

        Returns:
            The transcript, stripped; ``""`` for silence.
        """

    @abstractmethod
    def read_image(self, image: np.ndarray) -> str:
        """Describe / read an image.

        Args:
            image: uint8 RGB, shape ``(h, w, 3)``.

        Returns:
            Text found in the image (``""`` if none).
        """

    @abstractmethod
    def generate(self, prompt: ThinkerPrompt, params: SamplingParams) -> str:
        """Write the assistant's reply to ``prompt`` (whole text, short)."""


class Talker(ABC):
    """Stage 1: reply text -> integer codec tokens."""

    @abstractmethod
    def synthesize(self, text: str) -> np.ndarray:
        """Turn one text segment into codec tokens.

        Args:
            text: one unit-sized segment (about 28 characters).

        Returns:
            int32 codec tokens, shape ``(frames,)``, at ``codec_frame_rate_hz``.
        """


class Code2WavStream(ABC):
    """Request-owned streaming decoder state (left context, resampler state)."""

    @abstractmethod
    def push(self, tokens: np.ndarray, final: bool) -> np.ndarray:
        """Decode the next codec tokens.

        Args:
            tokens: int32 codec tokens, shape ``(frames,)`` (may be empty when ``final``).
            final: no more tokens follow; flush everything held back.

        Returns:
            float32 mono audio at ``OUTPUT_SAMPLE_RATE_HZ``; concatenating every push of one
            stream gives the one-shot decode of all its tokens (no lost or repeated samples).
        """


class Code2Wav(ABC):
    """Stage 2: codec tokens -> waveform, streamed."""

    @abstractmethod
    def new_stream(self) -> Code2WavStream:
        """Open a decoder stream for one response."""


@dataclass(frozen=True)
class TurnSignal:
    """What a :class:`TurnPolicy` noticed in the audio it was fed.

    Attributes:
        kind: ``speech_started``; ``pause`` (a short silence: the turn may be ending, so a reply
            can be prepared speculatively); ``resumed`` (speech came back after a ``pause``);
            ``end_of_turn`` (the user finished an utterance).
        at_sample: position in the session's input audio, samples at 16 kHz.
        utterance: for ``pause`` and ``end_of_turn``, the utterance audio (float32 16 kHz, padded).
        speech_ms: for ``pause`` and ``end_of_turn``, how much of it the VAD judged speech, ms.
    """

    kind: Literal["speech_started", "pause", "resumed", "end_of_turn"]
    at_sample: int
    utterance: np.ndarray | None = None
    speech_ms: float = 0.0


class TurnPolicy(ABC):
    """Per-session turn-taking of a family (who speaks when), fed every append.

    For families whose Thinker decides speak/listen itself this wraps the model; for ``tiny``
    it is a VAD state machine.
    """

    @abstractmethod
    def feed(self, audio: np.ndarray) -> list[TurnSignal]:
        """Consume float32 16 kHz mono input audio; return the signals it produced, in order."""

    @property
    @abstractmethod
    def user_speaking(self) -> bool:
        """True while the user is mid-utterance."""

    @property
    @abstractmethod
    def current_speech_ms(self) -> float:
        """Speech in the utterance in progress, ms (0 when the user is silent)."""

    @abstractmethod
    def flush(self) -> TurnSignal | None:
        """End the utterance in progress now (on commit); ``None`` if there is none."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the utterance in progress (``input_audio_buffer.clear``)."""


@dataclass
class ModelFamily:
    """A loaded model family: its capabilities, the three stages and its turn policy.

    Attributes:
        new_turn_policy: factory of a fresh per-session :class:`TurnPolicy`; it takes the
            deploy config's ``turn_policy`` section.
        warmup: runs every stage once so the first request is not slow (optional).
    """

    capabilities: FamilyCapabilities
    thinker: Thinker
    talker: Talker
    code2wav: Code2Wav
    new_turn_policy: Callable[[Any], TurnPolicy] | None = None
    warmup: Callable[[], Any] | None = None
