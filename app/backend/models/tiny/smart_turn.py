"""Smart Turn v3.2: "has the user finished their turn?" from the last 8 s of their audio.

Model: ``smart-turn-v3.2-cpu.onnx`` by Pipecat / Daily (BSD-2-Clause), a Whisper-encoder
classifier, int8, 8,679,182 bytes. It ships inside the PyPI wheel ``pipecat-ai==1.14.0`` at
:data:`MODEL_MEMBER`. The wheel is only *downloaded* into ``<repo>/.cache/wheels`` by
``scripts/setup.sh``, never installed: importing ``pipecat`` patches ``asyncio.wait_for``
process-wide on Python < 3.12 and its pins clash with ours. :func:`smart_turn_model_path`
copies the graph out of the zip into the model cache (``<cache>/smart-turn-v3.2/``, atomic
write) and checks it against :data:`~app.backend.models.tiny.weights.SMART_TURN_V3_2_SHA256`.

Graph I/O (inspected with onnxruntime):

* input ``input_features`` float32 ``[batch, 80, 800]``: Whisper log-mel features of one
  8 s window per row (:func:`smart_turn_features`);
* output ``logits`` float32 ``[batch, 1]``: despite its name, the graph ends in a ``Sigmoid``,
  so this is already the probability that the turn is complete.

Preprocessing, matched to pipecat 1.14.0 (``pipecat/audio/turn/smart_turn/
local_smart_turn_v3.py`` ``_predict_endpoint`` and the vendored numpy Whisper extractor
``_whisper_features.py``, itself a copy of ``transformers.WhisperFeatureExtractor``):

1. keep the *last* 8 s (128,000 samples at 16 kHz); a shorter clip is zero-padded at the
   *front* to 128,000 samples;
2. normalise the padded waveform to zero mean / unit variance in float32,
   ``(x - mean) / sqrt(var + 1e-7)``; the statistics include the zero padding;
3. Whisper log-mel: periodic Hann window, ``n_fft`` 400, hop 160, centred STFT with reflect
   padding (801 frames), power spectrum, 80 Slaney-normalised Slaney-scale mel filters over
   0-8 kHz, ``log10(max(mel, 1e-10))``, drop the *last* frame (800 remain), clamp to
   ``max - 8``, then ``(x + 4) / 4``.

Step 3 is ``faster_whisper.feature_extractor.FeatureExtractor`` (faster-whisper 1.2.1, in the
``tiny`` extra) called with ``padding=0``: its default ``padding=160`` would append 160 zeros
and give 801 frames. It computes in float32 where pipecat computes in float64: on real clips
the features differ by < 1e-5 and the probabilities by < 1e-4 (``tests/unit/test_smart_turn.py``
runs pipecat's own code from the wheel in a separate venv and compares).

:class:`SmartTurnModel` runs a batch of clips in one ONNX call on one CPU thread;
:class:`SmartTurnScorer` shares one model between many sessions from a worker thread that
batches the requests waiting when it is free.
"""

from __future__ import annotations

import functools
import shutil
import threading
import time
import zipfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Self

import numpy as np

from app.backend.models.tiny import weights
from app.backend.models.tiny.cache import (
    ModelAssetMissingError,
    cache_dir,
    ensure_generated,
    repo_root,
    verify_sha256,
)
from app.backend.models.tiny.runtime import CORES, Priority
from app.constants import INPUT_SAMPLE_RATE_HZ

# --- Where the graph comes from ----------------------------------------------------------
PIPECAT_REQUIREMENT: Final[str] = "pipecat-ai==1.14.0"
"""The PyPI release whose wheel carries the graph (downloaded with ``--no-deps``, never installed)."""

PIPECAT_WHEEL: Final[str] = "pipecat_ai-1.14.0-py3-none-any.whl"
"""File name of that wheel in ``<repo>/.cache/wheels`` (PyPI's name for the release)."""

MODEL_MEMBER: Final[str] = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
"""Path of the graph inside the wheel."""

MODEL_FILE: Final[str] = "smart-turn-v3.2-cpu.onnx"
"""File name of the extracted graph in the model cache."""

CACHE_SUBDIR: Final[str] = "smart-turn-v3.2"
"""Sub-folder of the model cache root holding the extracted graph."""

SETUP_COMMAND: Final[str] = (
    f"bash scripts/setup.sh (or: .venv/bin/pip download --no-deps {PIPECAT_REQUIREMENT} "
    "-d .cache/wheels)"
)
"""What to run when the wheel is missing (quoted in the error)."""

