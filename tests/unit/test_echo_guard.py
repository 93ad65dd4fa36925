"""The echo guard: a reply whose first sentence only repeats the user's words is told apart from an answer."""

from __future__ import annotations

import pytest

from app.backend.models.tiny.echo_guard import Echo, judge

USER = "Thank you for your help."


@pytest.mark.parametrize("raw", ["", " ", " Thank", " Thank yo", " Thank you for", " thank you, for your"])
def test_a_reply_still_inside_the_users_words_is_held(raw: str) -> None:
    assert judge(raw, USER) is Echo.PENDING


@pytest.mark.parametrize("raw", [" Thank you for your help.", " Thank you for your help!\nUser:",
                                 " THANK YOU FOR YOUR", " Thank you for your help"])
def test_a_first_sentence_that_ends_inside_the_users_words_is_an_echo(raw: str) -> None:
    done = not raw.rstrip().endswith((".", "!", ":"))
    assert judge(raw, USER, done=done) is Echo.ECHO


@pytest.mark.parametrize(("raw", "user"), [
    (" You are welcome!", USER),
    (" Thank you too", USER),  # leaves the user's words at "too"
    (" Thanks", USER),  # a finished word that is not the user's "Thank"
    (" Hello!", "Hello!"),  # a greeting answered in kind: shorter than MIN_ECHO_WORDS
    (" Thank you.", USER),  # 2 of 5 words
    (" The capital of Italy is Rome.", "What is the capital of Italy?"),
    (" Madrid.", ""),
])
def test_an_answer_is_let_through(raw: str, user: str) -> None:
    assert judge(raw, user, done=True) is Echo.CLEAR


def test_a_reply_longer_than_the_users_turn_is_not_an_echo() -> None:
    assert judge(" Thank you for your help today", USER) is Echo.CLEAR


def test_an_empty_finished_reply_is_not_an_echo() -> None:
    assert judge("  ", USER, done=True) is Echo.CLEAR
