"""``tiny`` Thinker tools: exact notes that the 270M base LM reads before it answers.

Gemma 3 270M (base) writes fluent sentences but gets sums, spellings and follow-ups wrong
("Seven plus five is 14.", "How do you spell cat?" -> "I am a cat.", "And what about Spain?" ->
"Spain has 100 million people.") and does not refuse harmful requests. Where a short rule can
give the exact content, these tools compute it and the prompt carries it as a bracketed note
(:func:`notes_for`), the way the camera's description is carried; the LM still writes the reply.

* :func:`calculate`: one binary operation (or ``half of`` / ``double`` / ``squared`` / ``square
  root of``) on two numbers, spoken or written ("what is seven plus five", "12 x 3"); number words
  become digits with ``text2num`` (MIT, Allo-Media).
* :func:`spelling`: "how do you spell X" / "spell X" -> the letters of X.
* :func:`expand_follow_up`: "And what about Spain?" after "What is the capital of France?" ->
  "What is the capital of Spain?" (the earlier question with its last topic word replaced).
* :func:`recall`: "What is my name?" after "My name is Anna." -> "Your name is Anna." (what the
  user said of themselves, word for word, not left to the LM, which answered "My name is Arthur.").
* :func:`is_harmful_request`: a request to hurt, steal, break in, make weapons or get into
  someone else's accounts, answered with :data:`DECLINE_REPLY` instead of the LM.

All are pure functions of the text (no model); they return ``None`` / ``False`` when a rule does
not apply, never raise on any ``str`` input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from app.backend.pipeline.stages import ThinkerPrompt, Turn

_BINARY: Final[tuple[tuple[str, str], ...]] = (
    (r"plus|\+|added to|and", "+"),
    (r"minus|-|take away|less", "-"),
    (r"times|x|\*|×|multiplied by", "*"),
    (r"divided by|/|÷|over", "/"),
)
"""Spoken operator words -> operator, tried in this order."""

_NUM: Final[str] = r"-?\d+(?:\.\d+)?"
_OPS_RE: Final[re.Pattern[str]] = re.compile(
    rf"(?P<a>{_NUM})\s*(?P<op>{'|'.join(w for w, _ in _BINARY)})\s*(?P<b>{_NUM})(?![\d.])"
)
_VERB_RE: Final[re.Pattern[str]] = re.compile(
    rf"\b(?P<verb>add|subtract|multiply|divide)\s+(?P<a>{_NUM})\s+(?:and|by|from|to|with)\s+(?P<b>{_NUM})"
)
_UNARY_RE: Final[re.Pattern[str]] = re.compile(
    rf"\b(?:(?P<half>half of)|(?P<double>double|twice)|(?P<root>square root of))\s+(?P<a>{_NUM})"
    rf"|(?P<b>{_NUM})\s+(?P<squared>squared)"
)
_ASKS_NUMBER: Final[re.Pattern[str]] = re.compile(
    r"\b(what(?:'s| is| are| does)?|how much|how many|calculate|compute|work out|tell me|equals?|"
    r"add|subtract|multiply|divide|half|double|twice|square)\b"
)


@dataclass(frozen=True)
class Calculation:
    """An arithmetic question and its exact result.

    Attributes:
        expression: the operation in words, e.g. ``"7 plus 5"``.
        result: the result as spoken digits, e.g. ``"12"``, ``"2.5"`` (at most 4 decimals),
            ``"undefined"`` for a division by zero.
    """

    expression: str
    result: str

    def note(self) -> str:
        """The prompt line, e.g. ``"[Calculator: 7 plus 5 is 12]"``."""
        return f"[Calculator: {self.expression} is {self.result}]"


_OP_WORD: Final[dict[str, str]] = {"+": "plus", "-": "minus", "*": "times", "/": "divided by"}


def _digits(text: str) -> str:
    """``text`` lower-cased with number words as digits ("seven plus five" -> "7 plus 5")."""
    from text_to_num import alpha2digit

    lowered = text.lower().replace(",", " ")
    try:
        return alpha2digit(lowered, "en", threshold=0)
    except Exception:  # noqa: BLE001 - a parser failure means no arithmetic, never an error
        return lowered


def _fmt(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.4f}".rstrip("0").rstrip(".")


def _num(text: str) -> Fraction:
    return Fraction(text)


def calculate(text: str) -> Calculation | None:
    """The arithmetic a question asks for, computed exactly.

    Args:
        text: the user's turn (an ASR transcript or typed text), any case, numbers as words or digits.

    Returns:
        The :class:`Calculation`, or ``None`` when the text asks for no arithmetic (no question
        word such as "what is" / "how much", or not two numbers joined by an operator).
    """
    t = _digits(text)
    if not _ASKS_NUMBER.search(t):
        return None
    if m := _VERB_RE.search(t):
        a, b = _num(m["a"]), _num(m["b"])
        verb = m["verb"]
        if verb == "subtract":  # "subtract 3 from 10" = 10 - 3
            a, b = b, a
        op = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}[verb]
        return _binary(a, op, b)
    if m := _UNARY_RE.search(t):
        if m["squared"]:
            b = _num(m["b"])
            return Calculation(f"{_fmt(b)} squared", _fmt(b * b))
        a = _num(m["a"])
        if m["half"]:
            return Calculation(f"half of {_fmt(a)}", _fmt(a / 2))
        if m["double"]:
            return Calculation(f"double {_fmt(a)}", _fmt(a * 2))
        if a < 0:
            return None
        root = math.sqrt(float(a))
        result = Fraction(round(root)) if round(root) ** 2 == a else Fraction(root).limit_denominator(10_000)
        return Calculation(f"the square root of {_fmt(a)}", _fmt(result))
    if m := _OPS_RE.search(t):
        op = next(sym for words, sym in _BINARY if re.fullmatch(words, m["op"]))
        if op == "+" and m["op"] == "and" and not re.search(r"\b(add|sum|total|together)\b", t):
            return None  # "3 apples and 2 pears" is no sum unless one is asked for
        return _binary(_num(m["a"]), op, _num(m["b"]))
    return None


def _binary(a: Fraction, op: str, b: Fraction) -> Calculation:
    expression = f"{_fmt(a)} {_OP_WORD[op]} {_fmt(b)}"
    if op == "/" and b == 0:
        return Calculation(expression, "undefined")
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op]
    return Calculation(expression, _fmt(value))


_SPELL_RE: Final[re.Pattern[str]] = re.compile(
    r"\b(?:how (?:do|would|can) (?:you|i|we) spell|spell(?: out)?(?: the word)?|what is the spelling of|"
    r"what's the spelling of)\s+(?:the word\s+)?[\"'\u201c]?(?P<word>[A-Za-z][A-Za-z'-]*)"
)


def spelling(text: str) -> str | None:
    """The letters of the word a spelling question names.

    Args:
        text: the user's turn.

    Returns:
        The word's letters, upper-case and hyphen-joined (``"C-A-T"``), or ``None``.
    """
    m = _SPELL_RE.search(text.lower())
    if not m:
        return None
    word = m["word"].strip("'-")
    if word in {"it", "that", "this"} or not word:
        return None
    return "-".join(ch.upper() for ch in word if ch.isalpha())


_FOLLOW_UP_RE: Final[re.Pattern[str]] = re.compile(
    r"^(?:and|so|ok(?:ay)?|then)?[\s,]*(?:what|how) about\s+(?P<x>.+?)[\s?.!]*$"
    r"|^and\s+(?:for\s+|in\s+)?(?P<y>(?:an?\s+|the\s+)?[\w' -]+?)[\s?.!]*$",
    re.IGNORECASE,
)
_STOP_TOPIC: Final[frozenset[str]] = frozenset((
    "what", "is", "are", "was", "were", "how", "many", "much", "does", "do", "did", "the", "a",
    "an", "of", "in", "on", "at", "to", "for", "and", "or", "it", "this", "that", "there", "their",
    "his", "her", "its", "my", "your", "you", "i", "me", "we", "they", "he", "she", "who", "which",
    "where", "when", "why", "can", "could", "would", "should", "will", "have", "has", "had", "be",
    "been", "being", "with", "from", "by", "as", "than", "then", "so", "very",
))


def expand_follow_up(text: str, history: Sequence[Turn]) -> str | None:
    """A short follow-up turned into the full question it stands for.

    "And what about Spain?" after "What is the capital of France?" -> "What is the capital of
    Spain?"; "And a bird?" after "How many legs does a dog have?" -> "How many legs does a bird
    have?". The earlier question's last topic word (a word that is no question or function word;
    a capitalised one first when the new topic is capitalised) is replaced by the new topic.

    Args:
        text: the user's turn.
        history: the conversation so far, oldest first (the last user turn is used).

    Returns:
        The full question, or ``None`` when ``text`` is no such follow-up or there is no earlier
        user question.
    """
    m = _FOLLOW_UP_RE.match(text.strip())
    if not m:
        return None
    topic = (m["x"] or m["y"] or "").strip()
    topic = re.sub(r"^(?:an?|the)\s+", "", topic, flags=re.IGNORECASE)
    if not topic or len(topic.split()) > 4:
        return None
    previous = next((t.text for t in reversed(history) if t.role == "user" and t.text.strip()), None)
    if previous is None:
        return None
    words = re.findall(r"[A-Za-z][\w'-]*|\S", previous)
    candidates = [i for i, w in enumerate(words) if w[0].isalpha() and w.lower() not in _STOP_TOPIC]
    if not candidates:
        return None
    # a name replaces a name ("France" -> "Spain"), a common noun a common noun ("dog" -> "bird")
    same_kind = [i for i in candidates if i > 0 and words[i][0].isupper() == topic[0].isupper()]
    if not same_kind:
        return None
    candidates = same_kind
    i = candidates[-1]
    words[i] = topic
    out = ""
    for w in words:
        out += w if (not out or not w[0].isalnum() and w not in "([\"'") else " " + w
    return out


def _key(words: str) -> str:
    """A personal-fact key, spelling-normalised ("favorite color" -> "favourite colour")."""
    words = re.sub(r"\s+", " ", words.strip().lower())
    return words.replace("favorite", "favourite").replace("color", "colour")


_TOLD_RE: Final[re.Pattern[str]] = re.compile(
    r"\bmy (?P<key>(?:favou?rite |best friend'?s |dog'?s |cat'?s )?[a-z]+) is (?P<value>[^.,!?;]{1,40})",
    re.IGNORECASE)
_ASKED_RE: Final[re.Pattern[str]] = re.compile(
    r"^\s*(?:and |so |now |do you remember |can you tell me )?(?:what(?:'s| is)) my "
    r"(?P<key>(?:favou?rite |best friend'?s |dog'?s |cat'?s )?[a-z]+)\s*[?.!]*\s*$", re.IGNORECASE)


def recall(text: str, history: Sequence[Turn]) -> str | None:
    """The answer to "what is my X?" from what the user said earlier ("my X is Y").

    Args:
        text: the user's turn ("What is my name?", "What's my favorite color?").
        history: the conversation so far, oldest first; the latest user turn that says
            "my X is Y" for the same X (colour/color, favourite/favorite alike) is used.

    Returns:
        ``"Your name is Anna."``, or ``None`` when ``text`` asks no such question or the user never
        said it.
    """
    asked = _ASKED_RE.match(text)
    if not asked:
        return None
    key = _key(asked["key"])
    for turn in reversed(history):
        if turn.role != "user":
            continue
        for told in reversed(list(_TOLD_RE.finditer(turn.text))):
            if _key(told["key"]) == key:
                return f"Your {asked['key'].strip().lower()} is {told['value'].strip()}."
    return None


_HARM_RE: Final[re.Pattern[str]] = re.compile(
    r"\b(?:steal|shoplift|rob|burgle|break into|hack into|hack (?:someone|my|his|her|their)|"
    r"pick a lock|hot-?wire|make (?:a |some )?(?:bomb|explosive|weapon|poison|gun|meth|drugs)|"
    r"build (?:a )?(?:bomb|weapon|gun)|poison (?:someone|my|his|her|a person|people)|"
    r"poison .{0,30}(?:someone|somebody|a person)(?:'s)? (?:drink|food|coffee|tea)|"
    r"(?:write|make|create|code|build) (?:me )?(?:a |an |some )?(?:computer )?(?:virus|malware|ransomware|worm)|"
    r"(?:hurt|harm|kill|attack|injure|stab|shoot) (?:someone|somebody|people|a person|my|him|her|them)|"
    r"(?:someone|somebody|other people)(?:'s| else's) (?:password|account|credit card|bank)|"
    r"(?:get|steal|find out|guess) (?:someone|somebody|his|her|their)(?:'s)? password|"
    r"cheat on (?:a|an|the|my) (?:test|exam)|counterfeit|fake (?:an? )?(?:id|passport|money))\b",
    re.IGNORECASE,
)


def is_harmful_request(text: str) -> bool:
    """Whether the turn asks for help to hurt someone, steal, break in, make weapons or drugs,
    or get into someone else's accounts (a keyword rule; it errs on the side of answering)."""
    return bool(_HARM_RE.search(text))


