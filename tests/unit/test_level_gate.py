"""Far speech is not the user: the level gate on speech onsets (real speech, the real Silero VAD)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from app.backend.turns.learned import LearnedTurnDetector
from app.backend.turns.level_gate import (
    SILENT_DBFS,
    SpeechLevelGate,
    active_level_dbfs,
    window_energy,
)
from app.backend.turns.silence import SilenceTurnDetector
from app.config import load_deploy_config
from app.constants import INPUT_SAMPLE_RATE_HZ
from tests.conftest import espeak_wav

SR = INPUT_SAMPLE_RATE_HZ


@pytest.fixture(scope="module")
def policy():
    return load_deploy_config().turn_policy


@pytest.fixture(scope="module")
def speech(tmp_path_factory, policy) -> np.ndarray:
    """A spoken question scaled so that its onset's active level is exactly -20 dBFS."""
    path = espeak_wav("What is the capital of France?", tmp_path_factory.mktemp("lg") / "q.wav")
    audio, rate = sf.read(str(path), dtype="float32")
    assert rate == SR
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    audio = audio[loud[0] : loud[-1] + 1]
    level = onset_level(detector(policy, far_speech_drop_db=None), audio)
    return at_db(audio, -20.0 - level)


def detector(policy, **update) -> SilenceTurnDetector:
    from app.backend.models.tiny.vad import SileroVad

    return SilenceTurnDetector(SileroVad(), policy.model_copy(update=update))


def at_db(audio: np.ndarray, gain_db: float) -> np.ndarray:
    return (audio * 10 ** (gain_db / 20)).astype(np.float32)


def silence(s: float) -> np.ndarray:
    return np.zeros(int(s * SR), np.float32)


def feed(det, audio: np.ndarray, step: int = 1600):
    out = []
    for i in range(0, len(audio), step):
        out += det.feed(audio[i : i + step])
    return out


def onset_level(det, audio: np.ndarray) -> float:
    kinds = [s.kind for s in feed(det, np.concatenate([silence(0.3), audio, silence(1.0)]))]
    assert kinds[0] == "speech_started", kinds
    return det.onset_level_dbfs


def turns(det, audio: np.ndarray) -> list[str]:
    return [s.kind for s in feed(det, np.concatenate([silence(0.3), audio, silence(1.0)]))]


# ------------------------------------------------------------------ the arithmetic
def test_active_level_of_a_full_scale_sine_is_minus_3_dbfs():
    t = np.arange(SR) / SR
    sine = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    assert active_level_dbfs(window_energy(sine), sine.size) == pytest.approx(-3.01, abs=0.01)
    assert active_level_dbfs(0.0, 512) == SILENT_DBFS
    assert active_level_dbfs(1.0, 0) == SILENT_DBFS


def test_the_gate_refuses_far_below_the_reference_and_learns_the_users_level():
    gate = SpeechLevelGate(-20.0, 20.0)
    assert gate.threshold_dbfs == -40.0
    assert gate.admits(-39.9) and not gate.admits(-40.1)
    assert gate.refused == 1
    for _ in range(30):
        gate.learn(-10.0)  # a loud user: a TV 25 dB below them is now refused
    assert gate.reference_dbfs == pytest.approx(-10.0, abs=0.01)
    assert not gate.admits(-35.0)
    gate.learn(SILENT_DBFS)  # a turn with no energy (a commit of nothing) teaches nothing
    assert gate.reference_dbfs == pytest.approx(-10.0, abs=0.01)
    with pytest.raises(ValueError, match="drop_db"):
        SpeechLevelGate(-20.0, 0.0)


def test_config_bounds(policy):
    from pydantic import ValidationError

    assert policy.far_speech_drop_db == 20.0 and policy.speech_level_reference_dbfs == -20.0
    for bad in ({"far_speech_drop_db": 0}, {"far_speech_drop_db": -3}, {"speech_level_reference_dbfs": 5}):
        with pytest.raises(ValidationError):
            type(policy).model_validate({**policy.model_dump(), **bad})
    assert type(policy).model_validate({**policy.model_dump(), "far_speech_drop_db": None}).far_speech_drop_db is None


