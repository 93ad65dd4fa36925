"""The VAD turn policy on real speech with the real Silero VAD."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from app.backend.turns.silence import SilenceTurnDetector
from app.config import load_deploy_config
from app.constants import INPUT_SAMPLE_RATE_HZ
from tests.conftest import espeak_wav

SR = INPUT_SAMPLE_RATE_HZ


@pytest.fixture(scope="module")
def policy_factory():
    from app.backend.models.tiny.vad import SileroVad

    cfg = load_deploy_config().turn_policy
    return lambda: SilenceTurnDetector(SileroVad(), cfg)


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> np.ndarray:
    path = espeak_wav("What is the capital of France?", tmp_path_factory.mktemp("tp") / "q.wav")
    audio, rate = sf.read(str(path), dtype="float32")
    assert rate == SR
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[loud[0] : loud[-1] + 1]  # espeak pads with silence: keep only the speech


def feed(policy, audio: np.ndarray, step: int = 1600):
    out = []
    for i in range(0, len(audio), step):
        out += policy.feed(audio[i:i + step])
    return out


def silence(s: float) -> np.ndarray:
    return np.zeros(int(s * SR), np.float32)


def test_silence_and_noise_never_start_a_turn(policy_factory):
    rng = np.random.default_rng(0)
    p = policy_factory()
    assert feed(p, silence(5)) == []
    assert feed(p, (0.03 * rng.standard_normal(5 * SR)).astype(np.float32)) == []
    t = np.arange(3 * SR) / SR
    assert feed(p, (0.3 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)) == []
    click = np.zeros(SR, np.float32)
    click[8000:8400] = 0.8 * rng.standard_normal(400)  # 25 ms burst
    assert feed(p, click) == []


def test_speech_gives_start_pause_and_end_of_turn_with_the_utterance(policy_factory, speech):
    p = policy_factory()
    sigs = feed(p, np.concatenate([silence(0.5), speech, silence(1.0)]))
    kinds = [s.kind for s in sigs]
    assert kinds == ["speech_started", "pause", "end_of_turn"], kinds
    eot = sigs[-1]
    assert eot.speech_ms > 800
    assert 0.6 * len(speech) < len(eot.utterance) <= len(speech) + int(0.5 * SR)
    assert np.array_equal(sigs[1].utterance, eot.utterance)  # the speculative reply heard the same words
    assert not p.user_speaking


def test_speech_resuming_after_a_pause_is_one_turn(policy_factory, speech):
    p = policy_factory()
    sigs = feed(p, np.concatenate([silence(0.3), speech, silence(0.3), speech, silence(1.0)]))
    kinds = [s.kind for s in sigs]
    assert kinds[0] == "speech_started" and kinds[-1] == "end_of_turn"
    assert "resumed" in kinds and kinds.count("end_of_turn") == 1
    assert len(sigs[-1].utterance) > 1.6 * len(speech)


def test_flush_ends_the_turn_now(policy_factory, speech):
    p = policy_factory()
    feed(p, np.concatenate([silence(0.3), speech[: len(speech) // 2]]))
    assert p.user_speaking and p.current_speech_ms > 300
    sig = p.flush()
    assert sig is not None and sig.kind == "end_of_turn"
    assert p.flush() is None


def test_a_blip_after_the_pause_does_not_resume_the_turn(policy_factory, speech):
    p = policy_factory()
    blip = speech[int(0.5 * SR) : int(0.62 * SR)]  # 120 ms of speech: shorter than min_speech_ms
    sigs = feed(p, np.concatenate([silence(0.3), speech, silence(0.25), blip, silence(1.0)]), step=640)
    kinds = [s.kind for s in sigs]
    assert kinds == ["speech_started", "pause", "end_of_turn"], kinds
