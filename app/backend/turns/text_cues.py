"""What the words of an utterance say about whether the turn is over (English).

A learned acoustic end-of-turn model is fooled by synthetic and flat speech, and by fragments that
happen to fall on a sentence-like prosody ("Can you remind me to ..."). The transcript of the
utterance so far (the Thinker transcribes it for the speculative reply anyway) carries a cue that
is hard to fake: an utterance that ends on a function word ("to", "the", "is", "could", "and") or
on a trailing comma / dash / ellipsis is not finished. A transcript that ends a sentence (``.``,
``?``, ``!``) with a content word is evidence for the end.
"""

from __future__ import annotations

import re
from typing import Final

DANGLING_WORDS: Final[frozenset[str]] = frozenset(["a", "an", "the", "to", "of", "in", "on", "at", "for", "with", "from", "by", "about", "into", "onto", "over", "under", "than", "as", "like", "and", "or", "but", "so", "because", "if", "that", "whether", "while", "until", "unless", "although", "though", "nor", "is", "are", "was", "were", "am", "be", "been", "being", "do", "does", "did", "have", "has", "had", "can", "could", "will", "would", "shall", "should", "may", "might", "must", "my", "your", "his", "her", "our", "their", "its", "this", "these", "those", "some", "any", "every", "each", "no", "very", "really", "just", "quite", "rather", "more", "most", "less", "um", "uh", "er", "erm", "hmm"])
"""Words after which an English utterance is almost never finished (articles, prepositions,
conjunctions, auxiliaries, determiners, intensifiers, fillers)."""

STRANDED_PREPOSITIONS: Final[frozenset[str]] = frozenset(["to", "of", "in", "on", "at", "for", "with", "from", "by",
                                                        "about", "into", "onto", "over", "under", "like"])
"""The dangling words English questions end on often, left stranded by the question word: "Where are
you from?", "What is the weather like?", "Who did you go with?". (Not auxiliaries: "What is?" is a
fragment far more often than a question; on the turn-taking test split, letting the text model judge
them ended "What is, uh, the name of ..." at its first pause.)"""

_WORD = re.compile(r"[A-Za-z']+")


def last_word(text: str) -> str | None:
    """The last word of ``text``, lower case (None when it has none)."""
    words = _WORD.findall(text)
    return words[-1].lower() if words else None


def unfinished(text: str) -> bool:
    """Whether ``text`` trails off: a function word last, or a trailing comma, dash or ellipsis."""
    t = text.strip()
    if not t:
        return False
    if t.endswith((",", "-", "...", "\u2026", ";", ":")):
        return True
    word = last_word(t)
    return word is not None and word in DANGLING_WORDS


def ends_on_stranded_preposition(text: str) -> bool:
    """Whether ``text`` closes a sentence (``.``, ``?``, ``!``) on a preposition a question leaves
    stranded ("Where are you from?": :data:`STRANDED_PREPOSITIONS`).
    Such a transcript is not :func:`unfinished` by its words alone: a language model that reads it
    can tell "Where are you from?" (finished) from "Can you remind me to?" (Whisper's question mark
    on a fragment)."""
    t = text.strip()
    return _closes_sentence(t) and last_word(t) in STRANDED_PREPOSITIONS


def ends_sentence(text: str) -> bool:
    """Whether ``text`` ends a sentence (``.``, ``?``, ``!``) on a content word."""
    t = text.strip()
    return _closes_sentence(t) and not unfinished(t.rstrip(".?!"))


def _closes_sentence(t: str) -> bool:
    """Whether stripped ``t`` ends with ``.``, ``?`` or ``!`` (an ellipsis does not)."""
    return t.endswith((".", "?", "!")) and not t.endswith("...")


BACKCHANNEL_WORDS: Final[frozenset[str]] = frozenset([
    "mm", "mmm", "hm", "hmm", "mhm", "mm-hm", "mm-hmm", "uh-huh", "uhuh", "uh", "huh", "um", "ah", "oh", "ooh", "wow",
    "yeah", "yes", "yep", "yup", "ya", "okay", "ok", "right", "sure", "alright", "cool", "nice", "great", "good",
    "true", "exactly", "indeed", "totally", "absolutely", "interesting", "really"])
"""Words a listener says to show they follow, not to take the turn (English listener responses;
Whisper writes "mm-hm" as "Mm-hmm", "Mhm" or "Hmm", and "uh-huh" also as "Uhuh")."""

BACKCHANNEL_PHRASES: Final[tuple[str, ...]] = ("i see", "got it", "all right", "of course", "that's right",
                                                "makes sense", "i know", "go on")
"""Listener responses of more than one word."""

_HYPHENATED_WORD = re.compile(r"[A-Za-z']+(?:-[A-Za-z']+)*")

_HUM = re.compile(r"^(?:m{2,}|mh+m+|hm+|uh|ah)(?:-[a-z]+)?$")
"""A hum, as Whisper spells it, and its misspellings that begin with one ("mm-hmm", "mm-tham", "mhmm")."""

