"""Protocol checker: the realtime duplex "Invariants" applied to a recorded server event log.

``check_invariants(events)`` takes server events in arrival order (for example the
``events.jsonl`` a realtime demo writes, read with :func:`load_events_jsonl`) and returns one
human-readable line per violation; an empty list means the log is consistent. Beta event names
are accepted (compared as their GA names). Rules (per response id unless stated):

1. ``response.created`` exactly once, before any output of that response (``response.speak``,
   audio/transcript/text deltas and dones, output items, content parts, ``response.done``).
   A second ``response.created`` for an id is a reused id.
2. ``response.speak`` at most once, and not after the response's first audio delta.
3. One ``response.output_audio_transcript.delta`` per ``response.output_audio.delta``; when
   ``response.output_audio_transcript.done`` carries ``transcript``, it equals the
   concatenation of the transcript deltas.
4. ``response.output_audio.done`` at most once, after the last audio delta, before ``response.done``.
5. ``response.done`` exactly once per created response, never for an unknown id, nothing of the
   response after it, and the next event of that response's stream (the next event carrying
   this response id or no response id at all) is ``rate_limits.updated``.
6. Epochs (top-level ``epoch``, ``metadata.epoch`` or ``response.metadata.epoch``; events
   without one are not checked): epoch ``E`` ends at the first event of a later epoch; no
   event of epoch ``E`` (or earlier) may follow. A cancelled response's own late output is
   caught by rule 5 ("after response.done") whichever epoch its terminal was stamped with.
7. Session: ``server_event_seq`` strictly increasing (where present); no ``response.*`` event
   before ``session.created`` (when the log has one); ``session.closed`` at most once and last.

``response.listen`` may carry no response and is not "output" for rule 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from app.client.protocol import (
    AUDIO_DELTA,
    AUDIO_DONE,
    TRANSCRIPT_DELTA,
    TRANSCRIPT_DONE,
    event_epoch,
    event_response_id,
    event_type,
)

OUTPUT_TYPES = frozenset(
    {
        "response.speak",
        AUDIO_DELTA,
        AUDIO_DONE,
        TRANSCRIPT_DELTA,
        TRANSCRIPT_DONE,
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    }
)
"""GA types that are output of a response (must follow ``response.created``, precede ``response.done``)."""


def load_events_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read an ``events.jsonl`` log: one JSON object per line, blank lines skipped.

    Raises:
        ValueError: a line is not JSON or not a JSON object (message names the line number).
        OSError: the file cannot be read.
    """
    events: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if not isinstance(event, dict):
                raise ValueError(f"{path}:{number}: not a JSON object")  # noqa: TRY004 - bad file content
            events.append(event)
    return events


class _Response:
    """What the checker has seen of one response id so far."""

    def __init__(self) -> None:
        self.created = 0
        self.done = 0
        self.speak = 0
        self.audio_deltas = 0
        self.audio_done = 0
        self.transcript_deltas: list[str] = []


