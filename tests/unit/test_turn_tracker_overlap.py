"""Words said over a reply, read before they end: one read that would take the turn asks for the
next; two in a row (of one utterance) take it (TurnTracker.confirm_overlap)."""

from __future__ import annotations

from app.backend.duplex.turn_tracker import TurnTracker
from app.backend.turns.silence import SilenceTurnDetector
from app.config import load_deploy_config


def _tracker() -> TurnTracker:
    from app.backend.models.tiny.vad import SileroVad

    return TurnTracker(SilenceTurnDetector(SileroVad(), load_deploy_config().turn_policy))


def test_two_reads_in_a_row_that_take_the_turn_confirm_it() -> None:
    t = _tracker()
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False  # "The air-dower" for "Yeah o...": read again
    assert t.confirm_overlap(True) is True


def test_a_listener_read_between_them_starts_over() -> None:
    t = _tracker()
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False
    assert t.confirm_overlap(False) is False  # "Yeah, okay."
    assert t.confirm_overlap(True) is False
    assert t.confirm_overlap(True) is True


def test_a_new_utterance_does_not_inherit_the_last_ones_read() -> None:
    t = _tracker()
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False
    t.start_item(over_reply=True)
    assert t.confirm_overlap(True) is False


def test_only_reads_as_short_as_a_listener_response_wait_for_a_second_read() -> None:
    from app.backend.turns.text_cues import backchannel_length

    assert backchannel_length("The air-dower") and backchannel_length("EF-O-T") and backchannel_length("Wait, stop.")
    assert not backchannel_length("What is the capital on?")  # five words: no listener response
    assert not backchannel_length("") and not backchannel_length("...")


def test_a_read_at_a_pause_is_not_read_again_until_more_words_are_said(tmp_path) -> None:
    """The pause check read the words said over the reply (a claim to the turn, 'short' for
    espeak's "sure"): the next read is due only after more speech, not at once on the same audio
    (which would confirm that misread by itself, as it did once in bench_turns)."""
    import subprocess

    import numpy as np
    import soundfile as sf

    from app.backend.models.tiny.vad import SileroVad
    from app.backend.turns.learned import LearnedTurnDetector
    from app.constants import INPUT_SAMPLE_RATE_HZ
    from app.media import resample

    wav = tmp_path / "words.wav"
    subprocess.run(["espeak-ng", "-v", "en", "-w", str(wav), "Sure I follow what you are saying there"], check=True)
    audio, rate = sf.read(str(wav), dtype="float32")
    speech = resample(audio, rate, INPUT_SAMPLE_RATE_HZ)

    def unused(*_a, **_k):
        raise AssertionError("nothing is transcribed or posted here")

    t = TurnTracker(LearnedTurnDetector(SileroVad(), load_deploy_config().turn_policy),
                    transcribe=unused, spawn=unused, post=unused)
    assert t.reads_words
    t.start_item(over_reply=True)
    cut = INPUT_SAMPLE_RATE_HZ * 8 // 10
    t._detector.feed(np.concatenate([np.zeros(INPUT_SAMPLE_RATE_HZ // 5, np.float32), speech[:cut]]))
    assert t._detector.user_speaking and t.speech_ms >= 300
    assert t.overlap_read_due(300.0)  # none read yet
    t.note_overlap_read()
    t.confirm_overlap(True)  # that read claimed the turn: the next one is due after half a step
    assert not t.overlap_read_due(300.0)
    t._detector.feed(speech[cut: cut + INPUT_SAMPLE_RATE_HZ // 2])  # 0.5 s more of them
    assert t.overlap_read_due(300.0), t.speech_ms
