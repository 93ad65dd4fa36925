"""The tiny ASR's short encoder window: same words as Whisper's 30 s window, guarded fallbacks."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from app.backend.models.tiny import asr as asr_mod
from app.backend.models.tiny.asr import (
    WhisperAsr,
    is_repeated,
    max_decode_tokens,
    short_window_s,
)
from app.constants import INPUT_SAMPLE_RATE_HZ
from tests.conftest import espeak_wav

QUESTIONS = ("What is the capital of France?", "Wait, stop. What is two plus two?", "Yes.",
             "Hello, my name is Alice. The weather today is sunny and warm. Please tell me a short story about a cat.")


@pytest.mark.parametrize("duration_s", [0.0, 0.4, 1.1, 3.0, 4.99, 5.0, 9.7, 19.9])
def test_short_window_holds_the_audio_and_the_trailing_silence(duration_s):
    w = short_window_s(duration_s)
    assert w is not None and w % asr_mod.WINDOW_STEP_S == 0
    assert duration_s + asr_mod.TRAILING_SILENCE_S <= w <= asr_mod.MAX_SHORT_WINDOW_S
    assert w - asr_mod.WINDOW_STEP_S < max(duration_s + asr_mod.TRAILING_SILENCE_S, asr_mod.WINDOW_STEP_S)


def test_long_audio_takes_the_30_s_path():
    assert short_window_s(asr_mod.MAX_SHORT_WINDOW_S - asr_mod.TRAILING_SILENCE_S + 0.01) is None
    assert short_window_s(60.0) is None


@pytest.mark.parametrize("text,repeated", [
    ("Yes. Yes.", True), ("No, thanks. No, thanks. No,", False), ("no, no, no", True),
    ("What is 2 plus 2? What is 2 plus 2?", True), ("What is 2 plus 2?", False), ("", False),
    ("The cat sat on the mat. The cat", False),
])
def test_is_repeated(text, repeated):
    assert is_repeated(text) is repeated


def test_max_decode_tokens_grows_with_duration_and_is_capped():
    assert max_decode_tokens(0.0) == 16
    assert max_decode_tokens(2.0) < max_decode_tokens(4.0)
    assert max_decode_tokens(600.0) == 448


@pytest.fixture(scope="module")
def whisper() -> WhisperAsr:
    return WhisperAsr()


@pytest.fixture(scope="module")
def clips(speech_dir) -> list[np.ndarray]:
    out = []
    for i, q in enumerate(QUESTIONS):
        x, rate = sf.read(espeak_wav(q, speech_dir / f"asr_{i}.wav", lead_s=0.2, tail_s=0.3), dtype="float32")
        assert rate == INPUT_SAMPLE_RATE_HZ
        out.append(x)
    return out


def _words(text: str) -> list[str]:
    return [w.strip(".,!?;:").lower() for w in text.split()]


def _full_path(whisper: WhisperAsr, x: np.ndarray, monkeypatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(asr_mod, "short_window_s", lambda duration_s: None)
        return whisper.transcribe(x)


@pytest.mark.slow
def test_short_window_gives_the_30_s_windows_words(whisper, clips, monkeypatch):
    """Spoken turns (the first three clips, 1-3 s): the same words. The 6.5 s sentence in
    espeak's formant voice is hard for Whisper base in any window (a 20 s window hears
    "weathertunei"): at most 2 of its 21 words may differ from the text."""
    short = [whisper.transcribe(x) for x in clips]
    full = [_full_path(whisper, x, monkeypatch) for x in clips[:3]]
    assert [_words(t) for t in short[:3]] == [_words(t) for t in full]
    assert "france" in short[0].lower()
    said = _words(QUESTIONS[3])
    heard = _words(short[3])
    assert sum(w not in heard for w in said) <= 2, short[3]


def _count_30s(whisper: WhisperAsr, m) -> list[int]:
    """Record each use of the 30 s path (it still runs)."""
    calls: list[int] = []
    real = whisper._transcribe_30s
    m.setattr(whisper, "_transcribe_30s", lambda x: calls.append(1) or real(x))
    return calls


@pytest.mark.slow
def test_a_decode_suspect_in_one_window_only_is_decoded_again_in_a_longer_one(whisper, clips, monkeypatch):
    """"Stop. Stop." for "Stop.": the padding's repetition, gone in a window with more silence; no 30 s path."""
    expected = whisper.transcribe(clips[0])
    judged: list[str] = []
    with monkeypatch.context() as m:
        m.setattr(asr_mod, "is_repeated", lambda text: judged.append(text) or len(judged) == 1)
        calls = _count_30s(whisper, m)
        assert _words(whisper.transcribe(clips[0])) == _words(expected)
    assert len(judged) == 2 and not calls  # the first decode was suspect, the second was not


