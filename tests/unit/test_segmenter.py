"""Tests for app.backend.pipeline.segmenter.segment_text (pure text, no models)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.backend.pipeline.segmenter import (
    FIRST_SEGMENT_MIN_CHARS,
    FIRST_SEGMENT_MIN_WORDS,
    first_segment,
    segment_text,
    split_at_fractions,
)
from app.constants import MAX_SEGMENT_CHARS

SAMPLES = [
    "The capital of France is Paris.",
    "Hello there, my friend. The capital of France is Paris, and the capital of Italy is Rome.",
    "I think the answer is forty two, but I am not entirely sure about it, to be honest.",
    "Supercalifragilisticexpialidocious-and-then-some is a long word; short ones follow it.",
    "  leading spaces and trailing spaces  ",
    "Line one.\nLine two has more words in it.\n\nAnd a third paragraph here!",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3,
    "Wait... what? Really?! Yes: it's true (mostly).",
    "Price: $3.50, open 24 hours, call 555-0100 now!",
]


def _visible(seg: str) -> int:
    return len(seg.strip())


@pytest.mark.parametrize("text", SAMPLES)
def test_join_invariant_and_length(text: str) -> None:
    segs = segment_text(text)
    assert "".join(segs) == text
    for seg in segs:
        assert seg.strip(), f"blank segment in {segs!r}"
        if _visible(seg) > MAX_SEGMENT_CHARS:
            assert len(seg.split()) == 1, f"over-long multi-word segment {seg!r}"


@pytest.mark.parametrize("text", SAMPLES)
def test_whitespace_trails(text: str) -> None:
    segs = segment_text(text)
    for seg in segs[1:]:
        assert not seg[0].isspace(), f"segment starts with whitespace: {seg!r}"


def test_empty_and_blank() -> None:
    assert segment_text("") == []
    assert segment_text("   ") == ["   "]
    assert segment_text("\n") == ["\n"]


def test_short_text_is_one_segment() -> None:
    assert segment_text("Paris.") == ["Paris."]
    text = "x" * MAX_SEGMENT_CHARS
    assert segment_text(text) == [text]


def test_one_long_word_is_not_split() -> None:
    word = "pneumonoultramicroscopicsilicovolcanoconiosis"
    assert len(word) > MAX_SEGMENT_CHARS
    assert segment_text(word) == [word]
    assert segment_text(f"{word} is long") == [f"{word} ", "is long"]
    assert segment_text(f"a {word} b") == ["a ", f"{word} ", "b"]


def test_greedy_word_boundaries() -> None:
    segs = segment_text("The capital of France is Paris.")
    assert segs == ["The capital of France is ", "Paris."]
    # Every cut is at a word boundary: re-splitting the joined words gives the same words.
    text = SAMPLES[2]
    words = [w for s in segment_text(text) for w in s.split()]
    assert words == text.split()


def test_segments_are_filled_near_limit() -> None:
    text = SAMPLES[6]
    segs = segment_text(text)
    # All but the last segment: adding the next word would have exceeded the limit.
    for seg, nxt in itertools.pairwise(segs):
        assert (
            _visible(seg) + 1 + len(nxt.split()[0]) > MAX_SEGMENT_CHARS
            or seg.rstrip()[-1] in ".,;:!?"
        )


def test_prefers_punctuation_cut() -> None:
    text = "Yes, I can help you with that today and tomorrow."
    segs = segment_text(text)
    # Greedy would give "Yes, I can help you with that" (29 > 28 -> "...with"), the clause
    # boundary after "Yes," is too early (4 chars < half the budget), so no punctuation cut.
    assert segs[0] == "Yes, I can help you with "
    text = "Sure thing, my dear friend, here it comes now."
    segs = segment_text(text)
    assert segs[0] == "Sure thing, my dear friend, "
    text = "The weather is lovely today, so let us go outside."
    segs = segment_text(text)
    assert segs[0] == "The weather is lovely today, "


def test_custom_limit_and_validation() -> None:
    segs = segment_text("one two three four five six", max_chars=9)
    assert segs == ["one two ", "three ", "four five ", "six"]
    assert all(_visible(s) <= 9 for s in segs)
    with pytest.raises(ValueError):
        segment_text("x", max_chars=0)


def test_leading_whitespace_kept_on_first_segment() -> None:
    segs = segment_text("   hello world")
    assert segs == ["   hello world"]
    segs = segment_text("  " + "word " * 10)
    assert segs[0].startswith("  word")
    assert "".join(segs) == "  " + "word " * 10


# ----------------------------------------------------------------------------- first_segment

@pytest.mark.parametrize("raw,expected", [
    ("The capital of France", None),  # "France" may still grow ("Frances"): not settled
    ("The capital of France is", "The capital of France "),
    ("Hi there, my friend! How", "Hi there, my friend! "),  # a clause end from the third word on closes it
    ("Hi there! How", None),  # ... not before (too little speech to cover the rest's voicing)
    ("It's usually hot.", None),  # nothing after it yet: maybe the whole reply
    ("It's usually hot. It", "It's usually hot. "),
    ("Supercalifragilisticexpialidocious word", "Supercalifragilisticexpialidocious "),
    ("One\nTwo three four five", None),  # only the first line is the reply
])
def test_first_segment_settles_once_the_next_word_begins(raw: str, expected: str | None) -> None:
    assert first_segment(raw) == expected


@given(st.lists(st.from_regex(r"[A-Za-z']{1,12}[,.!?]?", fullmatch=True), min_size=1, max_size=20),
       st.integers(min_value=1, max_value=400))
def test_a_settled_first_segment_is_a_prefix_of_every_continuation(words: list[str], cut: int) -> None:
    text = " ".join(words)
    seg = first_segment(text[:cut])
    if seg is None:
        return
    assert (text + " ").startswith(seg), "the early segment must be where the final reply starts"
    assert seg.endswith(" ") and len(seg.strip()) <= MAX_SEGMENT_CHARS or len(seg.split()) == 1
    assert first_segment(text) == seg, "more text never moves a settled segment"
    shorter = " ".join(seg.split()[:-1])
    assert len(seg.split()) == 1 or len(shorter.split()) < FIRST_SEGMENT_MIN_WORDS or len(shorter) < FIRST_SEGMENT_MIN_CHARS \
        or shorter[-1] in ",.!?", "it closes at the first word where it may"


# ---------------------------------------------------------------- split_at_fractions
@given(text=st.text(alphabet=st.sampled_from("ab ,.\n"), max_size=60),
       fractions=st.lists(st.floats(0, 1), min_size=1, max_size=6).map(sorted))
def test_split_at_fractions_loses_nothing_and_cuts_only_at_word_ends(text, fractions):
    parts = split_at_fractions(text, fractions)
    assert len(parts) == len(fractions)
    assert "".join(parts) == text
    pos = 0
    for part in parts[:-1]:
        pos += len(part)
        assert pos in (0, len(text)) or (text[pos - 1].isspace() and not text[pos].isspace()), (text, parts)
    if len(text.split()) >= len(fractions):  # as many words as chunks: every chunk speaks one
        assert all(p.strip() for p in parts), (text, fractions, parts)


def test_split_at_fractions_follows_the_fractions():
    text = "The capital of France is Paris, "
    assert split_at_fractions(text, [0.3, 0.7, 1.0]) == ["The capital ", "of France ", "is Paris, "]
    assert split_at_fractions(text, [1.0]) == [text]
    assert split_at_fractions(text, []) == []
    assert split_at_fractions("Hi", [0.5, 1.0]) == ["Hi", ""]  # one word: all of it with the first chunk