_WHAT: Final[str] = f"Smart Turn v3.2 ONNX ({MODEL_MEMBER} in {PIPECAT_REQUIREMENT})"

# --- Input window and features (numbers from pipecat 1.14.0, see the module docstring) -------
SAMPLE_RATE_HZ: Final[int] = INPUT_SAMPLE_RATE_HZ
"""Rate of the audio the model reads, Hz (16,000; pipecat ``_MODEL_SAMPLE_RATE``)."""

WINDOW_SECONDS: Final[int] = 8
"""Seconds of audio the model sees (pipecat ``truncate_audio_to_last_n_seconds(n_seconds=8)``)."""

WINDOW_SAMPLES: Final[int] = WINDOW_SECONDS * SAMPLE_RATE_HZ
"""Samples per window (128,000): the last 8 s, front-padded with zeros when shorter."""

N_MELS: Final[int] = 80
"""Mel bands (pipecat ``_N_MELS``; Whisper's 80-mel front end)."""

N_FFT: Final[int] = 400
"""STFT size, samples (25 ms; pipecat ``_N_FFT``)."""

HOP_LENGTH: Final[int] = 160
"""STFT hop, samples (10 ms; pipecat ``_HOP_LENGTH``)."""

N_FRAMES: Final[int] = WINDOW_SAMPLES // HOP_LENGTH
"""Feature frames per window (800): the centred STFT gives 801, the last one is dropped."""

NORM_VARIANCE_EPS: Final[float] = 1e-7
"""Added to the waveform variance before the square root (pipecat ``_NORM_VARIANCE_EPS``,
transformers ``zero_mean_unit_var_norm``)."""

MODEL_INPUT: Final[str] = "input_features"
"""Name of the graph's input."""

COMPLETE_THRESHOLD: Final[float] = 0.5
"""Probability above which pipecat calls the turn complete (``prediction = probability > 0.5``)."""

DEFAULT_MAX_BATCH: Final[int] = 8
"""Clips :class:`SmartTurnScorer` runs in one ONNX call at most. On one thread a batch costs
roughly its size times one clip (measured on the 2-core reference machine), so batching saves
per-call overhead, not compute; the cap bounds how long the last clip of a burst waits."""


# --- The verified graph ------------------------------------------------------------------------
def smart_turn_wheel_path() -> Path:
    """``<repo>/.cache/wheels/pipecat_ai-1.14.0-py3-none-any.whl`` (may not exist)."""
    return repo_root() / ".cache" / "wheels" / PIPECAT_WHEEL


def _missing(reason: str) -> ModelAssetMissingError:
    return ModelAssetMissingError(
        f"Smart Turn v3.2 model not available: {reason}. It ships inside the PyPI wheel "
        f"{PIPECAT_REQUIREMENT} (downloaded, never installed); run: {SETUP_COMMAND}"
    )


def _extract_from(wheel: Path) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        if not wheel.is_file():
            raise _missing(f"wheel not found: {wheel}")
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(MODEL_MEMBER) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except KeyError as exc:
            raise _missing(f"{wheel} has no member {MODEL_MEMBER}") from exc
        except zipfile.BadZipFile as exc:
            raise _missing(f"{wheel} is not a valid wheel ({exc})") from exc

    return write


def smart_turn_model_path(wheel: Path | str | None = None) -> Path:
    """The verified Smart Turn v3.2 graph in the model cache, extracted from the wheel if needed.

    A cached copy with the pinned digest is used as is (the wheel is then not read); a missing
    or wrong copy is (re)extracted atomically and checked again.

    Args:
        wheel: the pipecat wheel; default :func:`smart_turn_wheel_path`.

    Returns:
        ``<cache>/smart-turn-v3.2/smart-turn-v3.2-cpu.onnx``, sha256-checked.

    Raises:
        ModelAssetMissingError: no cached copy and the wheel is missing, unreadable or lacks
            the graph; the message names ``pipecat-ai==1.14.0`` and :data:`SETUP_COMMAND`.
        WeightIntegrityError: the graph in the wheel differs from
            :data:`~app.backend.models.tiny.weights.SMART_TURN_V3_2_SHA256`.
    """
    src = Path(wheel) if wheel is not None else smart_turn_wheel_path()
    dest = cache_dir(CACHE_SUBDIR) / MODEL_FILE
    return ensure_generated(dest, weights.SMART_TURN_V3_2_SHA256, _WHAT, _extract_from(src))


