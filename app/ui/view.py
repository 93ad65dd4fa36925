"""What the page shows about one conversation: captions, metrics, phase and status; rendered as HTML.

The handler updates a :class:`ConversationView`; the page receives a snapshot through
FastRTC's ``AdditionalOutputs`` (and ``GET /webrtc/state/{webrtc_id}``) and renders it with
:func:`render_captions` and :func:`render_metrics`. The phase (the state pill) and the status
line change together (:meth:`ConversationView.set_phase`) and reach the page together, in one
data-channel message (:meth:`ConversationView.page_state`, sent by the handler; ``assets/page.js``
shows both at once); :func:`render_status` is only the status line's first render. Every element
the e2e tests read carries a ``data-testid``.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_CAPTION_LINES = 14
"""Caption lines kept (oldest dropped first)."""

THINKING_GIVE_UP_S = 4.0
"""Seconds after ``speech_stopped`` with no ``response.created`` after which the page leaves
"Thinking…" at the next unit: the server answers no turn of listener words ("yeah" said as the
reply ended), interjections or noise, and says nothing when it lets one go (found by a fresh-user
trial: the pill stayed on "Thinking…" until the user spoke again)."""

PHASE_STATUS: dict[str, tuple[str, str]] = {
    "idle": ("Press Start to talk.", "info"),
    "listening": ("Listening…", "ok"),
    "thinking": ("Thinking…", "ok"),
    "speaking": ("Speaking… (talk to interrupt)", "ok"),
    "interrupted": ("Interrupted. Listening…", "ok"),
    "error": ("Something went wrong; press Stop and Start again.", "error"),
    "ended": ("Conversation ended. Press Start to talk again.", "warn"),
}
"""Phase -> the status line (text, level) entering it shows, unless the change names its own
text (a refusal's message, why the conversation ended, "Connected. Listening…")."""

HEARING = "Hearing you…"
"""The status while the user talks in a listening phase (:meth:`ConversationView.hearing`)."""


@dataclass
class CaptionLine:
    """One caption line: ``role`` is ``user`` or ``assistant``; ``key`` the item/response id."""

    role: str
    key: str
    text: str = ""
    interrupted: bool = False
    latency_ms: float | None = None


@dataclass
class ConversationView:
    """Mutable view state of one conversation (owned by its handler)."""

    status: str = "Press Start to talk."
    level: str = "info"  # info | ok | warn | error
    lines: list[CaptionLine] = field(default_factory=list)
    first_audio_ms: float | None = None
    first_audio_from_speech_end_ms: float | None = None
    unit_compute_ms: float | None = None
    context_tokens: int | None = None
    max_context_tokens: int | None = None
    seen_text: str = ""
    turns: int = 0
    phase: str = "idle"  # idle | listening | thinking | speaking | interrupted | error | ended
    version: int = 0
    listener: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False, compare=False)
    """Called with :meth:`page_state` at each change of the phase or the status (the handler
    sends it to the page); None: nobody is told (the headless route's clients poll)."""
    _latency: dict[str, float] = field(default_factory=dict, repr=False)

    def touch(self) -> None:
        """Mark the view changed."""
        self.version += 1

    def set_status(self, text: str, level: str = "info") -> None:
        """Replace the status line, the phase staying (a notice: a warning, a server error); the
        :attr:`listener` hears of it at once (an ``omni_status`` message)."""
        if text != self.status or level != self.level:
            self.status, self.level = text, level
            self._changed("omni_status")

    def set_phase(self, phase: str, text: str | None = None, level: str | None = None) -> None:
        """Enter ``phase`` with its status line: :data:`PHASE_STATUS` unless ``text`` / ``level``
        say otherwise. Both change together, so the pill and the status line never disagree; the
        :attr:`listener` hears of both in one ``omni_phase`` message (``omni_status`` when only
        the text changed)."""
        default_text, default_level = PHASE_STATUS[phase]
        text, level = default_text if text is None else text, default_level if level is None else level
        if phase == self.phase and text == self.status and level == self.level:
            return
        kind = "omni_phase" if phase != self.phase else "omni_status"
        self.phase, self.status, self.level = phase, text, level
        self._changed(kind)

    def hearing(self) -> None:
        """The user started talking: :data:`HEARING` in a listening phase. A reply still being
        thought of gives way (back to listening); one being spoken keeps its status (with
        "interrupt as soon as I speak" it has been cut already: *interrupted*)."""
        if self.phase == "thinking":
            self.set_phase("listening", HEARING)
        elif self.phase in ("listening", "interrupted"):
            self.set_status(HEARING, "ok")

    def page_state(self, kind: str = "omni_phase") -> dict[str, Any]:
        """The page's message for the state pill and the status line: ``{"type", "phase", "status",
        "level"}`` (``type`` ``omni_phase``, or ``omni_status`` when the phase did not change)."""
        return {"type": kind, "phase": self.phase, "status": self.status, "level": self.level}

    def _changed(self, kind: str) -> None:
        self.touch()
        if self.listener is not None:
            self.listener(self.page_state(kind))

    def caption(self, role: str, key: str, text: str, *, append: bool) -> None:
        """Add (or extend, with ``append``) the caption line of ``key``."""
        for line in reversed(self.lines):
            if line.key == key and line.role == role:
                line.text = (line.text + text) if append else text
                self.touch()
                return
        self.lines.append(CaptionLine(role, key, text, latency_ms=self._latency.get(key) if role == "assistant" else None))
        del self.lines[:-MAX_CAPTION_LINES]
        self.touch()

    def set_latency(self, key: str, ms: float) -> None:
        """Record the measured latency of the reply ``key`` (shown with its line once it exists)."""
        self._latency[key] = ms
        for line in self.lines:
            if line.key == key and line.role == "assistant":
                line.latency_ms = ms
        self.touch()

    def note_first_audio(self, key: str, after_decision_ms: float | None, after_speech_ms: float | None) -> None:
        """The first audio of the reply ``key`` arrived: the metrics' two figures (ms after the
        end-of-turn decision, and after the end of the user's speech; None = not known for this
        turn), and the reply's own, which is the wait the user heard (from the speech end where
        known, else from the decision)."""
        self.first_audio_ms, self.first_audio_from_speech_end_ms = after_decision_ms, after_speech_ms  # (this turn's)
        shown = after_speech_ms if after_speech_ms is not None else after_decision_ms
        if shown is not None:
            self.set_latency(key, shown)
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
            "phase": self.phase,
            "captions": [{"role": c.role, "key": c.key, "text": c.text, "interrupted": c.interrupted,
                          "latency_ms": c.latency_ms} for c in self.lines],
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
    """The conversation transcript as a chat (newest turn last).

    Each turn is a bubble (``data-testid="caption-user"`` / ``caption-assistant``); an assistant
    turn shows its measured latency (end of the user's speech -> first audio, as the metrics panel's
    "Reply latency"; from the end-of-turn decision where the speech end is unknown) and, when it was cut
    off, what was heard of it and an "interrupted" mark. Words carrying ``data-i18n`` are
    translated by ``assets/page.js``.
    """
    rows = []
    for c in snap.get("captions", []):
        role = _e(c["role"])
        who = ('<span class="cap-who" data-i18n="you">You</span>' if c["role"] == "user"
               else '<span class="cap-who" data-i18n="assistant">Assistant</span>')
        meta = []
        if c.get("latency_ms") is not None:
            meta.append(f'<span class="cap-latency" data-testid="turn-latency" title="Reply latency: from the end of '
                        f'your speech to its first audio">{c["latency_ms"]:.0f} ms</span>')
        if c.get("interrupted"):
            meta.append('<span class="cap-cut" data-testid="turn-interrupted" data-i18n="interrupted_mark">'
                        'interrupted</span>')
        tail = f'<div class="cap-meta">{"".join(meta)}</div>' if meta else ""
        cut = " cap-was-cut" if c.get("interrupted") else ""
        rows.append(f'<div class="cap cap-{role}{cut}" data-testid="caption-{role}" data-key="{_e(c["key"])}">'
                    f'{who} <span class="cap-text">{_e(c["text"])}</span>{tail}</div>')
    body = "".join(rows) or '<div class="cap-empty" data-i18n="transcript_empty">The conversation appears here.</div>'
    return (f'<h2 class="panel-title" data-i18n="transcript">Conversation</h2>'
            f'<div id="captions" data-testid="captions" class="captions" role="log" aria-live="off" tabindex="0" '
            f'aria-label="Conversation transcript">{body}</div>')


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.0f}{unit}"
    return f"{value}{unit}"