@pytest.mark.slow
def test_a_repetition_heard_in_both_windows_is_kept_without_the_30_s_path(whisper, speech_dir, monkeypatch):
    """"No, no, no." is said so: both windows hear the repetition, and it is the transcript."""
    x, _ = sf.read(str(espeak_wav("No, no, no.", speech_dir / "no-no-no.wav", rate_wpm=150)), dtype="float32")
    with monkeypatch.context() as m:
        calls = _count_30s(whisper, m)
        text = whisper.transcribe(x)
    assert is_repeated(text) and _words(text)[0] == "no", text
    assert not calls


@pytest.mark.slow
def test_decodes_that_stay_suspect_are_redone_on_the_30_s_path(whisper, clips, monkeypatch):
    expected = _full_path(whisper, clips[0], monkeypatch)
    with monkeypatch.context() as m:  # repeated in both windows, but not the same words: the 30 s path
        words = iter([["a"], ["b"]])
        m.setattr(asr_mod, "is_repeated", lambda text: True)
        m.setattr(asr_mod, "_words", lambda text: next(words))
        calls = _count_30s(whisper, m)
        assert whisper.transcribe(clips[0]) == expected
    assert len(calls) == 1
    with monkeypatch.context() as m:
        m.setattr(asr_mod, "max_decode_tokens", lambda duration_s: 5)  # every short decode hits the limit
        calls = _count_30s(whisper, m)
        assert whisper.transcribe(clips[0]) == expected
    assert len(calls) == 1


@pytest.mark.slow
def test_a_short_follow_up_is_heard_in_the_light_of_the_previous_turn(whisper, speech_dir):
    """"What about China?" (espeak-ng, 150 wpm, ~1.2 s) after "What is the capital of Japan?"; without
    that context Whisper base heard "What about Chilis?" (dev split of benchmarks/answers_items.py)."""
    x, _ = sf.read(str(espeak_wav("What about China?", speech_dir / "follow-china.wav", rate_wpm=150)),
                   dtype="float32")
    assert x.size < asr_mod.CONTEXT_MAX_S * INPUT_SAMPLE_RATE_HZ
    assert "china" in whisper.transcribe(x, "What is the capital of Japan?").lower()


@pytest.mark.slow
def test_a_longer_utterance_ignores_the_context(whisper, clips):
    long = next(c for c in clips if c.size >= asr_mod.CONTEXT_MAX_S * INPUT_SAMPLE_RATE_HZ)
    assert whisper.transcribe(long, "Bananas are yellow. Bananas are yellow.") == whisper.transcribe(long)


@pytest.fixture(scope="module")
def batch_items(speech_dir, clips) -> list[tuple[np.ndarray, str]]:
    """Utterances as several sessions hand them in at once: questions of different lengths (so
    different windows), two of the same window, a short follow-up with its context, and silence."""
    phrases = ("What is the time?", "Where is the station?", "Can you help me?", "Tell me a joke.")
    extra = [sf.read(str(espeak_wav(p, speech_dir / f"batch-{i}.wav", rate_wpm=160)), dtype="float32")[0]
             for i, p in enumerate(phrases)]
    china, _ = sf.read(str(espeak_wav("What about China?", speech_dir / "follow-china.wav", rate_wpm=150)),
                       dtype="float32")
    return [(clips[0], ""), (extra[0], ""), (china, "What is the capital of Japan?"), (extra[1], ""),
            (np.zeros(8000, np.float32), ""), (clips[2], ""), (extra[2], ""), (extra[3], "")]


@pytest.mark.slow
def test_a_batch_transcribes_each_utterance_as_it_would_be_alone(whisper, batch_items):
    alone = [whisper.transcribe(x, ctx) for x, ctx in batch_items]
    together = whisper.transcribe_batch(batch_items)
    assert together == alone
    assert alone[4] == "" and "china" in alone[2].lower()
    windows = [short_window_s(x.size / INPUT_SAMPLE_RATE_HZ) for x, _ in batch_items]
    assert len(set(windows)) < len(windows)  # some utterances did share a batched call


@pytest.mark.slow
def test_a_batched_decode_near_its_own_token_limit_is_decoded_alone(whisper, batch_items, monkeypatch):
    """The batch decodes to the largest limit of its items; an item that comes near its own is
    decoded again alone, so the limit (and the suspect-decode path after it) is exactly its own."""
    items = [batch_items[1], batch_items[3]]  # the same window
    with monkeypatch.context() as m:
        m.setattr(asr_mod, "max_decode_tokens", lambda duration_s: 4 if duration_s < 1.6 else 40)
        alone = [whisper.transcribe(x, ctx) for x, ctx in items]
        assert whisper.transcribe_batch(items) == alone


def test_a_bad_item_gets_its_error_and_the_others_their_transcripts(whisper, clips):
    out = whisper.transcribe_batch([(np.zeros((2, 800), np.float32), ""), (clips[0], ""),
                                    (np.array([np.nan, 0.5], np.float32), "")])
    assert isinstance(out[0], ValueError) and isinstance(out[2], ValueError)
    assert "france" in out[1].lower()