# --- Features ----------------------------------------------------------------------------------
def _window(audio: np.ndarray) -> np.ndarray:
    """The last :data:`WINDOW_SAMPLES` of ``audio`` as a new float32 array, front-padded with zeros."""
    x = np.asarray(audio)
    if x.ndim != 1:
        raise ValueError(f"expected 1-D mono audio, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"expected float audio in [-1, 1], got dtype {x.dtype}")
    out = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    tail = x[-WINDOW_SAMPLES:]
    if tail.size:
        out[WINDOW_SAMPLES - tail.size :] = tail
    return out


@functools.lru_cache(maxsize=1)
def _log_mel():
    try:
        from faster_whisper.feature_extractor import FeatureExtractor
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError("faster-whisper is not installed; install the 'tiny' extra") from exc
    return FeatureExtractor(
        feature_size=N_MELS,
        sampling_rate=SAMPLE_RATE_HZ,
        hop_length=HOP_LENGTH,
        chunk_length=WINDOW_SECONDS,
        n_fft=N_FFT,
    )


def smart_turn_features(audio: np.ndarray) -> np.ndarray:
    """Smart Turn v3.2 input features of one clip.

    Args:
        audio: 1-D float mono audio at 16 kHz (nominally in [-1, 1]; the level does not matter
            because the window is normalised), any length, the newest sample last. Only the last
            8 s are used; a shorter clip is front-padded with zeros (so is an empty one).

    Returns:
        float32 ``[80, 800]`` log-mel features (mel band x 10 ms frame), roughly in [-1.5, 1.5];
        see the module docstring for each step and its source.

    Raises:
        ValueError: ``audio`` is not 1-D or holds NaN / inf.
        TypeError: ``audio`` is not a float array (convert PCM16 with ``/ 32768``).
        ModelAssetMissingError: faster-whisper (the ``tiny`` extra) is not installed.
    """
    x = _window(audio)
    if not np.isfinite(x).all():
        raise ValueError("audio holds NaN or inf samples")
    # float32 statistics, as pipecat computes them (padding included).
    x = (x - x.mean()) / np.sqrt(x.var() + NORM_VARIANCE_EPS)
    feats = _log_mel()(x, padding=0)  # padding=0: 128,000 samples -> 801 STFT frames -> 800
    if feats.shape != (N_MELS, N_FRAMES):  # pragma: no cover - guards a faster-whisper change
        raise RuntimeError(f"log-mel shape {feats.shape}, expected {(N_MELS, N_FRAMES)}")
    return np.ascontiguousarray(feats, dtype=np.float32)


# --- Model ---------------------------------------------------------------------------------
def _open_session(path: Path):
    try:
        import onnxruntime as ort
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelAssetMissingError("onnxruntime is not installed; install the 'tiny' extra") from exc
    opts = ort.SessionOptions()
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


class SmartTurnModel:
    """The verified Smart Turn v3.2 graph on ONNX Runtime, one CPU thread, sequential.

    Costs about 50 ms per 8 s clip on one thread; a batch costs about the clip count times that
    (see the measurements in ``tests/unit/test_smart_turn.py``). :meth:`predict` may be called
    from several threads (``InferenceSession.run`` is thread-safe), but never call it on an
    asyncio event loop thread: use :class:`SmartTurnScorer`.

    Args:
        model_path: an ONNX file to load instead of the cached copy; it is checked against the
            pinned digest too. Default: :func:`smart_turn_model_path`.

    Raises:
        ModelAssetMissingError: the wheel / onnxruntime is missing (see
            :func:`smart_turn_model_path`).
        WeightIntegrityError: the graph differs from the pinned digest.
        FileNotFoundError: ``model_path`` is given and does not exist.
    """

    sample_rate_hz: Final[int] = SAMPLE_RATE_HZ
    """Rate the clips must have, Hz (16,000)."""

    window_samples: Final[int] = WINDOW_SAMPLES
    """Samples of each clip the model reads (the last 128,000 = 8 s); keep at least this much."""

    def __init__(self, model_path: Path | str | None = None) -> None:
        if model_path is None:
            path = smart_turn_model_path()
        else:
            path = verify_sha256(Path(model_path), weights.SMART_TURN_V3_2_SHA256, _WHAT)
        self.model_path: Path = path
        self._session = _open_session(path)
        inputs = self._session.get_inputs()
        if [i.name for i in inputs] != [MODEL_INPUT]:  # pragma: no cover - pinned graph
            raise RuntimeError(f"unexpected Smart Turn inputs {[i.name for i in inputs]}")
        self._output = self._session.get_outputs()[0].name

    def predict(self, batch: Sequence[np.ndarray]) -> np.ndarray:
        """Probability that each clip's turn is complete.

        Args:
            batch: clips as for :func:`smart_turn_features` (1-D float, 16 kHz, any length).

        Returns:
            float32 ``[len(batch)]`` in [0, 1] (above :data:`COMPLETE_THRESHOLD` = complete);
            empty for an empty batch. One feature pass per clip, then one ONNX call.

        Raises:
            ValueError, TypeError: a clip is not 1-D float audio or holds NaN / inf.
        """
        clips = list(batch)
        if not clips:
            return np.zeros(0, dtype=np.float32)
        return self.predict_features(np.stack([smart_turn_features(c) for c in clips]))

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        """Probabilities for features already computed (one ONNX call).

        Args:
            features: float32 ``[batch, 80, 800]`` as from :func:`smart_turn_features`.

        Returns:
            float32 ``[batch]`` in [0, 1].

        Raises:
            ValueError: ``features`` has another shape.
        """
        feats = np.ascontiguousarray(features, dtype=np.float32)
        if feats.ndim != 3 or feats.shape[1:] != (N_MELS, N_FRAMES):
            raise ValueError(f"expected features [batch, {N_MELS}, {N_FRAMES}], got {feats.shape}")
        if feats.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        (out,) = self._session.run([self._output], {MODEL_INPUT: feats})
        return np.asarray(out, dtype=np.float32).reshape(feats.shape[0], -1)[:, 0].copy()


# --- Shared batching service -------------------------------------------------------------------
@dataclass(frozen=True)
class ScorerStats:
    """A snapshot of :class:`SmartTurnScorer`'s work since it started.

    Attributes:
        calls: :meth:`SmartTurnModel.predict` calls made (one per batch).
        clips: clips scored (sum of batch sizes).
        total_s: seconds spent in those calls (features + ONNX), wall clock.
        total_wait_s: seconds the scored clips waited in the queue, summed over clips.
        last_batch_size: clips in the latest call (0 before the first).
        last_call_s: seconds of the latest call (0.0 before the first).
        max_batch_size: the largest batch so far.
        batch_sizes: batch size -> number of calls of that size.
        seconds_by_batch_size: batch size -> seconds spent in calls of that size.
        failures: calls that raised (their futures got the exception).
    """

    calls: int = 0
    clips: int = 0
    total_s: float = 0.0
    total_wait_s: float = 0.0
    last_batch_size: int = 0
    last_call_s: float = 0.0
    max_batch_size: int = 0
    batch_sizes: Mapping[int, int] = field(default_factory=dict)
    seconds_by_batch_size: Mapping[int, float] = field(default_factory=dict)
    failures: int = 0

    @property
    def mean_call_s(self) -> float:
        """Mean seconds per call (0.0 before the first)."""
        return self.total_s / self.calls if self.calls else 0.0

    @property
    def mean_batch_size(self) -> float:
        """Mean clips per call (0.0 before the first)."""
        return self.clips / self.calls if self.calls else 0.0


@dataclass
class _Request:
    clip: np.ndarray
    future: Future
    queued_at: float


class SmartTurnScorer:
    """One :class:`SmartTurnModel` shared by many sessions, batched on one daemon worker thread.

    :meth:`score` only copies the clip's last 8 s and queues it, so it is safe to call from an
    asyncio event loop (``await asyncio.wrap_future(scorer.score(clip))``). Whenever the worker
    is free it takes every waiting request, up to ``max_batch``, and runs them in one
    :meth:`SmartTurnModel.predict` call; so under load the batch grows instead of the queue.

    Args:
        model: the model to share (``predict(batch) -> [len(batch)]`` probabilities).
        max_batch: clips per call at most (>= 1; default :data:`DEFAULT_MAX_BATCH`).
        name: the worker thread's name.
        prepare: turns what :meth:`score` gets into one batch item, on the caller's thread (default:
            the last 8 s of the audio, front-padded; the text end-of-turn model passes its text
            through, see :mod:`app.backend.models.tiny.text_turn`).

    Raises:
        ValueError: ``max_batch`` < 1.
    """

    def __init__(self, model: SmartTurnModel, *, max_batch: int = DEFAULT_MAX_BATCH, name: str = "smart-turn",
                 prepare: Callable[[Any], Any] | None = None) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._model = model
        self._max_batch = max_batch
        self._prepare = prepare or _window
        self._cond = threading.Condition()
        self._pending: deque[_Request] = deque()
        self._closed = False
        self._stats_lock = threading.Lock()
        self._calls = self._clips = self._failures = 0
        self._last_n = self._max_n = 0
        self._total_s = self._wait_s = self._last_s = 0.0
        self._hist: dict[int, int] = {}
        self._hist_s: dict[int, float] = {}
        self._name = name
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def model(self) -> SmartTurnModel:
        """The shared model."""
        return self._model

    @property
    def max_batch(self) -> int:
        """Clips per call at most."""
        return self._max_batch

    def score(self, audio: np.ndarray) -> Future[float]:
        """Queue one clip; never blocks on the model.

        Args:
            audio: 1-D float mono audio at 16 kHz, newest sample last (only the last 8 s are
                kept; the caller may reuse its buffer at once).

        Returns:
            A ``concurrent.futures.Future`` resolving to the probability (float in [0, 1]) that
            the turn is complete, or to the exception ``predict`` raised. It is cancelled if
            the scorer is closed before the clip ran; cancelling it yourself skips the clip.

        Raises:
            ValueError, TypeError: ``audio`` is not 1-D float audio.
            RuntimeError: the scorer is closed.
        """
        clip = self._prepare(audio)
        fut: Future[float] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("SmartTurnScorer is closed")
            self._pending.append(_Request(clip, fut, time.perf_counter()))
            self._cond.notify()
        return fut

    def submit(self, audio: np.ndarray, callback: Callable[[Future[float]], object]) -> Future[float]:
        """:meth:`score`, then ``callback(future)`` once it is done.

        The callback runs on the worker thread (or at once if already done), so it must be quick
        and must not block; from asyncio code prefer ``asyncio.wrap_future(scorer.score(x))``.
        An exception in the callback is logged by ``concurrent.futures`` and does not stop the
        worker.
        """
        fut = self.score(audio)
        fut.add_done_callback(callback)
        return fut

    def stats(self) -> ScorerStats:
        """A consistent snapshot of the counters (see :class:`ScorerStats`)."""
        with self._stats_lock:
            return ScorerStats(
                calls=self._calls,
                clips=self._clips,
                total_s=self._total_s,
                total_wait_s=self._wait_s,
                last_batch_size=self._last_n,
                last_call_s=self._last_s,
                max_batch_size=self._max_n,
                batch_sizes=MappingProxyType(dict(self._hist)),
                seconds_by_batch_size=MappingProxyType(dict(self._hist_s)),
                failures=self._failures,
            )

    def pending(self) -> int:
        """Requests queued and not yet taken by the worker."""
        with self._cond:
            return len(self._pending)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop: cancel queued requests, let a running batch finish, join the worker.

        Idempotent. Blocks up to ``timeout`` seconds (one batch at most), so call it from a
        thread or at shutdown, not from a running event loop.
        """
        with self._cond:
            self._closed = True
            dropped = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        for req in dropped:
            req.future.cancel()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> list[_Request] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            n = min(len(self._pending), self._max_batch)
            return [self._pending.popleft() for _ in range(n)]

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            live = [r for r in taken if r.future.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                with CORES.hold(Priority.TURN, self._name):  # ahead of any other model call
                    t0 = time.perf_counter()
                    probs = self._model.predict([r.clip for r in live])
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                with self._stats_lock:
                    self._failures += 1
                for r in live:
                    r.future.set_exception(exc)
                continue
            dt = time.perf_counter() - t0
            n = len(live)
            with self._stats_lock:  # before the results, so a caller that has one sees its call
                self._calls += 1
                self._clips += n
                self._total_s += dt
                self._wait_s += sum(t0 - r.queued_at for r in live)
                self._last_n, self._last_s = n, dt
                self._max_n = max(self._max_n, n)
                self._hist[n] = self._hist.get(n, 0) + 1
                self._hist_s[n] = self._hist_s.get(n, 0.0) + dt
            for r, p in zip(live, probs, strict=True):
                r.future.set_result(float(p))