def _title(hint: str) -> str:
    return f' title="{_e(hint)}"' if hint else ""


def render_metrics(snap: dict[str, Any]) -> str:
    """The metrics panel: first-audio latency, per-unit compute, context use, what the camera read."""
    m = snap.get("metrics", {})
    ctx = "–" if m.get("context_tokens") is None else f'{m["context_tokens"]} / {_fmt(m.get("max_context_tokens"))}'
    rows = [
        ("first-audio-speech-end", "Reply latency (after you stopped)",
         _fmt(m.get("first_audio_from_speech_end_ms"), " ms"),
         "Last turn: from the end of your speech to the reply's first audio (the wait you hear, less the network)"),
        ("first-audio", "… of it, after the turn was decided", _fmt(m.get("first_audio_ms"), " ms"),
         ("Last turn: from the server's end-of-turn decision to the reply's first audio; the rest of the "
          "latency is the pause the turn detector listened to before it decided you had finished")),
        ("unit-compute", "Per-unit compute", _fmt(m.get("unit_compute_ms"), " ms"), ""),
        ("context", "Context used / max (tokens)", ctx, ""),
        ("turns", "Answered turns", _fmt(m.get("turns")), ""),
        ("seen-text", "What the model saw", _e(snap.get("seen_text") or "–"), ""),
    ]
    body = "".join(f'<div class="m-row"><span class="m-label"{_title(hint)}>{_e(label)}</span>'
                   f'<span class="m-val" data-testid="metric-{key}">{value}</span></div>'
                   for key, label, value, hint in rows)
    return f'<h2 class="panel-title" data-i18n="metrics">Metrics</h2><div id="metrics" data-testid="metrics" class="metrics">{body}</div>'


def render_status(snap: dict[str, Any]) -> str:
    """The status line (server full, errors, listening/speaking): its first render; from then on
    ``assets/page.js`` writes it, with the state pill."""
    level = _e(snap.get("level", "info"))
    return (f'<div id="status" data-testid="status" class="status status-{level}" data-level="{level}">'
            f'{_e(snap.get("status", ""))}</div>')
