"""The one exception the deploy-config loader raises, and how pydantic errors become its lines."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError


class ConfigError(ValueError):
    """A deploy config (YAML file, ``base_config`` chain or ``--stage-overrides``) is invalid.

    The message names the source and, for every problem, the field path in the merged document,
    e.g. ``configs/x.yaml: stages[1].max_num_seqs: Input should be greater than 0 (got 0)``.

    Attributes:
        source: the file (or ``"--stage-overrides"``) the problem was found in; ``None`` when the
            config was built from Python objects.
        problems: one ``"<field path>: <message>"`` line per problem (at least one).
    """

    def __init__(self, problems: str | Sequence[str], *, source: str | Path | None = None) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        self.source: str | None = None if source is None else str(source)
        prefix = f"{self.source}: " if self.source else ""
        if len(self.problems) == 1:
            message = prefix + self.problems[0]
        else:
            body = "\n".join(f"  {line}" for line in self.problems)
            message = f"{prefix}{len(self.problems)} problems:\n{body}"
        super().__init__(message)


def format_loc(loc: Iterable[int | str]) -> str:
    """Render a pydantic error location as a field path: ``("stages", 1, "x")`` -> ``stages[1].x``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_problems(exc: ValidationError, known_keys: Iterable[str] = ()) -> list[str]:
    """Turn a pydantic ``ValidationError`` into ``"<field path>: <message>"`` lines.

    Args:
        exc: the error raised by ``model_validate``.
        known_keys: field names offered as "did you mean" hints for unknown keys.

    Returns:
        One line per pydantic error, in pydantic's order.
    """
    keys = sorted(set(known_keys))
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc = format_loc(err.get("loc", ()))
        msg = str(err.get("msg", "invalid value"))
        kind = err.get("type", "")
        msg = msg.removeprefix("Value error, ")
        if kind == "extra_forbidden":
            last = err["loc"][-1] if err.get("loc") else ""
            msg = "unknown key (Extra inputs are not permitted)"
            hint = difflib.get_close_matches(str(last), keys, n=1, cutoff=0.75)
            if hint:
                msg += f"; did you mean {hint[0]!r}?"
        elif kind not in ("value_error", "assertion_error", "missing") and "input" in err:
            msg += f" (got {_short(err['input'])})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines
