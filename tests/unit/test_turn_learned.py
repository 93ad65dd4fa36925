"""The learned turn detector (VAD pauses scored by Smart Turn v3.2) on real speech, real models.

Clips are espeak-ng SSML with a ``<break>`` INSIDE one utterance (a cut sentence would end with a
sentence-final fall), resampled with soxr (no dither: the same samples every run).
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import soundfile as sf

from app.backend.models.tiny.smart_turn import SmartTurnModel
from app.backend.models.tiny.vad import SileroVad
from app.backend.turns.learned import MIN_HARD_CAP_MS, LearnedTurnDetector
from app.config import load_deploy_config
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import resample

SR = INPUT_SAMPLE_RATE_HZ


@pytest.fixture(scope="module")
def model() -> SmartTurnModel:
    return SmartTurnModel()


@pytest.fixture(scope="module")
def cfg():
    return load_deploy_config().turn_policy


@pytest.fixture(scope="module")
def say(tmp_path_factory):
    cache = tmp_path_factory.mktemp("learned")

    def synth(ssml: str, rate_wpm: int = 160) -> np.ndarray:
        path = cache / f"{abs(hash((ssml, rate_wpm)))}.wav"
        if not path.exists():
            subprocess.run(["espeak-ng", "-m", "-v", "en", "-s", str(rate_wpm), "-w", str(path),
                            f"<speak>{ssml}</speak>"], check=True)
        audio, rate = sf.read(str(path), dtype="float32")
        return resample(audio, rate, SR)

    return synth


def silence(s: float) -> np.ndarray:
    return np.zeros(int(s * SR), np.float32)


def run(det: LearnedTurnDetector, audio: np.ndarray, score, step: int = 1600, decided_at: list | None = None) -> list:
    """Feed ``audio`` in ``step`` pieces; every awaited score is answered by ``score(request)``.

    ``decided_at`` (if given) gets, per signal, the input position at which it was decided.
    """
    out = []
    fed = 0
    for i in range(0, audio.size, step):
        piece = audio[i : i + step]
        while True:
            got = det.feed(piece)
            fed += piece.size - det.held_back
            out += got
            if decided_at is not None:
                decided_at += [fed] * len(got)
            if det.awaiting is None:
                break
            piece = piece[piece.size - det.held_back:]
            got = det.resolve(score(det.awaiting))
            out += got
            if decided_at is not None:
                decided_at += [fed] * len(got)
    return out


def real(model):
    return lambda req: float(model.predict([req.audio])[0])


def speech_end(audio: np.ndarray) -> int:
    return int(np.flatnonzero(np.abs(audio) > 0.01)[-1])


def test_a_complete_question_ends_the_turn_well_before_a_silence_timer_would(cfg, model, say):
    q = say("What is the capital of France?")
    audio = np.concatenate([silence(0.5), q, silence(2.5)])
    decided_at: list[int] = []
    sigs = run(LearnedTurnDetector(SileroVad(), cfg), audio, real(model), decided_at=decided_at)
    kinds = [s.kind for s in sigs]
    assert kinds.count("end_of_turn") == 1 and kinds[0] == "speech_started", kinds
    i = kinds.index("end_of_turn")
    eot = sigs[i]
    assert eot.utterance is not None and eot.utterance.size > 0.8 * q.size
    after_speech_ms = (decided_at[i] - speech_end(audio)) * 1000 / SR
    assert after_speech_ms < cfg.end_of_turn_silence_ms, after_speech_ms  # the silence timer's wait


def test_fillers_and_a_mid_sentence_pause_do_not_end_the_turn(cfg, model, say):
    clip = say('I want to know, um, <break time="1200ms"/> what time it is.')
    audio = np.concatenate([silence(0.3), clip, silence(2.5)])
    sigs = run(LearnedTurnDetector(SileroVad(), cfg), audio, real(model))
    eots = [s for s in sigs if s.kind == "end_of_turn"]
    assert len(eots) == 1, [s.kind for s in sigs]
    assert "resumed" in [s.kind for s in sigs]  # the pause was seen, scored, and the turn went on
    end = speech_end(np.concatenate([silence(0.3), clip]))
    assert eots[0].at_sample >= end - int(0.3 * SR)  # the turn ended after "it is", not at "um"


def test_the_hard_cap_ends_a_turn_the_model_keeps_calling_incomplete(cfg, say):
    clip = say("How many legs does a")
    audio = np.concatenate([silence(0.3), clip, silence(3.5)])
    sigs = run(LearnedTurnDetector(SileroVad(), cfg), audio, lambda req: 0.0)
    eots = [s for s in sigs if s.kind == "end_of_turn"]
    assert len(eots) == 1
    # decided at the cap: the detector fed up to the cap only; the utterance ends at the speech
    assert eots[0].at_sample <= speech_end(np.concatenate([silence(0.3), clip])) + int(0.1 * SR)


def test_scores_are_asked_at_the_configured_checks_and_patience_stretches_them(cfg, say):
    clip = say("How many legs does a")
    audio = np.concatenate([silence(0.3), clip, silence(5.0)])
    for patience, cap in ((1.0, MIN_HARD_CAP_MS), (2.0, 2 * MIN_HARD_CAP_MS)):
        det = LearnedTurnDetector(SileroVad(), cfg)
        det.set_patience(patience)
        asked = []
        positions = []

        def score(req, asked=asked, positions=positions):
            asked.append(req.check)
            positions.append(req.at_sample)
            return 0.0

        sigs = run(det, audio, score)
        assert asked == list(range(len(cfg.smart_turn_checks_ms)))
        end = next(s for s in sigs if s.kind == "end_of_turn").at_sample
        gaps_ms = [(p - end) * 1000 / SR for p in positions]
        for want, got in zip(cfg.smart_turn_checks_ms, gaps_ms, strict=True):
            assert want * patience <= got <= want * patience + 100, (patience, gaps_ms)
        assert cap == max(cfg.max_pause_ms, MIN_HARD_CAP_MS) * max(patience, 1.0)


def test_decisions_are_on_the_media_clock_whatever_the_piece_size(cfg, model, say):
    clip = say('What is the capital <break time="700ms"/> of France?')
    audio = np.concatenate([silence(0.4), clip, silence(2.0)])
    runs = [[(s.kind, s.at_sample) for s in run(LearnedTurnDetector(SileroVad(), cfg), audio, real(model), step)]
            for step in (160, 1600, 7777)]
    assert runs[0] == runs[1] == runs[2]


def test_a_score_answers_only_what_was_asked(cfg, say):
    det = LearnedTurnDetector(SileroVad(), cfg)
    with pytest.raises(RuntimeError):
        det.resolve(0.9)
    clip = say("What is the capital of France?")
    audio = np.concatenate([silence(0.3), clip, silence(1.0)])
    det.feed(audio)
    assert det.awaiting is not None and 0 < det.held_back < audio.size
    with pytest.raises(RuntimeError):
        det.feed(silence(0.1))
    assert det.resolve(0.99)[0].kind == "end_of_turn" and det.last_outcome == "complete"


def test_the_end_of_turn_carries_the_transcript_its_decision_read(cfg, say):
    det = LearnedTurnDetector(SileroVad(), cfg)
    audio = np.concatenate([silence(0.3), say("Wait, stop."), silence(1.0)])
    det.feed(audio)
    assert det.awaiting is not None
    ends = det.resolve(0.99, "Wait, stop.", 0.9)
    assert [s.kind for s in ends] == ["end_of_turn"] and ends[0].text == "Wait, stop."
    # a commit (flush) ends a turn no check read: no transcript to hand on
    det.reset()
    det.feed(np.concatenate([silence(0.3), say("Yes")]))
    flushed = det.flush()
    assert flushed is not None and flushed.text is None


@pytest.mark.parametrize("text,listener", [
    ("Mm-hmm.", True), ("Yeah.", True), ("Okay.", True), ("Uh-huh.", True), ("I see.", True),
    ("Yeah, right.", True), ("Mhm", True), ("Yeah, okay, mm-hmm.", True),
    ("Okay, mm-tham.", True),  # Whisper base's spelling of espeak's "mm-hmm"
    ("Uhuh, I see.", True),  # ... and of espeak's "Uh-huh, I see."
    ("Mmm, stop.", False), ("Hmm, what?", False),
    ("Wait, stop.", False), ("Stop.", False), ("No, no, stop.", False), ("Hold on a second.", False),
    ("Okay, that's enough, thank you.", False), ("What time is it in Paris?", False),
    ("Yeah yeah yeah yeah yeah", False),  # longer than a listener response
    ("", False), ("...", False),
])
def test_a_backchannel_is_a_listener_response_and_nothing_else(text: str, listener: bool) -> None:
    from app.backend.turns.text_cues import backchannel

    assert backchannel(text) is listener


@pytest.mark.parametrize("text,maybe", [
    ("Yet", True), ("Yeh.", True), ("Okey", True), ("Yeah, vote.", True), ("Okay, that's", True),
    ("Stop.", False), ("Wait", False), ("No", False), ("What?", False), ("Hey", False),
    ("Yet again", False), ("Wait, stop", False), ("Okay, that's enough", False), ("", False),
])
def test_one_word_a_letter_away_from_a_listener_response_may_be_one_cut_short(text: str, maybe: bool) -> None:
    """Read 350 ms into "Yeah", Whisper wrote "Yet" (and "Yeah, vote." for "Yeah, okay"): a read
    before the words are over does not end the reply on a last word that may be cut short after
    listener words (they are read again); real stop words are not near any."""
    from app.backend.turns.text_cues import may_be_backchannel

    assert may_be_backchannel(text) is maybe


@pytest.mark.parametrize("text,stop", [
    ("Wait", True), ("Wait, stop.", True), ("Stop!", True), ("No, no, stop.", True), ("Hold on", True),
    ("That's enough.", True), ("Quiet, please", True),
    ("Yeah.", False), ("Okay, I'll sit up.", False), ("The air-dower", False), ("EF-O-T", False),
    ("Stopwatch", False), ("Waiter", False), ("", False),
])
def test_words_that_ask_to_stop_stop_the_reply_on_one_read(text: str, stop: bool) -> None:
    """A short read over a reply waits for a second read (a misread "yeah" is junk), unless it
    asks the assistant to stop: "Wait" read 300 ms into "Wait, stop." stops the reply then."""
    from app.backend.turns.text_cues import asks_to_stop

    assert asks_to_stop(text) is stop


@pytest.mark.parametrize("text,answered", [
    ("Oh", False), ("Oh.", False), ("Hmm...", False), ("Um, uh", False), ("Ahh!", False),  # a sound, no request
    ("[Music]", False), ("", False), ("a", False),
    ("Huh?", True), ("Eh?", True),  # "say that again"
    ("Mm-hmm.", True), ("Uh-huh.", True),  # they can mean yes
    ("Th-um.", False), ("H-hmm...", False),  # a stuttered filler, as Whisper wrote "Hmm, um" in a trial
    ("Th-that one.", True), ("T-shirt", True),
    ("Oh, what time is it?", True), ("Hmm, tell me about the sun.", True), ("No.", True),
])
def test_what_is_worth_answering(text: str, answered: bool) -> None:
    """An utterance of interjections alone ("Oh", "Hmm": Whisper also writes a tone melody as "Oh")
    is not a turn to answer: the assistant waits while the user thinks."""
    from app.backend.duplex.replies import meaningful

    assert meaningful(text) is answered


@pytest.mark.parametrize("heard,echo", [
    ("The capital of France is Paris.", True),  # its own reply, back through the microphone
    ("capital France", True),
    ("Sorry, what is the capital of Spain?", False),  # the same topic, other words
    ("Wait, stop.", False),
    ("", False),
])
def test_the_reply_s_own_words_coming_back_are_an_echo(heard: str, echo: bool) -> None:
    from app.backend.turns.text_cues import echoes

    assert echoes(heard, "The capital of France is Paris. It is a big city.") is echo