def check_invariants(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Check a server event log against the duplex invariants (see the module docstring).

    Args:
        events: server events in arrival order (dicts; extra keys such as
            ``_client_received_at_s`` are ignored).

    Returns:
        Violations as ``"#<index> <type>: <what>"`` strings (``index`` into ``events``), in log
        order, end-of-log findings last. Empty when every rule holds.
    """
    log = list(events)
    violations: list[str] = []
    responses: dict[str, _Response] = {}
    max_epoch: int | None = None
    last_seq: int | None = None
    session_created = not any(event_type(e) == "session.created" for e in log)
    closed_at: int | None = None
    awaiting_rate_limits: str | None = None

    def flag(index: int, kind: str, what: str) -> None:
        violations.append(f"#{index} {kind or '?'}: {what}")

    for index, event in enumerate(log):
        kind = event_type(event)
        rid = event_response_id(event)
        state = responses.get(rid) if rid else None

        # Rule 7: sequence numbers, session.created first, session.closed last.
        seq = event.get("server_event_seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if last_seq is not None and seq <= last_seq:
                flag(index, kind, f"server_event_seq {seq} not greater than previous {last_seq}")
            last_seq = seq
        if closed_at is not None:
            flag(index, kind, f"event after session.closed (#{closed_at})")
        if kind == "session.created":
            session_created = True
        elif kind.startswith("response.") and not session_created:
            flag(index, kind, "response event before session.created")
        if kind == "session.closed" and closed_at is None:
            closed_at = index

        # Rule 6: epochs.
        epoch = event_epoch(event)
        if epoch is not None:
            if max_epoch is not None and epoch < max_epoch:
                flag(index, kind, f"event of epoch {epoch} after that epoch ended")
            max_epoch = epoch if max_epoch is None else max(max_epoch, epoch)

        # Rule 5 (second half): the event right after response.done.
        if awaiting_rate_limits is not None:
            if kind != "rate_limits.updated":
                flag(
                    index,
                    kind,
                    f"response {awaiting_rate_limits}: response.done not followed by rate_limits.updated",
                )
            awaiting_rate_limits = None

        if kind == "response.created":
            if rid is None:
                flag(index, kind, "response.created without a response id")
                continue
            if state is not None:
                flag(index, kind, f"response id {rid} reused (response.created seen again)")
                continue
            responses[rid] = _Response()
            responses[rid].created = 1
            continue

        if rid is None or (kind not in OUTPUT_TYPES and kind != "response.done"):
            continue
        if state is None:
            flag(index, kind, f"response {rid}: {kind} before response.created")
            state = responses[rid] = _Response()
        elif state.done:
            flag(index, kind, f"response {rid}: {kind} after response.done")

        if kind == "response.speak":
            state.speak += 1
            if state.speak > 1:
                flag(index, kind, f"response {rid}: more than one response.speak")
            if state.audio_deltas:
                flag(index, kind, f"response {rid}: response.speak after the first audio delta")
        elif kind == AUDIO_DELTA:
            state.audio_deltas += 1
            if state.audio_done:
                flag(index, kind, f"response {rid}: audio delta after response.output_audio.done")
        elif kind == TRANSCRIPT_DELTA:
            delta = event.get("delta")
            state.transcript_deltas.append(delta if isinstance(delta, str) else "")
        elif kind == TRANSCRIPT_DONE:
            transcript = event.get("transcript")
            joined = "".join(state.transcript_deltas)
            if isinstance(transcript, str) and transcript != joined:
                flag(
                    index,
                    kind,
                    f"response {rid}: transcript {transcript!r} != joined deltas {joined!r}",
                )
        elif kind == AUDIO_DONE:
            state.audio_done += 1
            if state.audio_done > 1:
                flag(index, kind, f"response {rid}: more than one response.output_audio.done")
        elif kind == "response.done":
            state.done += 1
            if state.done > 1:
                flag(index, kind, f"response {rid}: more than one response.done")
            awaiting_rate_limits = rid
            if state.audio_deltas != len(state.transcript_deltas):
                flag(
                    index,
                    kind,
                    f"response {rid}: {state.audio_deltas} audio deltas but "
                    f"{len(state.transcript_deltas)} transcript deltas",
                )

    end = len(log)
    for rid, state in responses.items():
        if state.created and not state.done:
            flag(end, "<end>", f"response {rid}: no response.done")
        if not state.done and state.audio_deltas != len(state.transcript_deltas):
            flag(
                end,
                "<end>",
                f"response {rid}: {state.audio_deltas} audio deltas but "
                f"{len(state.transcript_deltas)} transcript deltas",
            )
    if awaiting_rate_limits is not None:
        flag(
            end,
            "<end>",
            f"response {awaiting_rate_limits}: response.done not followed by rate_limits.updated",
        )
    return violations


def failure_reason(counts: dict[str, int], errors: list[dict[str, Any]], post: dict[str, Any], audio: bool,
                    require_audio: bool) -> str:
    """Why a demo run (``realtime-demo``) is not ``ok``, in one line: the first error, else the
    missing step (no ``session.created``, no decision after the commit, no audio when required)."""
    if errors:
        first = errors[0]
        err = first.get("error")
        if isinstance(err, dict):  # a server error event
            return f"server error {err.get('code')}: {err.get('message')}"
        reason = f"{err or first.get('type')}: {first.get('message', '')}".strip()
        if "HTTP 401" in reason:
            reason += " (the server wants an API key: pass --api-key or set OMNI_API_KEY)"
        return reason
    if not counts.get("session.created"):
        return "no session: the server never sent session.created"
    if post.get("decision") is None:
        return "no decision: neither response.listen nor a response.done arrived after the commit"
    if require_audio and not audio:
        return "no audio: --require-audio was given and the reply had none"
    return "the session did not end with session.closed"