BACKCHANNEL_MAX_WORDS: Final[int] = 4
"""A longer utterance is not a backchannel, whatever its words."""


def backchannel(text: str) -> bool:
    """Whether ``text`` (a transcript of words said over the assistant's reply) is only a listener
    response ("mm-hm", "yeah, right", "I see"), so the reply goes on; anything else takes the turn.

    ``""`` and wordless text are not backchannels (they are not words at all; callers drop them).
    """
    if not backchannel_length(text):
        return False
    t = " ".join(w.lower() for w in _HYPHENATED_WORD.findall(text))
    for phrase in BACKCHANNEL_PHRASES:
        t = re.sub(rf"\b{re.escape(phrase)}\b", " ", t)
    return all(w in BACKCHANNEL_WORDS or _HUM.match(w) for w in t.split())


def backchannel_length(text: str) -> bool:
    """Whether ``text`` has words, and no more than a listener response has
    (:data:`BACKCHANNEL_MAX_WORDS`): a read of it that is not one may still be a misread one."""
    return 0 < len(_HYPHENATED_WORD.findall(text)) <= BACKCHANNEL_MAX_WORDS


STOP_WORDS: Final[frozenset[str]] = frozenset(["stop", "wait", "hold", "enough", "pause", "quiet"])
"""Words that ask the speaker to stop ("wait, stop", "hold on", "that's enough"): said over a
reply, they take the turn however short the words are."""


def asks_to_stop(text: str) -> bool:
    """Whether ``text`` (words said over the assistant's reply) has a word of :data:`STOP_WORDS`:
    then one read of it stops the reply, with no second read to confirm it (a misread listener
    response is junk, "The air-dower", "EF-O-T", not a request to stop)."""
    return any(w.lower() in STOP_WORDS for w in _WORD.findall(text))


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one inserted, deleted or replaced letter."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    return a[i + (len(a) == len(b)):] == b[i + 1:]


def may_be_backchannel(text: str) -> bool:
    """Whether ``text``, the words of an utterance read before it is over, may be a listener
    response whose last word is cut short (read mid-word, Whisper guesses it): one word one letter
    away from one of :data:`BACKCHANNEL_WORDS` of three letters or more ("Yet" for "Yeah" read
    350 ms into it), or a listener response and one word more ("Yeah, vote." for "Yeah, okay").
    Such a read decides nothing: the words are read again as they go on, and when they end."""
    words = [w.lower() for w in _HYPHENATED_WORD.findall(text)]
    if len(words) == 1:
        return any(len(w) >= 3 and _one_edit_apart(words[0], w) for w in BACKCHANNEL_WORDS)
    return len(words) > 1 and backchannel(" ".join(words[:-1]))


INTERJECTIONS: Final[frozenset[str]] = frozenset([
    "oh", "ohh", "ah", "ahh", "aah", "ooh", "uh", "um", "umm", "er", "erm", "hm", "hmm", "hmmm", "mm", "mmm"])
"""Sounds that are no request when said alone: surprise ("oh"), thinking ("hmm", "um"). Not "huh"
or "eh" (they ask to hear it again), nor "mm-hm" / "uh-huh" (they can mean yes). Whisper also
writes a tone melody or a door's squeak as "Oh"."""


def _interjection(word: str) -> bool:
    """An interjection, or one stuttered ("th-um", "h-hmm": one or two letters that are not a sound of
    their own, then a hyphen; Whisper wrote "Hmm, um" as "Th-um." in a trial). "Mm-hmm" is no
    stutter: it can mean yes."""
    if word in INTERJECTIONS:
        return True
    *starts, last = word.split("-")
    return bool(starts) and last in INTERJECTIONS and all(len(s) <= 2 and s not in INTERJECTIONS for s in starts)


def only_interjection(text: str) -> bool:
    """Whether ``text`` is nothing but interjections ("Oh.", "Hmm, um", "Th-um."): a sound, not a
    turn to answer."""
    words = [w.lower() for w in _HYPHENATED_WORD.findall(text)]
    return bool(words) and all(_interjection(w) for w in words)


ECHO_WORD_SHARE: Final[float] = 0.6
"""An overlap whose content words are at least this share words the assistant has just said is
taken for its own voice coming back through the microphone."""


def echoes(text: str, said: str) -> bool:
    """Whether ``text`` (heard over the assistant's reply) is mostly the assistant's own words
    ``said`` (its reply's transcript so far): its voice leaking back into the microphone past the
    echo gate, which must not end the reply.

    ``""`` or wordless ``text`` does not echo anything.
    """
    words = [w.lower() for w in _WORD.findall(text)]
    heard = [w for w in words if w not in DANGLING_WORDS] or words  # content words decide ("the", "is" do not)
    if not heard:
        return False
    own = {w.lower() for w in _WORD.findall(said)}
    return sum(w in own for w in heard) >= ECHO_WORD_SHARE * len(heard)
