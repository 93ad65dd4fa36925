"""What the page shows about one conversation: captions, metrics, status; rendered as HTML.

The handler updates a :class:`ConversationView`; the page receives a snapshot through
FastRTC's ``AdditionalOutputs`` (and ``GET /webrtc/state/{webrtc_id}``) and renders it with
:func:`render_captions`, :func:`render_metrics` and :func:`render_status`. Every element the
e2e tests read carries a ``data-testid``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

MAX_CAPTION_LINES = 14
"""Caption lines kept (oldest dropped first)."""


@dataclass
class CaptionLine:
    """One caption line: ``role`` is ``user`` or ``assistant``; ``key`` the item/response id."""

    role: str
    key: str
    text: str = ""
    interrupted: bool = False


@dataclass
class ConversationView:
    """Mutable view state of one conversation (owned by its handler)."""

    status: str = "Press the button to start talking."
    level: str = "info"  # info | ok | warn | error
    lines: list[CaptionLine] = field(default_factory=list)
    first_audio_ms: float | None = None
    first_audio_from_speech_end_ms: float | None = None
    unit_compute_ms: float | None = None
    context_tokens: int | None = None
    max_context_tokens: int | None = None
    seen_text: str = ""
    turns: int = 0
    version: int = 0

    def touch(self) -> None:
        """Mark the view changed."""
        self.version += 1

    def set_status(self, text: str, level: str = "info") -> None:
        """Replace the status line."""
        if text != self.status or level != self.level:
            self.status, self.level = text, level
            self.touch()

    def caption(self, role: str, key: str, text: str, *, append: bool) -> None:
        """Add (or extend, with ``append``) the caption line of ``key``."""
        for line in reversed(self.lines):
            if line.key == key and line.role == role:
                line.text = (line.text + text) if append else text
                self.touch()
                return
        self.lines.append(CaptionLine(role, key, text))
        del self.lines[:-MAX_CAPTION_LINES]
        self.touch()

    def mark_interrupted(self, key: str) -> None:
        """Flag an assistant line whose speech was cut off."""
        for line in self.lines:
            if line.key == key and line.role == "assistant" and not line.interrupted:
                line.interrupted = True
                self.touch()

    def snapshot(self) -> dict[str, Any]:
        """JSON-able copy (the side route returns it; the page renders it)."""
        return {
            "status": self.status,
            "level": self.level,
            "captions": [{"role": c.role, "key": c.key, "text": c.text, "interrupted": c.interrupted}
                         for c in self.lines],
            "metrics": {
                "first_audio_ms": self.first_audio_ms,
                "first_audio_from_speech_end_ms": self.first_audio_from_speech_end_ms,
                "unit_compute_ms": self.unit_compute_ms,
                "context_tokens": self.context_tokens,
                "max_context_tokens": self.max_context_tokens,
                "turns": self.turns,
            },
            "seen_text": self.seen_text,
            "version": self.version,
        }


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def render_captions(snap: dict[str, Any]) -> str:
    """The captions panel (newest line last)."""
    rows = []
    for c in snap.get("captions", []):
        who = "You" if c["role"] == "user" else "Assistant"
        tail = ' <span class="cap-cut">(interrupted)</span>' if c.get("interrupted") else ""
        rows.append(f'<div class="cap cap-{_e(c["role"])}" data-testid="caption-{_e(c["role"])}" '
                    f'data-key="{_e(c["key"])}"><b>{who}:</b> <span class="cap-text">{_e(c["text"])}</span>{tail}</div>')
    body = "".join(rows) or '<div class="cap cap-empty">Captions appear here.</div>'
    return f'<div class="panel-title">Live captions</div><div id="captions" data-testid="captions" class="captions">{body}</div>'


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.0f}{unit}"
    return f"{value}{unit}"


def render_metrics(snap: dict[str, Any]) -> str:
    """The metrics panel: first-audio latency, per-unit compute, context use, what the camera read."""
    m = snap.get("metrics", {})
    ctx = "–" if m.get("context_tokens") is None else f'{m["context_tokens"]} / {_fmt(m.get("max_context_tokens"))}'
    rows = [
        ("first-audio", "First audio (last turn, from end-of-speech detection)", _fmt(m.get("first_audio_ms"), " ms")),
        ("first-audio-speech-end", "First audio (from end of your speech)",
         _fmt(m.get("first_audio_from_speech_end_ms"), " ms")),
        ("unit-compute", "Per-unit compute", _fmt(m.get("unit_compute_ms"), " ms")),
        ("context", "Context used / max (tokens)", ctx),
        ("turns", "Answered turns", _fmt(m.get("turns"))),
        ("seen-text", "Camera text the model read", _e(snap.get("seen_text") or "–")),
    ]
    body = "".join(f'<div class="m-row"><span class="m-label">{_e(label)}</span>'
                   f'<span class="m-val" data-testid="metric-{key}">{value}</span></div>' for key, label, value in rows)
    return f'<div class="panel-title">Metrics</div><div id="metrics" data-testid="metrics" class="metrics">{body}</div>'


def render_status(snap: dict[str, Any]) -> str:
    """The status line (server full, errors, listening/speaking)."""
    level = _e(snap.get("level", "info"))
    return (f'<div id="status" data-testid="status" class="status status-{level}" data-level="{level}">'
            f'{_e(snap.get("status", ""))}</div>')
