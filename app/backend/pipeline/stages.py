"""The three stage interfaces every model family implements, and the data they exchange.

Thinker (multimodal understanding -> text), Talker (text -> integer codec tokens) and
Code2Wav (codec tokens -> 24 kHz waveform). Callers branch on :class:`FamilyCapabilities`,
never on a family's name.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
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
        turn_detectors: ``turn_policy.detector`` values the family supports (see
            :mod:`app.backend.turns.factory`).
        understands: languages (BCP 47) the family understands in speech and text.
        speaks: languages it answers in.
        voices: its built-in voices, described in words (the page lists them).
    """

    name: str
    vision: bool
    voice_cloning: bool
    requires_ref_audio: bool
    max_context_tokens: int
    codec_frame_rate_hz: float
    output_sample_rate_hz: int
    unit_ms_options: tuple[int, ...]
    turn_detectors: tuple[str, ...] = ("silence", "manual")
    understands: tuple[str, ...] = ("en",)
    speaks: tuple[str, ...] = ("en",)
    voices: tuple[str, ...] = ()


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


@dataclass(frozen=True)
class GeneratedReply:
    """A Thinker reply and why it ended.

    Attributes:
        text: the reply (stripped).
        finish_reason: ``"stop"`` (the model ended it) or ``"length"`` (cut by ``max_tokens``; the
            text then ends at its last sentence or clause boundary when it has one).
    """

    text: str
    finish_reason: str = "stop"


@dataclass(frozen=True)
class BatchFigures:
    """What a session's work got of a cross-session batch over some span (:meth:`BatchShare.take`).

    Attributes:
        steps: batched calls that did a piece of it: Thinker decode steps that wrote a token of
            its replies, or ASR calls that transcribed one of its utterances.
        replies_per_step: mean requests (of all sessions) in those calls (1.0: alone; 0.0: none).
        wait_ms: summed over the span, ms: for replies, the time from each reply's submission to
            the step that wrote its first token (its prompt's evaluation included), over the
            replies that began in the span; for transcripts, each one's queue wait.
    """

    steps: int = 0
    replies_per_step: float = 0.0
    wait_ms: float = 0.0


