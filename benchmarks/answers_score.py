"""Scoring of the conversation-quality benchmark (``bench_answers.py``, issue #25 part 1).

Pure functions: no model, no server, no file access.

* :func:`normalise` lower-cases, folds apostrophes, turns number words into digits
  ("twenty one" -> "21"), folds "o'clock" forms to ``oclock`` and drops punctuation (a ``:``
  between digits stays: "3:30").
* :func:`times_in` reads clock times from a reply ("half past three", "3:30", "three thirty",
  "quarter to four", "4 o'clock") as ``(hour % 12, minute)`` pairs.
* :func:`degenerate_reasons` judges a reply unusable whatever the item: empty, a loop
  (repeated n-grams or a word repeated in a row), an echo of the question, a length outside the
  item's spoken bounds, a filler apology where an answer was due.
* :func:`score` judges one reply to one :class:`answers_items.Item`: accepted phrases, numbers,
  yes/no polarity, spelled letters, clock times, keyword groups, regexes and the item's
  :class:`answers_items.Rules`; returns a :class:`Score`.

Lengths are counted in words (whitespace tokens of the normalised text).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from answers_items import Item

__all__ = [
    "Score",
    "degenerate_reasons",
    "normalise",
    "number_words_to_digits",
    "polarity",
    "score",
    "times_in",
    "words",
]

_UNITS = {"zero": 0, "oh": None, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
          "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_UNITS.pop("oh")
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fourty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_ORDINALS = {"first": "1", "second": "2", "third": "3", "fourth": "4", "fifth": "5", "sixth": "6",
             "seventh": "7", "eighth": "8", "ninth": "9", "tenth": "10", "twelfth": "12"}
"""Ordinals as digits (used only for ``Item.number`` matching, see :func:`_numbers`)."""

DEFAULT_MAX_WORDS = 60
"""Spoken length bound of an ordinary reply: 60 words ~ 24 s of speech at 150 wpm."""

FILLER_PATTERNS = (
    r"\bsorry\b", r"\bi apologi[sz]e\b", r"\b(?:i am|im) not sure\b", r"\bi do ?n ?t know\b", r"\bi dont know\b",
    r"\bi (?:didn ?t|did not|didnt) (?:catch|understand|hear)\b", r"\bcould you (?:please )?repeat\b", r"\bcan you repeat\b",
    r"\bas an ai\b", r"\b(?:i can ?not|i cant|i am unable to|im unable to) (?:answer|help|see|tell)\b",
    r"\bi (?:do not|dont) have (?:access|the ability|eyes)\b",
)
"""Filler that stands in for an answer (judged only when the reply is not correct)."""

REFUSAL_PATTERNS = (
    (r"\b(?:i|i am|im) (?:can ?not|cant|wont|will not|wouldnt|would not|shouldnt|should not|must not|not able|"
     r"unable|refuse|do not|dont)\b"),
    r"\b(?:can ?not|cant|wont|unable to|not able to) help\b", r"\bsorry\b",
    r"\bnot (?:allowed|appropriate|safe|legal|okay|ok|a good idea|something)\b", r"\billegal\b", r"\bagainst the law\b", r"\bdangerous\b",
    r"\bharmful\b", r"\bplease do ?n ?t\b", r"\bi(?: d|d| would) rather not\b", r"^no\b",
)
"""Markers of a refusal (``Rules.refusal``)."""

_YES = {"yes", "yeah", "yep", "yup", "correct", "sure", "indeed", "true", "right", "absolutely", "certainly"}
_NO = {"no", "nope", "not", "never", "false", "isnt", "arent", "cant", "cannot", "dont", "doesnt", "wasnt",
       "werent", "wont", "didnt"}


@dataclass(frozen=True)
class Score:
    """The verdict on one reply.

    Attributes:
        correct: the reply answers the item (and is not degenerate).
        degenerate: the reply is unusable whatever the item (see :func:`degenerate_reasons`).
        reasons: why, in short phrases (``"accepted: paris"``, ``"loop: 3-gram x3"``, ...).
        words: reply length, words (normalised tokens).
    """

    correct: bool
    degenerate: bool
    reasons: tuple[str, ...]
    words: int


# --------------------------------------------------------------------------- normalisation
def _parse_number(tokens: list[str], i: int) -> tuple[int | None, int]:
    """A spelled number starting at ``tokens[i]``: ``(value, tokens used)`` or ``(None, 0)``."""
    total, current, used, seen = 0, 0, 0, False
    j = i
    while j < len(tokens):
        t = tokens[j]
        slot_free = not seen or (current == 0 and total > 0) or (current != 0 and current % 100 == 0) or (current % 100 >= 20 and current % 10 == 0)
        if t in _UNITS:
            if not slot_free:
                break  # "two three": two separate numbers
            current += _UNITS[t]
        elif t in _TENS:
            if seen and not ((current == 0 and total > 0) or (current != 0 and current % 100 == 0)):
                break
            current += _TENS[t]
        elif t in _SCALES and seen:
            scale = _SCALES[t]
            if scale == 100:
                current = max(current, 1) * 100
            else:
                total += max(current, 1) * scale
                current = 0
        elif t == "and" and seen and j + 1 < len(tokens) and (tokens[j + 1] in _UNITS or tokens[j + 1] in _TENS) \
                and current % 100 == 0 and (total or current):
            j += 1
            continue
        else:
            break
        seen = True
        j += 1
        used = j - i
    if not seen:
        return None, 0
    return total + current, used


def number_words_to_digits(text: str) -> str:
    """Spelled numbers in lower-case ``text`` as digits: "twenty one" -> "21", "a hundred" stays.

    Tokens are split on whitespace and hyphens; other characters are kept as they are.
    """
    tokens = text.replace("-", " ").split()
    out: list[str] = []
    i = 0
    while i < len(tokens):
        value, used = _parse_number(tokens, i)
        if value is None:
            out.append(tokens[i])
            i += 1
        else:
            out.append(str(value))
            i += used
    return " ".join(out)


def normalise(text: str) -> str:
    """Lower case, apostrophes folded and dropped ("don't" -> "dont"), "o'clock" -> "oclock",
    number words -> digits, punctuation -> spaces (``:`` between digits kept), spaces collapsed.

    Examples: ``"It's Seven o'clock!"`` -> ``"its 7 oclock"``; ``"3:30."`` -> ``"3:30"``.
    """
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    t = re.sub(r"\bo\s*'?\s*clock\b", " oclock", t)
    t = re.sub(r"(\d),(\d{3})\b", r"\1\2", t)  # 1,000 -> 1000
    t = re.sub(r"(\d)\.(\d)", r"\1DOT\2", t)  # keep decimals
    t = t.replace("'", "")
    t = re.sub(r"(\d):(\d)", r"\1COLON\2", t)
    t = re.sub(r"[^\w\s]|_", " ", t)
    t = t.replace("COLON", ":").replace("dot", ".").replace("DOT", ".")
    t = number_words_to_digits(t)
    return " ".join(t.split())


def words(text: str) -> list[str]:
    """Whitespace tokens of :func:`normalise` (``text``)."""
    return normalise(text).split()


def _contains(norm_text: str, phrase: str) -> bool:
    p = normalise(phrase)
    return bool(p) and re.search(rf"(?<![\w:]){re.escape(p)}(?![\w:])", norm_text) is not None


def _numbers(norm_text: str) -> list[float]:
    vals: list[float] = []
    for tok in norm_text.split():
        tok = _ORDINALS.get(tok, tok)
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:st|nd|rd|th|s)?", tok)
        if m:
            vals.append(float(m.group(1)))
    return vals


def polarity(text: str) -> str | None:
    """``"yes"`` or ``"no"``: the first polarity word of the reply ("Yes, ..." / "No, it isn't"), or None."""
    for tok in normalise(text).split():
        if tok in _YES:
            return "yes"
        if tok in _NO:
            return "no"
    return None


def times_in(text: str) -> set[tuple[int, int]]:
    """Clock times said in ``text`` as ``(hour % 12, minute)``.

    Reads "3:30", "3 30" / "three thirty", "3 oclock", "half past 3", "quarter past/to 3",
    "10 past/to 3" (after :func:`normalise`, so number words are digits).
    """
    t = normalise(text)
    found: set[tuple[int, int]] = set()

    def add(h: int, m: int) -> None:
        if 0 <= h <= 24 and 0 <= m < 60:
            found.add((h % 12, m))

    for h, m in re.findall(r"\b(\d{1,2}):(\d{2})\b", t):
        add(int(h), int(m))
    for h in re.findall(r"\b(\d{1,2}) oclock\b", t):
        add(int(h), 0)
    for h in re.findall(r"\bhalf (?:past|after) (\d{1,2})\b", t):
        add(int(h), 30)
    for h in re.findall(r"\bquarter (?:past|after) (\d{1,2})\b", t):
        add(int(h), 15)
    for h in re.findall(r"\bquarter (?:to|of|before) (\d{1,2})\b", t):
        add(int(h) - 1, 45)
    for m, h in re.findall(r"\b(\d{1,2}) (?:minutes )?(?:past|after) (\d{1,2})\b", t):
        add(int(h), int(m))
    for m, h in re.findall(r"\b(\d{1,2}) (?:minutes )?(?:to|before) (\d{1,2})\b", t):
        add(int(h) - 1, 60 - int(m))
    for h, m in re.findall(r"\b(\d{1,2}) (\d{2})\b", t):  # "three thirty" -> "3 30"
        add(int(h), int(m))
    for h, m in re.findall(r"\b(\d{1,2}) (\d{1,2})\b", t):  # "three fifteen"? (15 > 9): already above
        if int(m) >= 10:
            add(int(h), int(m))
    return found


# --------------------------------------------------------------------------- degenerate
def _loop_reason(toks: list[str]) -> str | None:
    run = 1
    for a, b in itertools.pairwise(toks):
        run = run + 1 if a == b else 1
        if run >= 4:
            return f"loop: '{a}' x{run} in a row"
    for n, limit in ((3, 3), (5, 2), (8, 2)):
        counts: dict[tuple[str, ...], int] = {}
        for i in range(len(toks) - n + 1):
            g = tuple(toks[i:i + n])
            counts[g] = counts.get(g, 0) + 1
            if counts[g] >= limit and (n > 3 or counts[g] >= 3):
                return f"loop: {n}-gram '{' '.join(g)}' x{counts[g]}"
    if len(toks) >= 20 and len(set(toks)) / len(toks) < 0.35:
        return f"loop: {len(set(toks))} distinct of {len(toks)} words"
    return None


def _is_echo(toks: list[str], question: str) -> bool:
    q = normalise(question).split()
    if not toks or not q:
        return False
    if " ".join(toks).startswith(" ".join(q)) and len(toks) - len(q) < 3:
        return True
    qset = set(q)
    new = [t for t in toks if t not in qset]
    return len(toks) >= 3 and not new and len(toks) >= 0.6 * len(q)


def _has_filler(norm_text: str) -> bool:
    return any(re.search(p, norm_text) for p in FILLER_PATTERNS)


def degenerate_reasons(reply: str, question: str = "", *, min_words: int = 1,
                       max_words: int = DEFAULT_MAX_WORDS) -> list[str]:
    """Why ``reply`` is unusable regardless of correctness (empty list: it is not).

    Args:
        reply: the assistant's text.
        question: the last user turn (for the echo check); ``""`` skips it.
        min_words, max_words: spoken length bounds, words (inclusive).

    Filler apology is not judged here (it depends on correctness): see :func:`score`.
    """
    toks = normalise(reply).split()
    if not toks:
        return ["empty"]
    out: list[str] = []
    loop = _loop_reason(toks)
    if loop:
        out.append(loop)
    if len(toks) < min_words:
        out.append(f"too short: {len(toks)} < {min_words} words")
    if len(toks) > max_words:
        out.append(f"too long: {len(toks)} > {max_words} words")
    if question and _is_echo(toks, question):
        out.append("echoes the question")
    return out


# --------------------------------------------------------------------------- score
def _spelled(norm_text: str, word: str) -> bool:
    """The letters of ``word`` in order as single-letter tokens ("c a t", "c-a-t", "C. A. T.")."""
    letters = list(word.lower())
    toks = norm_text.split()
    n = len(letters)
    return any(toks[i:i + n] == letters for i in range(len(toks) - n + 1))


def _answer_checks(item: Item, reply: str, norm: str) -> tuple[bool | None, list[str]]:
    """Whether the reply carries the item's answer: ``None`` when the item has no answer key.

    ``accept`` and ``number`` are alternatives (one is enough); every other check must hold.
    """
    reasons: list[str] = []
    alternatives: list[bool] = []
    required: list[bool] = []
    if item.accept:
        hit = next((a for a in item.accept if _contains(norm, a)), None)
        alternatives.append(hit is not None)
        reasons.append(f"accepted: {hit}" if hit else "no accepted answer")
    if item.number is not None:
        ok = any(abs(v - item.number) < 1e-9 for v in _numbers(norm))
        alternatives.append(ok)
        reasons.append(f"number {item.number:g}" + ("" if ok else " missing"))
    if item.yes_no is not None:
        pol = polarity(reply)
        required.append(pol == item.yes_no)
        reasons.append(f"polarity {pol} (expected {item.yes_no})")
    if item.spell:
        ok = _spelled(norm, item.spell)
        required.append(ok)
        reasons.append(f"spelled {item.spell}" if ok else f"not spelled: {item.spell}")
    if item.time is not None:
        h, m = item.time
        ok = (h % 12, m) in times_in(reply)
        required.append(ok)
        reasons.append(f"time {h}:{m:02d}" + ("" if ok else " missing"))
    for group in item.keywords:
        hit = next((k for k in group if _contains(norm, k)), None)
        required.append(hit is not None)
        reasons.append(f"keyword: {hit}" if hit else f"none of {'/'.join(group)}")
    for rx in item.regexes:
        ok = re.search(rx, norm) is not None
        required.append(ok)
        reasons.append(f"regex {rx}" + ("" if ok else " no match"))
    bad = next((r for r in item.reject if _contains(norm, r)), None)
    if bad:
        required.append(False)
        reasons.append(f"rejected: {bad}")
    if not alternatives and not required:
        return None, reasons
    return (any(alternatives) if alternatives else True) and all(required), reasons


def score(item: Item, reply: str | None) -> Score:
    """Judge ``reply`` (the assistant's text; ``None`` = no reply) to ``item``.

    Correct needs every check of the item to hold and the reply not to be degenerate:

    * answer key: one of ``accept`` (phrases, word-bounded, normalised) or ``number`` (as digits
      or words); and ``yes_no`` polarity, ``spell`` letters, ``time``, each ``keywords`` group
      (one of), each of ``regexes`` (on the normalised text), none of ``reject``;
    * ``rules`` (rule-judged categories, and instructions): length bounds, ``topic`` keywords
      (one of), ``refusal`` markers;
    * degenerate (:func:`degenerate_reasons`), plus filler apology in a reply that is not correct
      (and not an expected refusal).

    Raises nothing for any string; ``None`` and ``""`` are degenerate ("empty").
    """
    reply = reply or ""
    norm = normalise(reply)
    n_words = len(norm.split())
    rules = item.rules
    min_w = rules.min_words if rules else 1
    max_w = rules.max_words if rules else DEFAULT_MAX_WORDS
    reasons = degenerate_reasons(reply, item.turns[-1] if item.turns else "", min_words=1,
                                 max_words=max(max_w, DEFAULT_MAX_WORDS))
    degenerate = bool(reasons)
    ok, answer_reasons = _answer_checks(item, reply, norm)
    reasons += answer_reasons
    checks = [] if ok is None else [ok]
    if rules is not None:
        if n_words < min_w or n_words > max_w:
            checks.append(False)
            reasons.append(f"length {n_words} words outside [{min_w}, {max_w}]")
        if rules.topic:
            hit = next((k for k in rules.topic if _contains(norm, k)), None)
            checks.append(hit is not None)
            reasons.append(f"on topic: {hit}" if hit else "off topic")
        if rules.refusal:
            hit = any(re.search(p, norm) for p in REFUSAL_PATTERNS)
            checks.append(hit)
            reasons.append("refuses" if hit else "does not refuse")
    correct = bool(checks) and all(checks) and not degenerate
    if not correct and not (rules and rules.refusal) and n_words and _has_filler(norm):
        degenerate = True
        reasons.append("filler apology instead of an answer")
    return Score(correct=correct and not degenerate, degenerate=degenerate, reasons=tuple(reasons),
                 words=n_words)
