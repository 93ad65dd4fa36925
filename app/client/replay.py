"""Replay a session recording against any server speaking the realtime duplex protocol.

``python -m app replay DIR --url URL [--output-dir OUT] [--pace realtime|fast]`` reads a folder
written by ``serve --record-dir`` (layout: :mod:`app.backend.duplex.recorder`), opens a session
on ``URL`` (this app or vLLM-Omni: ``/v1/realtime?duplex=1``) with the recorded session settings,
and re-sends the recorded client commands: each append with its slice of ``input.wav`` and its
camera frames, commits, cancels and barge-ins as recorded, and playback acks re-aimed at the
replayed responses (matched by creation order; ``played_ms`` capped at what was received).
``realtime`` keeps the recorded send times (the media clock of the conversation); ``fast``
sends as fast as the socket takes it (decisions then differ: replies come later on the clock).

``OUT`` (default ``DIR/replay``) receives the same artefacts as a recording (``input.wav``,
``frames/``, ``events.jsonl`` with client and server rows, ``output.wav``, ``config.json``) plus
``diff.json`` (:func:`diff_sessions`: speak/listen decisions per unit, reply texts, first-audio
latencies, recorded vs replayed) and ``result.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from app.client.collector import EventCollector
from app.client.config import SessionConfig
from app.client.duplex import DuplexClient
from app.client.protocol import (
    AUDIO_DELTA,
    TRANSCRIPT_DELTA,
    DuplexClientError,
    event_response_id,
    event_type,
)
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ

REQUIRED_FILES = ("config.json", "events.jsonl", "input.wav")
"""Files a recording must have (the recorder's ``REQUIRED_FILES``)."""

PACES = ("realtime", "fast")
SKIPPED = frozenset({"session.update", "session.event_ack", "session.heartbeat", "session.close"})
"""Recorded client types not re-sent as such (the handshake and close are the client's own)."""


class RecordingError(ValueError):
    """A recording folder that cannot be replayed; the message names the missing or bad file."""


@dataclass
class Recording:
    """A loaded recording.

    Attributes:
        folder: the session folder.
        config: ``config.json``.
        rows: ``events.jsonl`` rows ``{"t_s", "dir", "audio_ms", "event"}`` in order.
        audio: ``input.wav`` as float32 16 kHz mono, shape ``(n,)``.
    """

    folder: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    audio: np.ndarray

    def client_rows(self) -> list[dict[str, Any]]:
        """The client commands, in order."""
        return [r for r in self.rows if r["dir"] == "client"]

    def server_events(self) -> list[dict[str, Any]]:
        """The server events (wire JSON) with ``t_s``, in order."""
        return [{**r["event"], "t_s": r["t_s"]} for r in self.rows if r["dir"] == "server"]


def load_recording(folder: str | Path) -> Recording:
    """Read and check a recording folder.

    Raises:
        RecordingError: not a folder; a required file missing; ``config.json`` or a line of
            ``events.jsonl`` not JSON or malformed; ``input.wav`` not 16 kHz mono or shorter than
            the appends say; a frame file named by an append missing.
    """
    root = Path(folder)
    if not root.is_dir():
        raise RecordingError(f"{root}: not a recording folder")
    for name in REQUIRED_FILES:
        if not (root / name).is_file():
            raise RecordingError(f"{root}: missing {name} (a partial or corrupt recording)")
    try:
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordingError(f"{root / 'config.json'}: not JSON ({exc})") from None
    rows = []
    with (root / "events.jsonl").open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise RecordingError(f"{root / 'events.jsonl'}:{number}: not JSON (truncated?)") from None
            if not (isinstance(row, dict) and row.get("dir") in ("client", "server")
                    and isinstance(row.get("event"), dict) and isinstance(row.get("t_s"), int | float)):
                raise RecordingError(f"{root / 'events.jsonl'}:{number}: not a recording row")
            rows.append(row)
    try:
        audio, rate = sf.read(root / "input.wav", dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise RecordingError(f"{root / 'input.wav'}: unreadable ({exc})") from None
    if rate != INPUT_SAMPLE_RATE_HZ or audio.shape[1] != 1:
        raise RecordingError(f"{root / 'input.wav'}: {rate} Hz x{audio.shape[1]}, expected 16000 Hz mono")
    rec = Recording(root, config, rows, audio[:, 0])
    for row in rec.client_rows():
        ev = row["event"]
        if event_type(ev) != "input_audio_buffer.append":
            continue
        span = ev.get("audio") or {}
        if int(span.get("start_sample", 0)) + int(span.get("samples", 0)) > rec.audio.size:
            raise RecordingError(f"{root / 'input.wav'}: shorter than events.jsonl's appends (truncated?)")
        for name in ev.get("video_frames") or []:
            if not (root / name).is_file():
                raise RecordingError(f"{root}: missing {name} (named by an append in events.jsonl)")
    return rec


# -- comparison -----------------------------------------------------------------------------

def unit_decisions(events: list[dict[str, Any]]) -> dict[int, str]:
    """Speak/listen per unit index: ``session.unit_metrics.decision`` where the server sends it
    (this app), else ``listen`` for units with a ``response.listen`` and ``speak`` for the others."""
    metrics = {int(e["unit_index"]): str(e.get("decision")) for e in events
               if event_type(e) == "session.unit_metrics" and "unit_index" in e}
    if metrics:
        return metrics
    listens = {int(((e.get("response") or {}).get("metadata") or {}).get("unit_index", -1)) for e in events
               if event_type(e) == "response.listen"}
    listens.discard(-1)
    return {k: "listen" if k in listens else "speak" for k in range(max(listens, default=-1) + 1)}


def replies(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per response in creation order: ``text`` (joined transcript deltas) and
    ``first_audio_ms`` (first audio delta minus the last ``speech_stopped`` before it was created,
    on the event times ``t_s``; None without either)."""
    out: dict[str, dict[str, Any]] = {}
    stopped: float | None = None
    for e in events:
        kind, rid = event_type(e), event_response_id(e)
        if kind == "input_audio_buffer.speech_stopped":
            stopped = e["t_s"]
        elif kind == "response.created" and rid and rid not in out:
            out[rid] = {"id": rid, "text": "", "first_audio_ms": None, "_from": stopped}
        elif rid in out:
            row = out[rid]
            if kind == TRANSCRIPT_DELTA and isinstance(e.get("delta"), str):
                row["text"] += e["delta"]
            elif kind == AUDIO_DELTA and row["first_audio_ms"] is None and row["_from"] is not None:
                row["first_audio_ms"] = round((e["t_s"] - row["_from"]) * 1000, 1)
    for row in out.values():
        row.pop("_from")
    return list(out.values())


def diff_sessions(recorded: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> dict[str, Any]:
    """Compare two server event logs (wire JSON with ``t_s`` seconds).

    Returns:
        ``units`` {compared, same, agreement (0..1 or None), mismatches [{unit, recorded,
        replayed}]}; ``replies`` [{index, recorded, replayed, same}]; ``first_audio_ms``
        [{index, recorded, replayed, delta_ms}]; response counts.
    """
    a, b = unit_decisions(recorded), unit_decisions(replayed)
    common = sorted(set(a) & set(b))
    mismatches = [{"unit": k, "recorded": a[k], "replayed": b[k]} for k in common if a[k] != b[k]]
    ra, rb = replies(recorded), replies(replayed)
    pairs = list(zip(ra, rb, strict=False))
    return {
        "units": {"compared": len(common), "same": len(common) - len(mismatches),
                  "agreement": round((len(common) - len(mismatches)) / len(common), 4) if common else None,
                  "mismatches": mismatches, "recorded_units": len(a), "replayed_units": len(b)},
        "replies": [{"index": i, "recorded": x["text"], "replayed": y["text"],
                     "same": x["text"].strip() == y["text"].strip()} for i, (x, y) in enumerate(pairs)],
        "first_audio_ms": [{"index": i, "recorded": x["first_audio_ms"], "replayed": y["first_audio_ms"],
                            "delta_ms": None if None in (x["first_audio_ms"], y["first_audio_ms"])
                            else round(y["first_audio_ms"] - x["first_audio_ms"], 1)}
                           for i, (x, y) in enumerate(pairs)],
        "recorded_responses": len(ra), "replayed_responses": len(rb),
    }


# -- replay ---------------------------------------------------------------------------------

def _is_decision(event: dict[str, Any]) -> bool:
    kind = event_type(event)
    status = (event.get("response") or {}).get("status") if isinstance(event.get("response"), dict) else None
    return kind == "response.listen" or (kind == "response.done" and status != "cancelled")


def _session_config(rec: Recording) -> SessionConfig:
    update = next((r["event"] for r in rec.client_rows() if event_type(r["event"]) == "session.update"), {})
    session = update.get("session") or {}
    ref = session.get("ref_audio")
    if isinstance(ref, str) and (rec.folder / ref).is_file():
        ref = "data:audio/wav;base64," + base64.b64encode((rec.folder / ref).read_bytes()).decode("ascii")
    temperature = session.get("temperature")
    return SessionConfig(instructions=session.get("instructions"), ref_audio=ref if isinstance(ref, str) else None,
                         temperature=temperature if isinstance(temperature, int | float) else None)


class _Replayer:
    def __init__(self, rec: Recording, client: DuplexClient, out: Path, pace: str) -> None:
        self.rec, self.client, self.out, self.pace = rec, client, out, pace
        self.log: list[dict[str, Any]] = []
        self.sent: list[np.ndarray] = []
        self.acked: set[str] = set()
        self.recorded_ids = [e.get("response_id") for e in rec.server_events() if event_type(e) == "response.created"]
        self.t0 = time.monotonic()

    def _row(self, event: dict[str, Any]) -> None:
        audio_ms = round(sum(a.size for a in self.sent) * 1000 / INPUT_SAMPLE_RATE_HZ, 1)
        self.log.append({"t_s": round(time.monotonic() - self.t0, 4), "dir": "client", "audio_ms": audio_ms,
                         "event": event})

    async def run(self) -> None:
        rows = [r for r in self.rec.client_rows() if event_type(r["event"]) not in SKIPPED]
        anchor = rows[0]["t_s"] if rows else 0.0
        start = time.monotonic()
        for row in rows:
            if self.pace == "realtime":
                await asyncio.sleep(max(0.0, start + row["t_s"] - anchor - time.monotonic()))
            await self._send(row["event"])

    async def _send(self, ev: dict[str, Any]) -> None:
        kind = event_type(ev)
        if kind == "input_audio_buffer.append":
            span = ev.get("audio") or {}
            lo = int(span.get("start_sample", 0))
            chunk = self.rec.audio[lo : lo + int(span.get("samples", 0))]
            frames = [base64.b64encode((self.rec.folder / n).read_bytes()).decode("ascii")
                      for n in ev.get("video_frames") or []]
            for name in ev.get("video_frames") or []:
                (self.out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.rec.folder / name, self.out / name)
            pcm = (np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes()
            await self.client.append_audio(pcm, video_frames=frames or None)
            self._row({**ev})
            self.sent.append(chunk)
        elif kind == "playback.ack":
            await self._ack(ev)
        else:
            wire = {k: v for k, v in ev.items() if k != "event_id"}
            rid = event_response_id(wire)
            if rid is not None:
                wire.pop("response_id", None)
                mapped = self._map(rid)
                if mapped:
                    wire["response_id"] = mapped
            await self.client.send(wire)
            self._row(wire)

    async def settle(self, timeout_s: float) -> None:
        """After the last command: wait for the decision on the last commit (``response.listen``
        or a non-cancelled ``response.done`` after its ``committed``), then for every open
        response's ``response.done``; then ack what was received when the recording acked."""
        collector, deadline = self.client.collector, time.monotonic() + timeout_s
        committed = [i for i, e in enumerate(collector.events) if event_type(e) == "input_audio_buffer.committed"]
        with contextlib.suppress(TimeoutError, DuplexClientError):
            if committed:
                await self.client.wait_for(_is_decision, timeout_s, after_index=committed[-1] + 1,
                                           raise_on_error=False)
            for rid in list(collector.response_ids):
                if not collector.response_is_done(rid):
                    await self.client.wait_for(
                        lambda e, rid=rid: event_type(e) == "response.done" and event_response_id(e) == rid,
                        max(0.0, deadline - time.monotonic()), after_index=0, raise_on_error=False)
        if any(event_type(r["event"]) == "playback.ack" for r in self.rec.client_rows()):
            for rid in collector.response_ids:
                if rid not in self.acked:
                    await self.client.ack_playback(rid, played_ms=collector.audio_duration_ms(rid))
                    self._row({"type": "playback.ack", "response_id": rid, "played_ms": int(
                        collector.audio_duration_ms(rid)), "note": "final ack of the replayed reply"})

    def _map(self, recorded_id: str) -> str | None:
        if recorded_id not in self.recorded_ids:
            return None
        index = self.recorded_ids.index(recorded_id)
        ids = self.client.collector.response_ids
        return ids[index] if index < len(ids) else None

    async def _ack(self, ev: dict[str, Any]) -> None:
        rid = self._map(str(ev.get("response_id")))
        if rid is None:
            self._row({"type": "client.ack_skipped", "recorded_response_id": ev.get("response_id")})
            return
        have = self.client.collector.audio_duration_ms(rid)
        played = min(float(ev.get("played_ms", 0)), have)
        await self.client.ack_playback(rid, played_ms=played, truncate=bool(ev.get("truncate")))
        self.acked.add(rid)
        self._row({"type": "playback.ack", "response_id": rid, "played_ms": int(played)})


async def replay_async(folder: str | Path, url: str, output_dir: str | Path | None = None, *,
                       pace: str = "realtime", model: str | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
    """Replay the recording in ``folder`` against ``url``; see the module docstring.

    Returns:
        The ``result.json`` dict: ``ok`` (session opened and closed, no client error), ``errors``
        (server ``error`` events and client failures), ``diff`` (:func:`diff_sessions`), ``output_dir``.

    Raises:
        RecordingError: a bad recording (nothing is sent then).
        ValueError: unknown ``pace``.
    """
    if pace not in PACES:
        raise ValueError(f"pace must be one of {PACES}, not {pace!r}")
    rec = load_recording(folder)
    out = Path(output_dir) if output_dir is not None else rec.folder / "replay"
    (out / "frames").mkdir(parents=True, exist_ok=True)
    client = DuplexClient(url, model, _session_config(rec), collector=EventCollector())
    player = _Replayer(rec, client, out, pace)
    errors: list[dict[str, Any]] = []
    try:
        async with client:
            await player.run()
            await player.settle(timeout_s)
    except (DuplexClientError, TimeoutError, OSError) as exc:
        errors.append({"type": "client.error", "error": type(exc).__name__, "message": str(exc)})
    server = [{**e, "t_s": round(e["_client_received_at_s"] - player.t0, 4)} for e in client.collector.events]
    rows = player.log + [{"t_s": e["t_s"], "dir": "server", "audio_ms": None,
                          "event": {k: v for k, v in e.items() if k not in ("t_s", "_client_received_at_s")}}
                         for e in server]
    rows.sort(key=lambda r: r["t_s"])
    with (out / "events.jsonl").open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    sent = np.concatenate(player.sent) if player.sent else np.zeros(0, np.float32)
    sf.write(out / "input.wav", sent, INPUT_SAMPLE_RATE_HZ, subtype="PCM_16", format="WAV")
    pcm = np.frombuffer(client.collector.audio_bytes(), "<i2").astype(np.float32) / 32768.0
    sf.write(out / "output.wav", pcm, OUTPUT_SAMPLE_RATE_HZ, subtype="PCM_16", format="WAV")
    (out / "config.json").write_text(json.dumps({"replay_of": str(rec.folder), "url": client.url, "pace": pace,
                                                 "model": model, "recording_config": rec.config}, indent=2) + "\n")
    diff = diff_sessions(rec.server_events(), server)
    (out / "diff.json").write_text(json.dumps(diff, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = client.collector.errors() + errors
    result = {"ok": not any(e.get("type") == "client.error" for e in errors) and bool(client.collector.count(
        "session.closed")), "errors": errors, "diff": diff, "output_dir": str(out), "session_id": client.session_id}
    (out / "result.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


def build_arg_parser() -> argparse.ArgumentParser:
    """The ``replay`` command line."""
    p = argparse.ArgumentParser(prog="replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recording", type=Path, help="a session folder written by serve --record-dir")
    p.add_argument("--url", required=True, help="server base or realtime URL (this app or vLLM-Omni)")
    p.add_argument("--output-dir", type=Path, default=None, help="default: RECORDING/replay")
    p.add_argument("--pace", choices=PACES, default="realtime")
    p.add_argument("--model", default=None)
    p.add_argument("--timeout-s", type=float, default=60.0, help="wait for open responses after the last command, s")
    return p


def main_replay(argv: Sequence[str] | None = None) -> int:
    """CLI entry: print a one-line JSON summary; exit 0 when the replay ran (1 if not, 2 for a bad recording)."""
    args = build_arg_parser().parse_args(argv)
    try:
        result = asyncio.run(replay_async(args.recording, args.url, args.output_dir, pace=args.pace,
                                          model=args.model, timeout_s=args.timeout_s))
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    d = result["diff"]
    print(json.dumps({"ok": result["ok"], "unit_agreement": d["units"]["agreement"],
                      "recorded_responses": d["recorded_responses"], "replayed_responses": d["replayed_responses"],
                      "errors": len(result["errors"]), "output_dir": result["output_dir"]}))
    return 0 if result["ok"] else 1
