"""Cut reply text into unit-sized segments for the Talker (model-agnostic).

MiniCPM-o's duplex loop closes a unit's text once it reaches
:data:`~app.constants.MAX_SEGMENT_CHARS` (28) characters; each segment is then voiced by the
Talker on its own. :func:`segment_text` reproduces that granularity for whole reply texts, at
word boundaries, without losing a single character.

Conventions:
    * **Whitespace trails.** The whitespace that separates two segments stays at the *end* of
      the earlier segment, so every segment but the first starts with a non-space character and
      ``"".join(segments) == text`` always holds. Leading whitespace of ``text`` (if any) stays
      at the start of the first segment.
    * **Length.** A segment's *visible* length -- ``len(segment.strip())`` -- is at most
      ``max_chars``. The only exception is a segment made of one single word (a run of
      non-whitespace) longer than ``max_chars``; such a word is never split.
    * **Punctuation.** When the greedy cut would fall in the middle of a clause, a cut right
      after punctuation (``. , ; : ! ?`` and closing quotes/brackets after them) is preferred,
      provided that segment is still at least :data:`PUNCT_MIN_FRACTION` of ``max_chars``
      long, so segments do not become tiny.
"""

from __future__ import annotations

import math
import re
from typing import Final

from app.constants import MAX_SEGMENT_CHARS

PUNCT_MIN_FRACTION: Final[float] = 0.5
"""A punctuation cut is taken only if the segment it closes has at least this fraction of
``max_chars`` visible characters (14 of 28); otherwise the greedy word cut is used."""

_TOKEN_RE: Final[re.Pattern[str]] = re.compile(r"\S+\s*")
"""A word followed by its trailing whitespace."""

_PUNCT_END_RE: Final[re.Pattern[str]] = re.compile(r"[.,;:!?\u2026\u2014][\"'\u201d\u2019)\]]*$")
"""A word that ends a clause: ends with punctuation, optionally followed by closing marks."""


def segment_text(text: str, max_chars: int = MAX_SEGMENT_CHARS) -> list[str]:
    """Split ``text`` into consecutive segments of at most ``max_chars`` visible characters.

    Args:
        text: any string (may be empty, may contain newlines or runs of spaces).
        max_chars: the segment budget in characters (>= 1); default
            :data:`~app.constants.MAX_SEGMENT_CHARS`.

    Returns:
        The segments, in order. ``"".join(result) == text``. ``[]`` for ``""``; a whitespace-only
        text comes back as one segment (``[text]``) so no character is lost. Every segment
        contains at least one non-space character except in that whitespace-only case.

    Raises:
        ValueError: ``max_chars`` < 1.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if not text:
        return []
    lead_len = len(text) - len(text.lstrip())
    lead, body = text[:lead_len], text[lead_len:]
    if not body:
        return [text]

    tokens = _TOKEN_RE.findall(body)
    min_punct = math.ceil(PUNCT_MIN_FRACTION * max_chars)
    segments: list[str] = []
    i = 0
    while i < len(tokens):
        # Greedy: take as many whole words as fit (always at least one).
        j = i + 1
        visible = len(tokens[i].rstrip())
        while j < len(tokens):
            grown = (
                visible + len(tokens[j - 1]) - len(tokens[j - 1].rstrip()) + len(tokens[j].rstrip())
            )
            if grown > max_chars:
                break
            visible = grown
            j += 1
        # Prefer an earlier cut right after punctuation when the greedy cut splits a clause.
        if j < len(tokens) and not _PUNCT_END_RE.search(tokens[j - 1].rstrip()):
            for k in range(j - 1, i, -1):  # k = number of words ending the candidate segment
                candidate = "".join(tokens[i:k]).rstrip()
                if len(candidate) < min_punct:
                    break
                if _PUNCT_END_RE.search(candidate):
                    j = k
                    break
        segments.append("".join(tokens[i:j]))
        i = j
    segments[0] = lead + segments[0]
    return segments


FIRST_SEGMENT_MIN_WORDS: Final[int] = 4
"""A streamed reply's first segment closes after this many words (or earlier, at a clause end)."""

