"""JSON from clients whose every string is real Unicode text (no lone UTF-16 surrogate).

JSON may spell a surrogate code point with an escape (``"\\ud800"``), and :func:`json.loads` keeps a
lone one as it is. Such a string cannot be encoded as UTF-8: a prompt holding one failed inside the
Thinker's tokenizer (HTTP 500), and instructions holding one broke the realtime socket's writer when
``session.updated`` echoed them (the session went silent). :func:`loads_text` refuses them where they
come in, naming the field.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

_SURROGATE_ESCAPE: Final[re.Pattern[str]] = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A ``\\uD800``..``\\uDFFF`` escape: without one in the raw text no decoded string can hold a surrogate."""

_SURROGATE_ESCAPE_BYTES: Final[re.Pattern[bytes]] = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""The same, in a UTF-8 document's bytes."""

_SURROGATE: Final[re.Pattern[str]] = re.compile("[\ud800-\udfff]")
"""A surrogate code point in a decoded string (a valid escaped pair decodes to one astral character)."""


class LoneSurrogateError(ValueError):
    """A JSON string holds a lone UTF-16 surrogate.

    Attributes:
        path: where, as ``messages[0].content`` (``""``: the top-level value itself); a surrogate
            in a key is written as its ``\\udfff`` escape.
    """

    def __init__(self, path: str) -> None:
        self.path = path.encode("utf-8", "backslashreplace").decode("utf-8")  # (a key may hold the surrogate)
        where = f" at {self.path}" if self.path else ""
        super().__init__(f"a string{where} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape): "
                         "text must be valid Unicode")


def loads_text(raw: str | bytes) -> Any:
    """:func:`json.loads`, refusing any string (key or value) with a lone UTF-16 surrogate.

    Args:
        raw: the JSON document (bytes are decoded as UTF-8, as :func:`json.loads` does).

    Returns:
        The decoded value.

    Raises:
        LoneSurrogateError: a string holds a lone surrogate (checked only when the raw text has a
            surrogate escape at all, so the usual document costs one regex scan).
        json.JSONDecodeError, UnicodeDecodeError: not JSON.
        RecursionError: nested too deeply for the parser.
    """
    obj = json.loads(raw)
    if isinstance(raw, str):
        maybe = _SURROGATE_ESCAPE.search(raw) is not None
    else:  # (json.loads also takes UTF-16/32 bytes, whose escapes the UTF-8 pattern cannot see)
        maybe = b"\x00" in raw[:4] or _SURROGATE_ESCAPE_BYTES.search(raw) is not None
    if maybe:
        path = _first_surrogate(obj, "")
        if path is not None:
            raise LoneSurrogateError(path)
    return obj


def _first_surrogate(value: Any, path: str) -> str | None:
    """Path of the first string under ``value`` holding a surrogate, or None (iterative: no depth limit)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return p
        elif isinstance(v, dict):
            for k, item in reversed(list(v.items())):
                sub = f"{p}.{k}" if p else str(k)
                if _SURROGATE.search(k):
                    return sub
                stack.append((item, sub))
        elif isinstance(v, list):
            stack.extend((item, f"{p}[{i}]") for i, item in reversed(list(enumerate(v))))
    return None
