"""Barge-in (soft interrupt) validation driver: ``python -m app barge-in-check``.

Mirrors vLLM-Omni's ``run_minicpmo_realtime_duplex_soft_interrupt.py``: it runs the realtime demo
(:mod:`app.client.demo`) on one WAV through ``/v1/realtime?duplex=1``, then scores the event log.

Validation modes:

* ``model-policy`` (default): any input audio. Checks the lifecycle and streaming invariants
  around overlaps: the demo run is ``ok``; no ``error``, ``*.cancelled`` or ``*.truncated``
  events and no cancelled ``response.done`` (a soft interrupt ends a response *completed*);
  :func:`app.client.invariants.check_invariants` holds (exactly one terminal event per response,
  no output after it, ...); at least ``min_responses`` responses, each streamed (at least two
  audio deltas; one for a response the soft interrupt ended early); every soft-interrupted response (``status_details.reason: user_overlap``) was ended by
  a unit decision (a ``response.listen`` naming it, carrying its ``unit_index``, at its
  ``response.done``); every ``playback.acknowledged`` is consistent with the audio received
  (``played_ms`` and ``committed_ms`` within it, ``truncate`` only when less than all was
  played); no stray response (each ``response.created`` follows a user turn that ended since the
  previous one); the first response was created before the final commit.
* ``response-required``: the stricter diagnostic for a purpose-made two-response WAV (see
  ``scripts/make_barge_in_wav.py``). The file's SHA-256 must equal ``--input-sha256`` (checked
  before anything is sent: a different file is refused); additionally at least two responses,
  the second created before the final commit with a non-empty transcript containing
  ``--expect-second-response-substring`` (case-insensitive).

Output directory: the demo's files (``events.jsonl``, ``output.wav``, ``result.json``) and
``summary.json`` (the report: ``ok``, ``validation_mode``, ``checks`` [{name, ok, detail}],
``responses`` [{id, created_index, done_index, status, reason, audio_deltas, audio_ms,
transcript}], ``input_sha256``). Exit code 0 when every check passes, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.client.collector import decode_audio_delta
from app.client.demo import run_realtime_demo_async
from app.client.invariants import check_invariants
from app.client.protocol import (
    AUDIO_DELTA,
    TRANSCRIPT_DELTA,
    event_response_id,
    event_type,
)
from app.constants import OUTPUT_SAMPLE_RATE_HZ

MODES = ("model-policy", "response-required")
"""The ``--validation-mode`` choices."""

USER_TURN_END_TYPES = frozenset({"input_audio_buffer.speech_stopped", "input_audio_buffer.committed"})
"""Server events that mark the end of a user turn (what a response may answer)."""

ACK_TOLERANCE_MS = 1.0
"""Slack when comparing acknowledged positions with the audio received (clients send whole ms)."""


class InputRefused(ValueError):
    """The input WAV is not the file the check was asked to run (``--input-sha256`` mismatch)."""


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes. Raises OSError when unreadable."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify_input(path: str | Path, expected_sha256: str | None) -> str:
    """Check ``path`` against ``expected_sha256`` (hex, case-insensitive); returns the actual digest.

    Raises:
        InputRefused: ``expected_sha256`` is given and differs.
        OSError: the file cannot be read.
    """
    actual = file_sha256(path)
    if expected_sha256 is not None and actual != expected_sha256.strip().lower():
        raise InputRefused(f"{path}: sha256 {actual} != --input-sha256 {expected_sha256}; refusing to run")
    return actual


def _responses(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per response id, in creation order: indices, status, audio and transcript."""
    out: dict[str, dict[str, Any]] = {}
    for index, event in enumerate(events):
        kind, rid = event_type(event), event_response_id(event)
        if rid is None:
            continue
        if kind == "response.created" and rid not in out:
            out[rid] = {"id": rid, "created_index": index, "done_index": None, "status": None, "reason": None,
                        "audio_deltas": 0, "audio_bytes": 0, "transcript": "", "listen_index": None}
        row = out.get(rid)
        if row is None:
            continue
        if kind == AUDIO_DELTA:
            row["audio_deltas"] += 1
            row["audio_bytes"] += len(decode_audio_delta(event))
        elif kind == TRANSCRIPT_DELTA and isinstance(event.get("delta"), str):
            row["transcript"] += event["delta"]
        elif kind == "response.listen" and row["listen_index"] is None:
            row["listen_index"] = index
            row["listen_unit_index"] = ((event.get("response") or {}).get("metadata") or {}).get("unit_index")
        elif kind == "response.done" and row["done_index"] is None:
            response = event.get("response") or {}
            details = response.get("status_details") or {}
            row.update(done_index=index, status=response.get("status"), reason=details.get("reason"))
    rows = list(out.values())
    for row in rows:
        row["audio_ms"] = round(row.pop("audio_bytes") * 1000 / (2 * OUTPUT_SAMPLE_RATE_HZ), 1)
    return rows


def _ended_at_boundary(events: list[dict[str, Any]], row: dict[str, Any]) -> bool:
    """A soft-interrupted response was ended by a unit decision: a ``response.listen`` naming it
    (with its ``unit_index``) comes with its ``response.done`` -- before it, or right after it
    with only ``rate_limits.updated`` between."""
    listen, done = row["listen_index"], row["done_index"]
    if listen is None or done is None or row.get("listen_unit_index") is None:
        return False
    return listen < done or all(event_type(e) == "rate_limits.updated" for e in events[done + 1 : listen])


def _ack_problems(events: list[dict[str, Any]], audio_ms: dict[str, float]) -> list[str]:
    problems = []
    for index, event in enumerate(events):
        if event_type(event) != "playback.acknowledged":
            continue
        rid = event_response_id(event)
        body = event.get("event") or {}
        played, committed = float(body.get("played_ms", 0)), float(body.get("committed_ms", 0))
        total = audio_ms.get(rid or "", 0.0)
        if played > total + ACK_TOLERANCE_MS:
            problems.append(f"#{index} {rid}: played_ms {played} > audio received {total}")
        if committed > played + ACK_TOLERANCE_MS:
            problems.append(f"#{index} {rid}: committed_ms {committed} > played_ms {played}")
        if body.get("truncate") and played + ACK_TOLERANCE_MS >= total:
            problems.append(f"#{index} {rid}: truncate although all {total} ms were played")
    return problems


def _stray_responses(events: list[dict[str, Any]]) -> list[str]:
    stray, turn_ended = [], False
    for index, event in enumerate(events):
        kind = event_type(event)
        if kind in USER_TURN_END_TYPES:
            turn_ended = True
        elif kind == "response.created":
            if not turn_ended:
                stray.append(f"#{index} {event_response_id(event)}: no user turn ended since the previous response")
            turn_ended = False
    return stray


def score_events(
    events: list[dict[str, Any]],
    *,
    mode: str = "model-policy",
    demo_ok: bool = True,
    commit_index: int | None = None,
    min_responses: int | None = None,
    expect_second_substring: str | None = None,
) -> tuple[bool, list[dict[str, Any]], list[dict[str, Any]]]:
    """Score one barge-in run's server event log.

    Args:
        events: server events in arrival order (``events.jsonl``).
        mode: ``model-policy`` or ``response-required``.
        demo_ok: the demo's own ``ok``.
        commit_index: index in ``events`` of ``input_audio_buffer.committed`` of the final commit
            (None: the log has none, so "created before the final commit" fails).
        min_responses: responses needed; default 1 (``model-policy``) or 2 (``response-required``).
        expect_second_substring: ``response-required``: the second answer must contain it.

    Returns:
        ``(ok, checks, responses)``: each check ``{"name", "ok", "detail"}``; responses as in
        the module docstring.

    Raises:
        ValueError: unknown ``mode``.
    """
    if mode not in MODES:
        raise ValueError(f"validation mode must be one of {MODES}, not {mode!r}")
    need = min_responses or (2 if mode == "response-required" else 1)
    rows = _responses(events)
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: Any = "") -> None:
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    check("demo_ok", demo_ok)
    bad = [f"#{i} {event_type(e)}" for i, e in enumerate(events)
           if event_type(e) == "error" or event_type(e).endswith((".cancelled", ".truncated"))]
    check("no_error_cancel_truncate_events", not bad, bad)
    cancelled = [r["id"] for r in rows if r["status"] == "cancelled"]
    check("no_cancelled_response_done", not cancelled, cancelled)
    violations = check_invariants(events)
    check("lifecycle_invariants", not violations, violations)
    check("min_responses", len(rows) >= need, f"{len(rows)} responses, need {need}")
    few = [f"{r['id']}: {r['audio_deltas']}" for r in rows
           if r["audio_deltas"] < (1 if r["reason"] == "user_overlap" else 2)]
    check("audio_deltas_per_response", not few, few)
    unbounded = [r["id"] for r in rows if r["reason"] == "user_overlap" and not _ended_at_boundary(events, r)]
    check("soft_interrupts_at_unit_boundary", not unbounded, unbounded)
    acks = _ack_problems(events, {r["id"]: r["audio_ms"] for r in rows})
    check("playback_ack_consistent", not acks, acks)
    stray = _stray_responses(events)
    check("no_stray_responses", not stray, stray)
    before = commit_index is not None and bool(rows) and rows[0]["created_index"] < commit_index
    check("first_response_before_final_commit", before, f"committed at #{commit_index}")
    if mode == "response-required":
        second = rows[1] if len(rows) > 1 else None
        check("second_response_before_final_commit",
              second is not None and commit_index is not None and second["created_index"] < commit_index,
              f"committed at #{commit_index}")
        text = (second or {}).get("transcript", "")
        check("second_response_transcript", bool(text.strip()), text)
        want = expect_second_substring or ""
        check("second_response_contains", want.lower() in text.lower(), {"expected": want, "transcript": text})
    return all(c["ok"] for c in checks), checks, rows


async def run_barge_in_check_async(args: argparse.Namespace) -> dict[str, Any]:
    """Run the check described by parsed ``args`` (see :func:`build_arg_parser`); returns the report.

    Raises:
        InputRefused: ``--input-sha256`` given and the WAV differs (nothing has been sent).
        OSError, app.media.MediaError: unreadable input.
    """
    digest = verify_input(args.input_wav, args.input_sha256)
    out = Path(args.output_dir)
    result = await run_realtime_demo_async(
        args.url, args.input_wav, out, model=args.model, ref_audio=args.ref_audio, chunk_ms=args.chunk_ms,
        realtime=not args.no_realtime_pacing, timeout_s=args.timeout_s, instructions=args.instructions,
        require_audio=True,
    )
    from app.client.invariants import load_events_jsonl

    events = load_events_jsonl(out / "events.jsonl")
    ok, checks, rows = score_events(
        events, mode=args.validation_mode, demo_ok=bool(result["ok"]),
        commit_index=result["post_commit"].get("input_committed_event_index"),
        min_responses=args.min_responses, expect_second_substring=args.expect_second_response_substring,
    )
    report = {"ok": ok, "validation_mode": args.validation_mode, "input_wav": str(args.input_wav),
              "input_sha256": digest, "url": args.url, "checks": checks, "responses": rows,
              "failed": [c["name"] for c in checks if not c["ok"]], "output_dir": str(out)}
    (out / "summary.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def build_arg_parser() -> argparse.ArgumentParser:
    """The ``barge-in-check`` command line (flags follow vLLM-Omni's soft-interrupt driver)."""
    p = argparse.ArgumentParser(prog="barge-in-check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base or realtime URL")
    p.add_argument("--input-wav", type=Path, required=True, help="input speech (any audio format)")
    p.add_argument("--validation-mode", choices=MODES, default="model-policy")
    p.add_argument("--input-sha256", default=None, help="required SHA-256 of --input-wav (response-required)")
    p.add_argument("--expect-second-response-substring", "--expect-followup-response-substring",
                   dest="expect_second_response_substring", default=None,
                   help="response-required: text the second answer must contain")
    p.add_argument("--min-responses", type=int, default=None, help="default 1 (model-policy) / 2 (response-required)")
    p.add_argument("--output-dir", type=Path, default=Path("out/barge_in_check"))
    p.add_argument("--model", default=None)
    p.add_argument("--ref-audio", type=Path, default=None, help="reference voice WAV")
    p.add_argument("--chunk-ms", type=int, default=200)
    p.add_argument("--timeout-s", type=float, default=60.0, help="post-commit wait limit, s")
    p.add_argument("--no-realtime-pacing", action="store_true",
                   help="send input as fast as possible (overlaps then do not happen as spoken)")
    p.add_argument("--instructions", default=None)
    return p


def main_barge_in_check(argv: Sequence[str] | None = None) -> int:
    """CLI entry: print the report as one JSON line; exit 0 iff every check passed (1 otherwise)."""
    parser = build_arg_parser()
    args = parser.parse_args(argv)
    if args.validation_mode == "response-required" and not (args.input_sha256 and
                                                           args.expect_second_response_substring):
        parser.error("response-required needs --input-sha256 and --expect-second-response-substring")
    try:
        report = asyncio.run(run_barge_in_check_async(args))
    except InputRefused as exc:
        print(json.dumps({"ok": False, "refused": str(exc)}))
        return 1
    print(json.dumps({k: report[k] for k in ("ok", "validation_mode", "failed", "output_dir")}))
    return 0 if report["ok"] else 1
