"""``tiny`` Thinker tool: camera questions answered from the scene description.

The ``tiny`` eyes (:mod:`.vision`) describe a frame in one line ("a white background with three red
circles and one blue square on the right; the text: OPEN; a clock showing 3:40"), and the prompt
carries it as ``[The camera shows: ...]``. Gemma 3 270M (base) often does not read it: on the dev
split of ``benchmarks/answers_items.py`` it answered "How many circles are there?" with "Four
circles." under a description of five, "What is written here?" with "I am a small voice assistant."
and "What colour is the circle?" with the colour of another shape. Where the question asks for
something the description states (a count of a shape, a shape's or the background's colour, the
written words, a clock's time, whether a shape is there, what is seen), :func:`camera_reply` writes
the reply from the description, as :func:`~app.backend.models.tiny.tools.direct_reply` does for
sums; anything else (a question about a thing the eyes have no name for, such as a car or a house)
is left to the LM, which still reads the description.

Pure functions of the text; they return ``None`` when no rule applies and never raise on any
``str`` input. The description grammar is :meth:`app.backend.models.tiny.vision.Scene.sentence`'s.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from app.backend.models.tiny.shapes import PALETTE, SHAPES
from app.backend.models.tiny.vision import NUMBER_WORDS, PLURALS

_SINGULAR: Final[dict[str, str]] = {**{p: s for s, p in PLURALS.items()}, **{s: s for s in SHAPES}}
_COLOUR_RE: Final[str] = "|".join(PALETTE)
_SHAPE_RE: Final[str] = "|".join(sorted(_SINGULAR, key=len, reverse=True))

_GROUP_RE: Final[re.Pattern[str]] = re.compile(
    rf"\b(?P<n>a|one|two|three|four|five|six|seven|eight|nine|ten|\d+)\s+(?:big\s+)?"
    rf"(?P<colour>{_COLOUR_RE})\s+(?P<shape>{_SHAPE_RE})\b")
_OTHER_RE: Final[re.Pattern[str]] = re.compile(
    r"\b(?P<n>one|two|three|four|five|six|seven|eight|nine|ten|\d+) other shapes\b")
_BACKGROUND_RE: Final[re.Pattern[str]] = re.compile(rf"\ba (?:plain )?(?P<colour>{_COLOUR_RE}) background\b")
_TEXT_RE: Final[re.Pattern[str]] = re.compile(r"(?:^|; )the text: (?P<text>[^;]+)")
_CLOCK_RE: Final[re.Pattern[str]] = re.compile(r"\ba clock showing (?P<time>\d{1,2}:\d{2})\b")

_ASK_COUNT: Final[re.Pattern[str]] = re.compile(
    r"\b(?:how many (?P<a>\w+)|count (?:the |all the )?(?P<b>\w+))", re.IGNORECASE)
_ASK_COLOUR: Final[re.Pattern[str]] = re.compile(
    r"\b(?:what|which) colou?r (?:is|are) (?:the |that |this )?(?P<thing>\w+)", re.IGNORECASE)
_ASK_THERE: Final[re.Pattern[str]] = re.compile(
    r"\b(?:is there|are there|do you see|can you see) (?:a |an |any )?(?P<thing>\w+)", re.IGNORECASE)
_ASK_WORDS: Final[re.Pattern[str]] = re.compile(
    r"\b(?:what (?:word|words|text)|what does (?:it|this|that|the \w+) say|what(?:'s| is) written|"
    r"read (?:the |this |that |it|what)|what do(?:es)? (?:the |this )?(?:sign|paper|card|note) say)",
    re.IGNORECASE)
_ASK_TIME: Final[re.Pattern[str]] = re.compile(r"\bwhat time\b", re.IGNORECASE)
_ASK_SEEN: Final[re.Pattern[str]] = re.compile(
    r"\b(?:what (?:do|can) you see|what(?:'s| is) (?:this|that|in (?:the|this) (?:picture|image|frame))|"
    r"describe (?:the |this |what)|what am i (?:showing|holding))\b", re.IGNORECASE)
_SHAPES_WORDS: Final[frozenset[str]] = frozenset({"shapes", "things", "objects"})


@dataclass(frozen=True)
class SeenScene:
    """What one description line states.

    Attributes:
        sentence: the line itself.
        background: the background's colour name, or None.
        groups: ``(colour, shape, count)`` of each named group, in the line's order.
        others: the count of "other shapes" beyond the named groups.
        text: the written words (``"OPEN, 24 HOURS"``), or None.
        clock: a clock's time (``"3:40"``), or None.
    """

    sentence: str
    background: str | None = None
    groups: tuple[tuple[str, str, int], ...] = field(default_factory=tuple)
    others: int = 0
    text: str | None = None
    clock: str | None = None

    @property
    def described(self) -> bool:
        """Whether the line is in the eyes' grammar (a background, shapes, words, a clock or a busy
        scene were stated), not some other text."""
        return bool(self.background or self.groups or self.others or self.text or self.clock
                    or self.sentence.startswith(("a busy scene", "it looks like")))


def _count(word: str) -> int:
    w = word.lower()
    if w == "a":
        return 1
    return int(w) if w.isdigit() else NUMBER_WORDS.index(w)


def parse_scene(sentence: str) -> SeenScene:
    """Read one :meth:`~app.backend.models.tiny.vision.Scene.sentence` line back into its parts."""
    text = _TEXT_RE.search(sentence)
    clock = _CLOCK_RE.search(sentence)
    first = sentence.split("; ", 1)[0]  # the shapes and the background are stated in the first part
    groups = tuple((m["colour"], _SINGULAR[m["shape"]], _count(m["n"])) for m in _GROUP_RE.finditer(first))
    other = _OTHER_RE.search(first)
    bg = _BACKGROUND_RE.search(first)
    return SeenScene(sentence=sentence, background=bg["colour"] if bg else None, groups=groups,
                     others=_count(other["n"]) if other else 0, text=text["text"].strip() if text else None,
                     clock=clock["time"] if clock else None)


def _number(n: int) -> str:
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


def _shape_word(word: str | None) -> str | None:
    return _SINGULAR.get((word or "").lower())


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def camera_reply(question: str, seen: Sequence[str]) -> str | None:
    """The reply to a camera question that the scene description answers, else None.

    Args:
        question: the user's turn (typed, or its transcript).
        seen: the turn's ``seen_text`` (one description per image or camera frame; the last
            non-blank one is read).

    Returns:
        E.g. ``"I see three circles."``, ``"The square is blue."``, ``"The background is white."``,
        ``"It says OPEN."``, ``"The clock shows 3:40."``, ``"Yes, there is one red circle."``,
        ``"I see a white background with a green triangle."``; None when nothing was seen or the
        question is not one of these (the LM answers).
    """
    line = next((s.strip() for s in reversed(seen) if s and s.strip()), None)
    if line is None or not question.strip():
        return None
    scene = parse_scene(line)
    if not scene.described:
        return None  # not the eyes' grammar (e.g. bare OCR text): the LM reads it
    q = question.strip()
    if m := _ASK_COUNT.search(q):
        word = (m["a"] or m["b"]).lower()
        if word in _SHAPES_WORDS:
            n = sum(c for _, _, c in scene.groups) + scene.others
            return f"I see {_number(n)} shape{'s' if n != 1 else ''}." if n else "I don't see any shapes."
        shape = _shape_word(word)
        if shape is not None:
            n = sum(c for _, s, c in scene.groups if s == shape)
            if n == 0:
                return f"I don't see any {PLURALS[shape]}."
            return f"I see {_number(n)} {shape if n == 1 else PLURALS[shape]}."
    if m := _ASK_COLOUR.search(q):
        thing = m["thing"].lower()
        if thing == "background" and scene.background is not None:
            return f"The background is {scene.background}."
        shape = _shape_word(thing)
        if shape is not None:
            colours = list(dict.fromkeys(c for c, s, _ in scene.groups if s == shape))
            if len(colours) == 1:
                return f"The {shape} is {colours[0]}."
            if colours:
                return f"There are {_join(colours)} {PLURALS[shape]}."
            return f"I don't see a {shape}."
    if _ASK_WORDS.search(q):
        return f"It says {scene.text}." if scene.text else "I can't see any writing."
    if _ASK_TIME.search(q) and scene.clock is not None:
        return f"The clock shows {scene.clock}."
    if (m := _ASK_THERE.search(q)) and (shape := _shape_word(m["thing"])) is not None:
        found = Counter({c: n for c, s, n in scene.groups if s == shape})
        if not found:
            return f"No, I don't see a {shape}."
        total = sum(found.values())
        what = _join([f"{_number(n)} {c} {shape if n == 1 else PLURALS[shape]}" for c, n in found.items()])
        return f"Yes, there {'is' if total == 1 else 'are'} {what}."
    if _ASK_SEEN.search(q):
        return f"I see {line}."
    return None