DECLINE_REPLY: Final[str] = "Sorry, I can't help with that."
"""The whole reply to a harmful request (the 270M base LM, given a note asking it to decline, still
wrote "You can make a bomb."; so the Thinker does not ask it)."""


_NEIGHBOUR_RE: Final[re.Pattern[str]] = re.compile(
    r"\bwhat (?:number )?(?:comes |is )?(?P<side>after|before) (?P<n>-?\d+)\b", re.IGNORECASE)
_COUNT_RE: Final[re.Pattern[str]] = re.compile(
    r"\bcount (?:from (?P<a>\d+) )?(?:up )?to (?P<b>\d+)\b", re.IGNORECASE)
_LETTERS_RE: Final[re.Pattern[str]] = re.compile(
    r"\bhow many letters (?:are |does )?(?:there )?(?:in )?(?:the word )?(?P<word>[a-z]+)\b", re.IGNORECASE)
_TERSE_RE: Final[re.Pattern[str]] = re.compile(
    r"\b(?:one word|a single word|just the number|only the number|number only|just a number)\b", re.IGNORECASE)
MAX_COUNT: Final[int] = 20
"""Longest count said out loud ("count to 20"); a longer one is left to the LM."""


def direct_reply(text: str) -> str | None:
    """A reply written without the LM, for turns a tool answers exactly.

    Gemma 270M copies the tools' notes with mistakes ("3 plus 10 is 9." under "[Calculator: 3 plus
    10 is 13]", "E-N-C-Y-L-O-P-E-D-I-A" for encyclopedia; dev split of ``benchmarks/answers_items.py``)
    and wrote "You can make a bomb." under a note asking it to decline, so these are not left to it.

    Args:
        text: the user's turn (digits or number words).

    Returns:
        :data:`DECLINE_REPLY` for a harmful request; ``"3 plus 10 is 13."`` for arithmetic
        (:func:`calculate`; just ``"13."`` when the turn asks for one word or the number only);
        ``"6 comes after 5."``; ``"1, 2, 3, 4, 5."`` for "count to 5" (up to :data:`MAX_COUNT`);
        ``"Cat has 3 letters."``; ``"Cat is spelled C, A, T."`` (:func:`spelling`); otherwise
        ``None`` (the LM writes the reply).
    """
    if is_harmful_request(text):
        return DECLINE_REPLY
    terse = bool(_TERSE_RE.search(text))
    if calc := calculate(text):
        return f"{calc.result}." if terse else f"{calc.expression} is {calc.result}."
    t = _digits(text)
    if m := _NEIGHBOUR_RE.search(t):
        n = int(m["n"])
        k = n + 1 if m["side"] == "after" else n - 1
        return f"{k}." if terse else f"{k} comes {m['side']} {n}."
    if (m := _COUNT_RE.search(t)) and 0 <= int(m["b"]) - int(m["a"] or 1) < MAX_COUNT:
        return ", ".join(str(i) for i in range(int(m["a"] or 1), int(m["b"]) + 1)) + "."
    if m := _LETTERS_RE.search(t):
        word = m["word"]
        return f"{len(word)}." if terse else f"{word.capitalize()} has {len(word)} letters."
    letters = spelling(text)
    if letters:
        return f"{letters.replace('-', '').capitalize()} is spelled {', '.join(letters.split('-'))}."
    return None


def notes_for(prompt: ThinkerPrompt) -> list[str]:
    """The tool notes for the current user turn, in prompt order.

    Args:
        prompt: the Thinker prompt (``user_text`` and ``history`` are read).

    Returns:
        Bracketed lines (``[Calculator: ...]``, ``[Spelling: ...]``), possibly none. A follow-up is
        not a note (see :func:`expand_follow_up`), nor a harmful request (:data:`DECLINE_REPLY`).
    """
    text = prompt.user_text
    if not text.strip():
        return []
    notes = []
    if calc := calculate(text):
        notes.append(calc.note())
    if letters := spelling(text):
        notes.append(f"[Spelling: {letters}]")
    return notes
