"""Catch a reply that only repeats the user's words, while it is being written.

Gemma 3 270M base, prompted with a transcript, sometimes continues the user's line instead of
answering it: "Thank you for your help." -> "Thank you for your help." (test split of
``benchmarks/bench_answers.py``, realtime route, row ``ce72a74``). Such an echo starts with the user's
first words, so it can be told from an answer within its first sentence: the streamed text is held
back while it is still a word-for-word prefix of the user's turn, let through as soon as it leaves
it, and rejected when its first sentence ends still inside it. The caller then writes the reply again
with the echo's first token banned (:meth:`~app.backend.models.tiny.llm.GemmaLlm.generate_reply`).
"""

from __future__ import annotations

import enum
import re
from typing import Final

MIN_ECHO_WORDS: Final[int] = 3
"""A first sentence shorter than this is never an echo ("Hello!" -> "Hello!" is a greeting)."""

MIN_ECHO_SHARE: Final[float] = 0.6
"""... nor one that repeats less than this share of the user's words (a reply may open with a
few of them: "Tea or coffee?" -> "Tea, ...")."""

_WORD: Final[re.Pattern[str]] = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_SENTENCE_END: Final[re.Pattern[str]] = re.compile(r"[.!?\n]")


class Echo(enum.Enum):
    """What the reply written so far is, against the user's turn."""

    PENDING = "pending"
    """Still a word-for-word prefix of the user's turn, its first sentence not finished: hold it back."""
    CLEAR = "clear"
    """It has left the user's words (or is too short to be an echo): an answer, let it through."""
    ECHO = "echo"
    """Its first sentence ended inside the user's words: reject it."""


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def judge(raw: str, user_text: str, *, done: bool = False) -> Echo:
    """Judge a reply being written against the user's turn.

    Args:
        raw: the reply's raw text so far (the LM's continuation; it may end inside a word).
        user_text: the user's turn, as the Thinker was given it.
        done: the generation has ended, so ``raw`` is the whole reply (its first sentence ends
            with it even without a full stop).

    Returns:
        :attr:`Echo.ECHO` when the reply's first sentence is the user's turn's first words (at least
        :data:`MIN_ECHO_WORDS` and :data:`MIN_ECHO_SHARE` of them); :attr:`Echo.PENDING` while it
        may still become one; else :attr:`Echo.CLEAR`. Case and punctuation are ignored.
    """
    user = _words(user_text)
    if not user:
        return Echo.CLEAR
    stripped = raw.lstrip()
    end = _SENTENCE_END.search(stripped)
    first = stripped[:end.start()] if end else stripped
    finished = done or end is not None
    said = _words(first)
    if not said:
        return Echo.PENDING if not finished else Echo.CLEAR
    if len(said) > len(user):
        return Echo.CLEAR
    # The last word may still be growing ("Thank yo") unless the sentence has ended after it.
    open_word = not finished and not first[-1:].isspace()
    whole, last = said[:-1] if open_word else said, said[-1]
    if user[:len(whole)] != whole or (open_word and not user[len(said) - 1].startswith(last)):
        return Echo.CLEAR
    if not finished:
        return Echo.PENDING
    if len(said) >= MIN_ECHO_WORDS and len(said) >= MIN_ECHO_SHARE * len(user):
        return Echo.ECHO
    return Echo.CLEAR