class BatchShare:
    """Counters of one session's work in a cross-session batch (its replies in the family's
    Thinker batch; its transcripts in the ASR stage's batches): the batcher adds to them from its
    thread (:meth:`add`), the session reads what came since its last read (:meth:`take`, once per
    unit for ``session.unit_metrics``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps = 0
        self._batch_sum = 0
        self._wait_s = 0.0

    def add(self, batch: int, wait_s: float = 0.0) -> None:
        """One batched call did a piece of the session's work beside ``batch`` - 1 others
        (``batch`` >= 1): a decode step wrote a token of one of its replies (``wait_s``: that
        reply's wait for its first token, given once, on it), or an ASR call transcribed one of
        its utterances (``wait_s``: its queue wait), seconds."""
        with self._lock:
            self._steps += 1
            self._batch_sum += batch
            self._wait_s += wait_s

    def take(self) -> BatchFigures:
        """What was added since the last call, and start again from zero."""
        with self._lock:
            steps, batch_sum, wait_s = self._steps, self._batch_sum, self._wait_s
            self._steps, self._batch_sum, self._wait_s = 0, 0, 0.0
        return BatchFigures(steps, batch_sum / steps if steps else 0.0, 1000 * wait_s)


@dataclass
class ThinkerPrompt:
    """Everything the Thinker's reply is conditioned on.

    Attributes:
        instructions: system prompt text.
        history: earlier turns, oldest first.
        user_text: the current user turn as text (typed text and/or an ASR transcript).
        seen_text: what the Thinker saw in images / camera frames (for ``tiny``, a one-line
            description: colours, shapes, written words, a clock), one entry per image.
    """

    instructions: str
    history: list[Turn] = field(default_factory=list)
    user_text: str = ""
    seen_text: list[str] = field(default_factory=list)


class ContextLengthExceeded(ValueError):
    """The prompt plus the reply budget (``max_tokens``) do not fit in the Thinker's context, even
    with every history turn dropped: a request error (HTTP 400 ``context_length_exceeded``)."""


class Thinker(ABC):
    """Stage 0: multimodal understanding -> reply text."""

    @abstractmethod
    def transcribe(self, audio: np.ndarray, context: str = "") -> str:
        """Speech to text.

        Args:
            audio: float32 mono at ``INPUT_SAMPLE_RATE_HZ`` (16 kHz), shape ``(n,)``, in [-1, 1].
            context: the conversation's previous user turn (``""``: none); a model may read it
                to hear a short follow-up ("And Italy?") in its light, or ignore it.

        Returns:
            The transcript, stripped; ``""`` for silence.
        """

    @abstractmethod
    def read_image(self, image: np.ndarray) -> str:
        """Describe / read an image.

        Args:
            image: uint8 RGB, shape ``(h, w, 3)``.

        Returns:
            What the image shows, as text: the text written in it, or a description of it
            (``tiny``: colours, shapes, written words, a clock); ``""`` if nothing.
        """

    max_transcript_batch: int = 1
    """Most utterances :meth:`transcribe_batch` transcribes in one call for less than one by one;
    above 1 the pipeline runs transcripts through a gathering stage (:mod:`~app.backend.pipeline.gather`)."""

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, str]],
                         urgent: bool = False) -> list[str | ValueError]:
        """:meth:`transcribe` of several utterances (``(audio, context)`` each), in one call where
        the family batches them; each transcript is the one :meth:`transcribe` gives it alone, and
        an item :meth:`transcribe` would refuse gets its ``ValueError`` in its place (the others
        are still transcribed). ``urgent``: a user waits on one of them (words said over a reply):
        first for the cores. This default transcribes them one by one."""
        out: list[str | ValueError] = []
        for audio, context in items:
            try:
                out.append(self.transcribe(audio, context))
            except ValueError as exc:
                out.append(exc)
        return out

    def transcribe_urgent(self, audio: np.ndarray, context: str = "") -> Future[str] | None:
        """:meth:`transcribe` of words a session holds its input for (said over a reply: do they
        stop it?), ahead of the stage's queue and of other model work, where the family can.

        Returns:
            A future of the transcript; ``None`` (this default): the family cannot, and the words
            are transcribed through the stage, in turn.
        """
        return None

    def read_camera(self, image: np.ndarray) -> Future[str] | None:
        """Read a camera frame (uint8 RGB ``(h, w, 3)``) in the background, without holding up
        speech work (ASR, end-of-turn scores, replies), where the family can.

        Returns:
            A future of :meth:`read_image`'s text; ``None`` (this default): the family cannot, and
            the frame is read through the stage like any image.
        """
        return None

    def write_reply(self, prompt: ThinkerPrompt, params: SamplingParams,
                    on_text: Callable[[str], bool] | None = None,
                    share: BatchShare | None = None,
                    waiting: Callable[[], bool] | None = None) -> Future[GeneratedReply] | None:
        """:meth:`generate_reply` outside the stage's one-at-a-time queue, where the family writes
        several replies at once (batched decoding across sessions); ``on_text`` may then be called
        from another thread; ``share``: the caller's counters of what the reply got of the batch;
        ``waiting()``: whether a user waits for this reply now (False while it is speculative; None:
        always), so that replies a user waits for go first.

        Returns:
            A future of the reply; ``None`` (this default): the reply goes through the stage, in turn.
        """
        return None

    @abstractmethod
    def generate(self, prompt: ThinkerPrompt, params: SamplingParams) -> str:
        """Write the assistant's reply to ``prompt`` (whole text, short)."""

    def generate_reply(self, prompt: ThinkerPrompt, params: SamplingParams,
                       on_text: Callable[[str], bool] | None = None) -> GeneratedReply:
        """:meth:`generate` with the reason it ended; a family that can tell ``max_tokens`` cuts overrides it.

        ``on_text``: a family that streams calls ``on_text(raw_text_so_far)`` while it writes (in
        the stage thread) and stops when it returns False; the returned reply is authoritative
        (it may be trimmed). This default does not stream.
        """
        return GeneratedReply(self.generate(prompt, params).strip())


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


@dataclass
class ModelFamily:
    """A loaded model family: its capabilities and the three stages.

    Turn detectors are built from the family by :mod:`app.backend.turns` (the ``tiny`` Thinker
    offers a streaming VAD through ``thinker.vad_factory``).

    Attributes:
        warmup: runs every stage once so the first request is not slow (optional).
        turn_scorer: returns the family's shared end-of-turn scorer (``score(audio) ->
            concurrent.futures.Future[float]``, the probability that the turn is complete), built
            on first call; None when the family has no end-of-turn model.
        text_turn_scorer: returns the family's shared text end-of-turn scorer (``score(transcript)
            -> Future[float]``, the probability that the words end there), built on first call;
            None when the family has none (the learned detector then reads only word cues).
        core_use: returns how the family's model calls shared the CPU cores so far,
            ``{(priority, work): use}`` with ``use.calls``, ``use.wait_s`` and ``use.hold_s``
            (``tiny``: :meth:`~app.backend.models.tiny.runtime.CoreLock.stats`); None when the
            family does not take turns on the cores (``/metrics`` then has no ``omni_cores_*``).
        reply_batch_stats: returns the Thinker's cross-session reply batching counters (``steps``,
            ``replies``, ``tokens``, ``max_batch``, ``batch_sizes``, ``wait_s``, ``compute_s``: ``tiny``'s
            :class:`~app.backend.models.tiny.reply_batch.BatchStats`); None when replies are written
            one at a time.
    """

    capabilities: FamilyCapabilities
    thinker: Thinker
    talker: Talker
    code2wav: Code2Wav
    warmup: Callable[[], Any] | None = None
    turn_scorer: Callable[[], Any] | None = None
    text_turn_scorer: Callable[[], Any] | None = None
    core_use: Callable[[], dict[tuple[str, str], Any]] | None = None
    reply_batch_stats: Callable[[], Any] | None = None
