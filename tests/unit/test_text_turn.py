"""The text end-of-turn model (the tiny Thinker's Gemma reading the transcript) and how the learned
turn detector weighs it: words that go on hold the turn, words that plainly end it end it early."""

from __future__ import annotations

import asyncio
import subprocess

import numpy as np
import pytest
import soundfile as sf

from app.backend.models.tiny.smart_turn import SmartTurnScorer
from app.backend.models.tiny.text_turn import GemmaTextEndModel, words_of
from app.backend.models.tiny.vad import SileroVad
from app.backend.turns.learned import MIN_HARD_CAP_MS, LearnedTurnDetector
from app.config import load_deploy_config
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import resample

SR = INPUT_SAMPLE_RATE_HZ


@pytest.fixture(scope="module")
def lm() -> GemmaTextEndModel:
    return GemmaTextEndModel()


@pytest.fixture(scope="module")
def cfg():
    return load_deploy_config().turn_policy


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> np.ndarray:
    path = tmp_path_factory.mktemp("text_turn") / "q.wav"
    subprocess.run(["espeak-ng", "-v", "en", "-s", "160", "-w", str(path), "I would like to book a table"], check=True)
    audio, rate = sf.read(str(path), dtype="float32")
    return np.concatenate([np.zeros(SR // 2, np.float32), resample(audio, rate, SR), np.zeros(3 * SR, np.float32)])


# Inner-pause fragments of the turn-taking dialogue set and whole sentences (benchmarks/turns_dataset.py).
FRAGMENTS = ["I would like to book a table", "Could you tell me how long it takes", "My plan for the weekend is",
             "I was wondering if you could"]
WHOLE = ["What is the capital of France?", "I would like to book a table for two people tonight.",
         "We adopted a rabbit last month.", "How long does it take to boil an egg?"]


def test_fragments_score_below_the_threshold_and_whole_sentences_above(lm, cfg):
    t = cfg.smart_turn_completion_threshold
    frag = [lm.end_probability(x) for x in FRAGMENTS]
    whole = [lm.end_probability(x) for x in WHOLE]
    assert max(frag) < t < min(whole), (frag, whole)
    assert lm.predict(FRAGMENTS[:2]).shape == (2,)


def test_final_punctuation_is_ignored_and_a_wordless_text_is_refused(lm):
    assert lm.end_probability("I would like to book a table.") == pytest.approx(
        lm.end_probability("I would like to book a table"), abs=1e-6)
    with pytest.raises(ValueError, match="no words"):
        lm.end_probability(" ... ")
    with pytest.raises(ValueError, match="words"):
        words_of("?!")


def test_a_probability_does_not_depend_on_the_call_before_it(lm):
    """The prompt's fixed start is kept between calls (only the words are evaluated), and a text
    scores the same whatever was scored before it (another session, a longer or shorter text)."""
    text = "How long should I boil an egg"
    first = lm.end_probability(text)
    for before in ("How long should I", "What is the capital of France", "How long should I boil an egg for me"):
        lm.end_probability(before)
        assert lm.end_probability(text) == first
    assert lm._fixed_ready and len(lm._fixed) == len(lm._llm.tokenize(b"Transcript of a voice message:\n", add_bos=True))


async def test_the_shared_scorer_runs_the_model_off_the_event_loop(lm):
    with SmartTurnScorer(lm, name="text-turn-test", prepare=words_of) as scorer:  # type: ignore[arg-type]
        p = await asyncio.wrap_future(scorer.score("What is the capital of France?"))
        assert p == pytest.approx(lm.end_probability("What is the capital of France"), abs=1e-6)
        with pytest.raises(ValueError):
            scorer.score("")
        assert scorer.stats().clips == 1


def decide(det: LearnedTurnDetector, audio: np.ndarray, acoustic: float, text: str, text_end: float | None):
    """Feed ``audio`` in 100 ms pieces; every check gets these scores. Returns (check silences, ms of
    the end of turn after the last speech or None)."""
    fed, checks, eot_at = 0, [], None
    step = SR // 10
    for i in range(0, audio.size, step):
        piece = audio[i : i + step]
        while True:
            sigs = det.feed(piece)
            fed += piece.size - det.held_back
            if any(s.kind == "end_of_turn" for s in sigs) and eot_at is None:
                eot_at = fed
            if det.awaiting is None:
                break
            checks.append(det.awaiting.check)
            piece = piece[piece.size - det.held_back:]
            if any(s.kind == "end_of_turn" for s in det.resolve(acoustic, text, text_end)) and eot_at is None:
                eot_at = fed
    return checks, eot_at


def speech_end(audio: np.ndarray) -> int:
    return int(np.flatnonzero(np.abs(audio) > 0.01)[-1])


def test_words_that_go_on_hold_the_turn_to_the_longer_cap_whatever_the_acoustic_model_says(cfg, clip):
    det = LearnedTurnDetector(SileroVad(), cfg)
    _, eot = decide(det, clip, 0.99, "I would like to book a table.", 0.01)
    assert eot is not None and det.last_outcome == "cap"
    waited_ms = (eot - speech_end(clip)) * 1000 / SR
    assert cfg.max_unfinished_pause_ms - 100 <= waited_ms <= cfg.max_unfinished_pause_ms + 300, waited_ms
    assert cfg.max_unfinished_pause_ms > max(cfg.max_pause_ms, MIN_HARD_CAP_MS)
    # the same scores with a text model that calls it finished: over at the first check
    det = LearnedTurnDetector(SileroVad(), cfg)
    checks, eot = decide(det, clip, 0.99, "I would like to book a table.", 0.5)
    assert checks == [0] and det.last_outcome == "complete"


def test_a_pause_whose_words_may_end_keeps_the_plain_cap(cfg, clip):
    det = LearnedTurnDetector(SileroVad(), cfg)
    _, eot = decide(det, clip, 0.01, "I would like to book a table.", 0.1)  # neither held nor confident
    assert det.last_outcome == "cap"
    assert (eot - speech_end(clip)) * 1000 / SR < cfg.max_unfinished_pause_ms - 200


def test_words_that_plainly_end_end_the_turn_at_the_confident_silence(cfg, clip):
    first = next(i for i, ms in enumerate(cfg.smart_turn_checks_ms) if ms >= cfg.smart_turn_confident_end_ms)
    det = LearnedTurnDetector(SileroVad(), cfg)
    checks, _ = decide(det, clip, 0.01, "I would like to book a table.", cfg.smart_turn_confident_text)
    assert checks[-1] == first and det.last_outcome == "complete"
    det = LearnedTurnDetector(SileroVad(), cfg)  # no text model and no sentence-end rule: the cap
    checks, _ = decide(det, clip, 0.01, "I would like to book a table.", None)
    assert cfg.smart_turn_sentence_end_ms is None and det.last_outcome == "cap"
    sentence_end = cfg.model_copy(update={"smart_turn_sentence_end_ms": 1100.0})  # the rule, when set
    late = next(i for i, ms in enumerate(cfg.smart_turn_checks_ms) if ms >= 1100.0)
    det = LearnedTurnDetector(SileroVad(), sentence_end)
    checks, _ = decide(det, clip, 0.01, "I would like to book a table.", None)
    assert checks[-1] == late and first < late and det.last_outcome == "complete"


def test_a_question_closed_on_a_stranded_preposition_is_left_to_the_text_model(cfg, clip):
    # "Where are you from?" ends on a word the word list calls dangling: with the text model's
    # score it ends when the acoustic model agrees, not at the longer cap
    det = LearnedTurnDetector(SileroVad(), cfg)
    checks, _ = decide(det, clip, 0.99, "Where are you from?", 0.7)
    assert checks == [0] and det.last_outcome == "complete"
    # the text model still holds a fragment Whisper closed with a question mark
    det = LearnedTurnDetector(SileroVad(), cfg)
    decide(det, clip, 0.99, "Can you remind me to?", 0.001)
    assert det.last_outcome == "cap"
    # without a text model's score the word list decides, as before
    det = LearnedTurnDetector(SileroVad(), cfg)
    decide(det, clip, 0.99, "Where are you from?", None)
    assert det.last_outcome == "cap"
    # other dangling words stay unfinished whatever the text model says
    for text in ("Can I have the?", "What is?"):
        det = LearnedTurnDetector(SileroVad(), cfg)
        decide(det, clip, 0.99, text, 0.7)
        assert det.last_outcome == "cap", text


def test_the_text_model_calls_questions_on_stranded_prepositions_finished(lm, cfg):
    finished = ["Where are you from?", "What is it made of?", "What are you looking at?",
                "Which one should I go for?"]
    fragments = ["Can you remind me to", "Could you tell me about", "I would like to book a table for"]
    scores = lm.predict(finished + fragments)
    threshold = cfg.smart_turn_completion_threshold
    assert all(s >= threshold for s in scores[: len(finished)]), list(zip(finished, scores, strict=False))
    assert all(s < threshold for s in scores[len(finished):]), list(zip(fragments, scores[len(finished):], strict=False))