FIRST_SEGMENT_MIN_CHARS: Final[int] = 18
"""... and once it has at least this many visible characters ("The capital of France", ~1.2 s of
speech). Its audio must last until the rest of the reply is voiced: with 3 words / 12 characters
(~0.7 s, less the Code2Wav look-ahead held back for the next segment) a loaded 2-core machine
left an audible gap before the second segment (the page's barge-in E2E test caught it)."""


def first_segment(raw: str, max_chars: int = MAX_SEGMENT_CHARS) -> str | None:
    """The first segment of a reply still being written, once the streamed text settles it.

    A short first segment lets the Talker and Code2Wav start while the Thinker writes the rest.
    It closes after the first word that ends a clause (punctuation, see :func:`segment_text`) from
    the third word on, or
    after :data:`FIRST_SEGMENT_MIN_WORDS` words of :data:`FIRST_SEGMENT_MIN_CHARS` visible
    characters, whichever comes first, and never past ``max_chars`` (one longer word alone is
    kept whole). It is settled only once the next word has begun on the same line, so more of the
    reply always follows it.

    Args:
        raw: the reply's raw text so far (any whitespace; only its first line counts).
        max_chars: the segment budget (:data:`~app.constants.MAX_SEGMENT_CHARS`).

    Returns:
        The segment's words, single-spaced, with one trailing space (the convention of
        :func:`segment_text`), or ``None`` while it is not settled.
    """
    line = raw.lstrip().split("\n", 1)[0]
    words = line.split()
    taken: list[str] = []
    for word in words[:-1]:  # the last word may still be growing: never the segment's end
        if taken and len(" ".join([*taken, word])) > max_chars:
            break
        taken.append(word)
        text = " ".join(taken)
        if (len(taken) >= 3 and _PUNCT_END_RE.search(word)) or \
                (len(taken) >= FIRST_SEGMENT_MIN_WORDS and len(text) >= FIRST_SEGMENT_MIN_CHARS):
            return text + " "
    if taken and len(" ".join([*taken, words[len(taken)]])) > max_chars:
        return " ".join(taken) + " "  # the budget is full: close here
    return None


def split_at_fractions(text: str, fractions: list[float]) -> list[str]:
    """Cut one segment's text into consecutive parts that end near the given fractions of it.

    Used to give each Code2Wav chunk of a segment the part of the text its audio speaks (the
    ``k``-th chunk ends ``fractions[k]`` of the way through the segment's codec frames). Cuts
    fall at word boundaries (the whitespace trails, as in :func:`segment_text`); every part holds
    at least one word when there are as many words as parts (else the later parts may be empty),
    the last part takes the rest, and ``"".join(parts) == text`` always holds.

    Args:
        text: the segment's text.
        fractions: one per part, non-decreasing, each in [0, 1] (the last is treated as 1).

    Returns:
        ``len(fractions)`` strings (``[text]`` for a single fraction; ``[]`` for none).
    """
    if not fractions:
        return []
    ends = [m.end() for m in _TOKEN_RE.finditer(text)]  # cut positions after each word
    parts: list[str] = []
    prev, used = 0, 0  # characters and words taken so far
    for k, f in enumerate(fractions):
        left = len(fractions) - 1 - k  # parts still to come
        if left == 0:
            cut = len(text)
        else:
            lo = min(used + 1, len(ends))  # at least one more word, where there is one
            hi = max(lo, len(ends) - left)  # ... and one left for each later part, where possible
            target = min(max(f, 0.0), 1.0) * len(text)
            pick = min(range(lo, hi + 1), key=lambda n: abs((ends[n - 1] if n else 0) - target)) if ends else 0
            used = max(pick, used)
            cut = max(ends[used - 1] if used else 0, prev)
        parts.append(text[prev:cut])
        prev = cut
    return parts
