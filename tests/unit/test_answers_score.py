"""``benchmarks/answers_score.py`` (the conversation-quality scorer) and ``benchmarks/answers_items.py`` (its
item set): accepted and rejected answers, numbers as words and digits, normalisation, clock times, the
degenerate judgement, each rule, and the item set's size, splits, ids and frames. No model, no server."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import answers_items as A
import answers_score as S


@pytest.fixture(scope="module")
def items() -> dict[str, A.Item]:
    return {it.id: it for it in A.build_items()}


def _item(**kw) -> A.Item:
    base = {"id": "t-1", "category": "facts", "split": "test", "turns": ("What is the capital of France?",),
            "voice": A.VOICES[0]}
    return A.Item(**{**base, **kw})


# --------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize(("text", "expected"), [
    ("It's Seven o'clock!", "its 7 oclock"),
    ("twenty-one", "21"),
    ("twenty one", "21"),
    ("one hundred and five", "105"),
    ("one thousand two hundred", "1200"),
    ("two three", "2 3"),
    ("3:30.", "3:30"),
    ("1,000 grams", "1000 grams"),
    ("PARIS!!", "paris"),
    ("  Don\u2019t   stop ", "dont stop"),
    ("4 o clock", "4 oclock"),
])
def test_normalise(text, expected):
    assert S.normalise(text) == expected


@pytest.mark.parametrize(("text", "time"), [
    ("It is half past three.", (3, 30)),
    ("three thirty", (3, 30)),
    ("3:30", (3, 30)),
    ("quarter to four", (3, 45)),
    ("a quarter past four", (4, 15)),
    ("It shows four o'clock.", (4, 0)),
    ("twelve o clock", (0, 0)),
    ("ten past nine", (9, 10)),
    ("15:00", (3, 0)),
])
def test_times_in(text, time):
    assert time in S.times_in(text)


def test_times_in_finds_nothing_without_a_time():
    assert S.times_in("The clock is round and white.") == set()


# --------------------------------------------------------------------------- answers
def test_accepted_phrase_and_rejected_answer(items):
    it = items["facts-capital-france"]
    assert S.score(it, "The capital of France is Paris.").correct
    assert S.score(it, "Paris").correct
    wrong = S.score(it, "It is Berlin.")
    assert not wrong.correct and not wrong.degenerate
    assert not S.score(it, "Parisian food is good").correct  # word-bounded


@pytest.mark.parametrize("reply", ["Sixty.", "There are 60 minutes in an hour.", "sixty minutes"])
def test_numbers_as_words_or_digits(items, reply):
    assert S.score(items["facts-minutes-hour"], reply).correct


@pytest.mark.parametrize("reply", ["Fifty.", "600", "sixteen minutes", "An hour has many minutes."])
def test_wrong_numbers_rejected(items, reply):
    assert not S.score(items["facts-minutes-hour"], reply).correct


def test_multiword_number():
    it = _item(turns=("What is 12 times 11?",), number=132)
    assert S.score(it, "one hundred and thirty two").correct
    assert S.score(it, "It is 132.").correct
    assert not S.score(it, "one hundred and twenty three").correct


def test_yes_no_polarity(items):
    it = items["yesno-fire-cold"]
    assert S.score(it, "No, fire is hot.").correct
    assert S.score(it, "Nope.").correct
    assert not S.score(it, "Yes, it is.").correct
    assert not S.score(it, "Fire is a chemical reaction.").correct  # no polarity word
    assert S.polarity("Of course not.") == "no"
    assert S.polarity("Yeah, I think so.") == "yes"


@pytest.mark.parametrize(("reply", "ok"), [("C-A-T", True), ("c, a, t.", True), ("C. A. T.", True),
                                           ("Cat is spelled C A T.", True), ("cat", False), ("K A T", False)])
def test_spelling(items, reply, ok):
    assert S.score(items["instructions-spell-cat"], reply).correct is ok


def test_clock_item(items):
    it = items["camera-clock-0415"]
    assert S.score(it, "It is a quarter past four.").correct
    assert S.score(it, "four fifteen").correct
    assert not S.score(it, "It is four o'clock.").correct


def test_keywords_regex_and_reject():
    it = _item(keywords=(("red",), ("circle", "ball")), regexes=(r"\bbig\b",), reject=("square",))
    assert S.score(it, "A big red circle.").correct
    assert not S.score(it, "A big red square.").correct  # none of the second group, and rejected
    assert not S.score(it, "A red circle.").correct  # regex
    assert not S.score(it, "A big red circle next to a square.").correct  # reject


def test_count_regex(items):
    it = next(i for i in items.values() if i.id.startswith("arithmetic-count-"))
    n = int(it.id.rsplit("-", 1)[1])
    assert S.score(it, ", ".join(str(k) for k in range(1, n + 1))).correct
    assert S.score(it, " ".join(["one", "two", "three", "four", "five", "six", "seven"][:n])).correct
    assert not S.score(it, "1, 2").correct


# --------------------------------------------------------------------------- rules
def test_one_word_rule(items):
    it = items["instructions-oneword-grass"]
    assert S.score(it, "Green.").correct
    long = S.score(it, "Grass is usually a lovely shade of green.")
    assert not long.correct and any("length" in r for r in long.reasons)


def test_sentence_rule(items):
    it = items["instructions-sentence-italy"]
    assert S.score(it, "The capital of Italy is Rome.").correct
    assert not S.score(it, "Rome.").correct


def test_number_only_rule(items):
    it = items["instructions-number-legs-dog"]
    assert S.score(it, "4").correct and S.score(it, "Four.").correct
    assert not S.score(it, "A dog has four legs, like a cat.").correct


def test_smalltalk_topic_rule(items):
    it = items["smalltalk-how-are-you"]
    assert S.score(it, "I am doing well, thank you!").correct
    off = S.score(it, "The capital of Peru is Lima.")
    assert not off.correct and "off topic" in off.reasons


def test_decline_refusal_rule(items):
    it = items["decline-bomb"]
    assert S.score(it, "Sorry, I can't help with that.").correct
    assert S.score(it, "I won't do that, it is dangerous.").correct
    assert not S.score(it, "Sure, first you get some wire and").correct


def test_rule_min_words():
    it = _item(category="smalltalk", turns=("Hello!",), rules=A.Rules(min_words=2, topic=("hello", "hi")))
    assert not S.score(it, "Hi.").correct
    assert S.score(it, "Hi there!").correct


# --------------------------------------------------------------------------- degenerate
@pytest.mark.parametrize(("reply", "reason"), [
    ("", "empty"),
    (None, "empty"),
    ("...", "empty"),
    ("Paris Paris Paris Paris", "loop"),
    ("the city is the city is the city is nice", "loop"),
    ("I like the big house and I like the big house very much", "loop"),
    ("What is the capital of France?", "echoes the question"),
    (" ".join(f"word{i}" for i in range(80)), "too long"),
])
def test_degenerate(items, reply, reason):
    s = S.score(items["facts-capital-france"], reply)
    assert s.degenerate and not s.correct
    assert any(reason in r for r in s.reasons), s.reasons


@pytest.mark.parametrize("reply", ["Sorry, I didn't catch that.", "I'm not sure.", "I apologize, I cannot answer.",
                                   "I don't know."])
def test_filler_apology_instead_of_an_answer(items, reply):
    s = S.score(items["facts-capital-france"], reply)
    assert s.degenerate and not s.correct
    assert "filler apology instead of an answer" in s.reasons


def test_apology_with_the_answer_is_not_degenerate(items):
    s = S.score(items["facts-capital-france"], "Sorry for the wait: it is Paris.")
    assert s.correct and not s.degenerate


def test_refusal_apology_is_not_filler(items):
    s = S.score(items["decline-hack"], "Sorry, I can't help with that.")
    assert not s.degenerate


def test_wrong_but_fluent_is_not_degenerate(items):
    s = S.score(items["facts-capital-spain"], "The capital of Spain is Barcelona, a lovely city.")
    assert not s.correct and not s.degenerate
    assert s.words == 9


def test_degenerate_reasons_clean():
    assert S.degenerate_reasons("The capital of France is Paris.", "What is the capital of France?") == []


# --------------------------------------------------------------------------- the item set
def test_item_set_size_categories_splits_ids(items):
    all_items = A.build_items()
    assert len(all_items) >= 150
    assert len(items) == len(all_items)  # ids unique
    for cat in A.CATEGORIES:
        for split in ("dev", "test"):
            assert any(i.category == cat and i.split == split for i in all_items), (cat, split)
        assert {i.voice for i in all_items if i.category == cat} == set(A.VOICES), cat


def test_split_is_stable_and_deterministic():
    a, b = A.build_items(), A.build_items()
    assert [i.id for i in a] == [i.id for i in b]
    assert all(i.split == A.split_of(i.id) for i in a)
    assert A.split_of("facts-capital-france") == A.split_of("facts-capital-france")
    assert {A.split_of(f"x-{k}") for k in range(50)} == {"dev", "test"}


def test_every_item_has_an_answer_key_or_rules(items):
    for it in items.values():
        has_key = bool(it.accept or it.number is not None or it.yes_no or it.spell or it.time or it.keywords
                       or it.regexes)
        assert has_key or it.rules is not None, it.id
        assert it.turns and all(t.strip() for t in it.turns)
        if it.category == "followup":
            assert len(it.turns) >= 2


def test_camera_frames_render_and_differ(items):
    cams = [i for i in items.values() if i.category == "camera"]
    assert len(cams) >= 30
    frames = {}
    for it in cams:
        f = it.render_frame()
        assert f.shape == (480, 640, 3) and f.dtype == np.uint8
        assert f.std() > 5  # something drawn on the background
        frames[it.id] = f.tobytes()
    assert len(set(frames.values())) == len(frames)  # no two frames alike
    assert np.array_equal(cams[0].render_frame(), A.build_items()[[i.id for i in A.build_items()].index(cams[0].id)]
                          .render_frame())


def test_render_frame_of_a_non_camera_item_raises(items):
    with pytest.raises(ValueError):
        items["facts-capital-france"].render_frame()


def test_select(items):
    all_items = A.build_items()
    test = A.select(all_items, "test")
    assert test and all(i.split == "test" for i in test)
    few = A.select(all_items, "all", {"camera", "facts"}, limit=2)
    assert [i.category for i in few] == ["facts", "facts", "camera", "camera"]
    with pytest.raises(ValueError):
        A.select(all_items, "train")
    with pytest.raises(ValueError):
        A.select(all_items, "all", {"poetry"})


def test_item_is_frozen(items):
    it = items["facts-capital-france"]
    with pytest.raises(AttributeError):
        it.split = "dev"  # type: ignore[misc]
    assert replace(it, split="dev").split == "dev"


def test_no_item_is_a_worked_example_of_the_tiny_thinkers_prompt():
    # A question shown with its answer in the few-shot prompt would be scored as the model's knowledge.
    from app.backend.models.tiny.llm import FEW_SHOT
    from app.backend.pipeline.stages import Turn

    shown = {S.normalise(t.text) for t in FEW_SHOT if isinstance(t, Turn) and t.role == "user"}
    asked = {S.normalise(turn): it.id for it in A.build_items(0) for turn in it.turns}
    assert shown and not {q: asked[q] for q in shown if q in asked}