# ------------------------------------------------------------------ on real speech
def test_speech_22_db_below_the_user_starts_no_turn_and_is_counted(policy, speech):
    det = detector(policy)
    assert turns(det, at_db(speech, -22.0)) == []
    assert det.far_speech_refused == 1 and not det.user_speaking
    assert det.onset_level_dbfs == pytest.approx(-42.0, abs=1.0)


def test_without_the_gate_the_same_far_speech_is_a_turn(policy, speech):
    det = detector(policy, far_speech_drop_db=None)
    assert turns(det, at_db(speech, -22.0)) == ["speech_started", "pause", "end_of_turn"]
    assert det.far_speech_refused == 0


def test_a_quiet_user_within_the_drop_is_heard(policy, speech):
    det = detector(policy)
    assert turns(det, at_db(speech, -17.0)) == ["speech_started", "pause", "end_of_turn"]
    assert det.far_speech_refused == 0


def test_the_gate_follows_the_users_own_level(policy, speech):
    """Speech 15 dB down passes a fresh session's gate; after a few loud turns of the user's own
    (+10 dB), the same speech is 25 dB below them: a TV, not them."""
    fresh = detector(policy)
    assert turns(fresh, at_db(speech, -15.0))[0] == "speech_started"
    det = detector(policy)
    for _ in range(4):
        assert turns(det, at_db(speech, 10.0))[-1] == "end_of_turn"
    assert det.level_gate.reference_dbfs > -14.0
    assert turns(det, at_db(speech, -15.0)) == []
    assert turns(det, speech)[0] == "speech_started"  # their normal voice still is


def test_far_speech_during_the_users_turn_does_not_split_it(policy, speech):
    """The gate judges onsets only: a distant talker under the user's own words changes nothing."""
    rng = np.random.default_rng(3)
    far = at_db(np.roll(speech, int(rng.integers(1000, 5000))), -25.0)
    mixed = speech + far
    assert turns(detector(policy), mixed) == ["speech_started", "pause", "end_of_turn"]


def test_the_learned_detector_refuses_far_speech_too(policy, speech):
    from app.backend.models.tiny.vad import SileroVad

    det = LearnedTurnDetector(SileroVad(), policy)
    sigs = feed(det, np.concatenate([silence(0.3), at_db(speech, -24.0), silence(1.0)]))
    assert sigs == [] and det.awaiting is None
    assert det.far_speech_refused >= 1


def test_push_to_talk_has_no_gate(policy, speech):
    """With ``detector: manual`` the user says when they speak: quiet speech still counts (for the commit)."""
    from app.backend.models.tiny.vad import SileroVad
    from app.backend.turns.factory import detector_factory

    det = detector_factory("manual", policy, SileroVad)()
    sigs = feed(det, np.concatenate([silence(0.3), at_db(speech, -24.0), silence(1.0)]))
    assert [s.kind for s in sigs] == ["speech_started"]
    assert det.flush().kind == "end_of_turn"


def test_a_far_talker_who_gets_louder_for_a_moment_still_starts_no_turn(policy, speech):
    """Once an onset was refused, the next one (before a long silence) must be louder still: a
    TV's louder sentence 18 dB down, right after a quieter one, is still the TV."""
    far = np.concatenate([at_db(speech, -24.0), silence(0.2), at_db(speech, -18.0)])
    assert turns(detector(policy), far) == []
    assert turns(detector(policy), at_db(speech, -18.0))[0] == "speech_started"  # alone, it would pass


def test_the_user_talking_right_after_far_speech_is_heard(policy, speech):
    det = detector(policy)
    kinds = turns(det, np.concatenate([at_db(speech, -24.0), silence(0.2), speech]))
    assert kinds == ["speech_started", "pause", "end_of_turn"] and det.far_speech_refused >= 1
