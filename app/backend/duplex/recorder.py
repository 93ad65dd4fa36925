"""Session recording (``serve --record-dir DIR``): one folder per duplex session, disk-bounded.

Recordings of people are personal data: recording is off unless ``recording.dir`` is set, the
server prints a notice at start-up, the page shows a "recording" badge, and the oldest
recordings are deleted first once ``recording.max_total_mb`` (or ``recording.max_age_days``) is
exceeded (checked whenever a session starts).

A session folder ``<dir>/<UTC start>_<session id>/`` holds (layout version
:data:`FORMAT_VERSION`):

* ``input.wav`` -- the user's audio as the session received it, 16 kHz mono PCM16;
* ``frames/unit_<KKKKK>_<i>.jpg`` -- camera frames, ``KKKKK`` the unit they rode in, ``i`` their
  place in the append (0 = base frame, 1 = composite);
* ``events.jsonl`` -- client commands and server events in order, one JSON object a line:
  ``{"t_s", "dir": "client"|"server", "audio_ms", "event"}`` where ``t_s`` is seconds since the
  session started (monotonic), ``audio_ms`` the input audio received before it, ms, and
  ``event`` the wire JSON. Appends keep their fields but not their payloads: ``audio`` becomes
  ``{"samples", "start_sample"}`` (a slice of ``input.wav``) and ``video_frames`` the frame
  file names; a data-URL ``ref_audio`` becomes the file name ``ref_audio.<ext>``. Audio deltas
  keep their fields, ``delta`` becomes its length in samples (the audio is in ``output.wav``);
* ``output.wav`` -- every output audio delta in order, 24 kHz mono PCM16;
* ``config.json`` -- the deploy config, the recording settings and start time (written at
  start), plus the session object at its end and ``complete: true`` (written at close).

The session calls the four taps (:meth:`SessionRecorder.command`, :meth:`~SessionRecorder.input`,
:meth:`~SessionRecorder.event`, :meth:`~SessionRecorder.close`) from its owner task. A disk error
stops that session's recording (logged once), never the session.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from app.backend.duplex.inputs import InputDecoder
from app.backend.duplex.settings import SessionSettings, apply_update
from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.constants import FIRST_UNIT_MS, INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ
from app.media import decode_base64, decode_image, encode_jpeg

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Version of the folder layout above (``config.json: format_version``)."""

REQUIRED_FILES = ("config.json", "events.jsonl", "input.wav")
"""Files a usable recording must have (``output.wav`` and ``frames/`` are optional)."""

NOTICE = ("recording is ON: every session's audio, camera frames and replies are stored in {dir} "
          "(personal data: tell the people you record; oldest deleted first above {mb} MB{age})")
"""Start-up notice printed by ``serve --record-dir`` (format with dir, mb, age)."""


def notice(cfg: Any) -> str:
    """The start-up notice for the ``recording`` config section ``cfg``."""
    age = f" or after {cfg.max_age_days} days" if cfg.max_age_days else ""
    return NOTICE.format(dir=cfg.dir, mb=cfg.max_total_mb, age=age)


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def recorder_factory(config: Any) -> Any:
    """``store.open`` of a :class:`RecordingStore` for the deploy ``config``, or None when
    ``recording.dir`` is unset (the :attr:`SessionDeps.recorder` hook)."""
    rec = getattr(config, "recording", None)
    if rec is None or not rec.dir:
        return None
    snapshot = {"recording": rec.model_dump(mode="json"), "deploy_config": config.model_dump(mode="json")}
    return RecordingStore(rec, snapshot, int(config.duplex_session.chunk_period_ms)).open


class RecordingStore:
    """The recordings folder: opens one :class:`SessionRecorder` per session, keeps disk use bounded.

    Args:
        cfg: the ``recording`` config section (``dir``, ``max_total_mb``, ``max_age_days``).
        snapshot: JSON-able config snapshot written into each session's ``config.json``.
        unit_ms: unit length, ms (frames are filed under the unit they rode in).
    """

    def __init__(self, cfg: Any, snapshot: dict[str, Any], unit_ms: int) -> None:
        self.root = Path(cfg.dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(cfg.max_total_mb * 1024 * 1024)
        self.max_age_s = cfg.max_age_days * 86400 if cfg.max_age_days else None
        self._snapshot = snapshot
        self._unit_ms = unit_ms
        self.live: set[Path] = set()  # folders of sessions still recording: never pruned

    def sessions(self) -> list[Path]:
        """Session folders, oldest first (by name: they start with the UTC start time)."""
        return sorted(p for p in self.root.iterdir() if p.is_dir())

    def prune(self, now: float | None = None) -> list[Path]:
        """Delete the oldest session folders past ``max_age_days`` or while over ``max_total_mb``
        (folders of sessions still recording are kept).

        Returns:
            The folders deleted.
        """
        now = time.time() if now is None else now
        folders = self.sessions()
        sizes = {p: _folder_bytes(p) for p in folders}
        total = sum(sizes.values())
        gone = []
        for p in folders:
            if p in self.live:
                continue
            too_old = self.max_age_s is not None and now - p.stat().st_mtime > self.max_age_s
            if not too_old and total <= self.max_bytes:
                continue
            shutil.rmtree(p, ignore_errors=True)
            total -= sizes[p]
            gone.append(p)
        return gone

    def open(self, session_id: str) -> SessionRecorder:
        """Prune, then start recording ``session_id`` in a new folder."""
        try:
            for p in self.prune():
                log.info("recording: deleted %s (disk bound)", p.name)
        except OSError:
            log.exception("recording: prune failed")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        folder = self.root / f"{stamp}_{session_id}"
        self.live.add(folder)
        return SessionRecorder(folder, self._snapshot, self._unit_ms, on_close=self.live.discard)


class SessionRecorder:
    """Records one session into ``folder`` (see the module docstring for the files).

    Args:
        folder: created (with ``frames/``); must not exist.
        snapshot: config snapshot for ``config.json``.
        unit_ms: unit length, ms.
        on_close: called with ``folder`` once the recording has ended.
    """

    def __init__(self, folder: Path, snapshot: dict[str, Any], unit_ms: int,
                 on_close: Callable[[Path], None] | None = None) -> None:
        self.folder = folder
        self._on_close = on_close
        self._unit_ms = unit_ms
        self._t0 = time.monotonic()
        self._samples = 0
        self._ok = True
        self._config = {"format_version": FORMAT_VERSION, "started_at": datetime.now(UTC).isoformat(),
                        "complete": False, **snapshot}
        try:
            (folder / "frames").mkdir(parents=True)
            self._write_config()
            self._log = (folder / "events.jsonl").open("w", encoding="utf-8")
            self._in = sf.SoundFile(folder / "input.wav", "w", INPUT_SAMPLE_RATE_HZ, 1, "PCM_16", format="WAV")
            self._out = sf.SoundFile(folder / "output.wav", "w", OUTPUT_SAMPLE_RATE_HZ, 1, "PCM_16", format="WAV")
        except OSError:
            log.exception("recording: cannot create %s; this session is not recorded", folder)
            self._ok = False

    # -- taps (called from the session's owner task) ----------------------------------------
    def command(self, cmd: Any) -> None:
        """A message the owner task is about to handle: client commands are logged (appends by
        :meth:`input`, with their audio), the session's internal posts ignored."""
        if not self._ok or not C.is_client_command(cmd) or isinstance(cmd, (C.AudioAppend, C.AppendArrays)):
            return
        wire = cmd.model_dump(exclude_none=True) if hasattr(cmd, "model_dump") else {"type": type(cmd).__name__}
        session = wire.get("session")
        if isinstance(session, dict) and isinstance(session.get("ref_audio"), str):
            wire["session"] = {**session, "ref_audio": self._save_ref(session["ref_audio"])}
        self._guard(self._line, "client", wire)

    def input(self, audio: np.ndarray, cmd: Any) -> None:
        """A decoded append: ``audio`` float32 16 kHz mono ``(n,)``; frames from ``cmd`` (wire
        ``video_frames`` base64 strings, or in-process ``frames`` RGB arrays)."""
        if self._ok:
            self._guard(self._input, audio, cmd)

    def event(self, ev: E.ServerEvent) -> None:
        """A server event as the session emits it."""
        if self._ok:
            self._guard(self._event, ev)

    def close(self, final: E.ServerEvent, session: dict[str, Any]) -> None:
        """The session ended with ``final``; ``session`` is its last session object."""
        if self._on_close is not None:
            self._on_close(self.folder)
        if not self._ok:
            return
        self._guard(self._event, final)
        self._ok = False
        try:
            self._log.close()
            self._in.close()
            self._out.close()
            self._config.update(complete=True, session=session, closed_reason=getattr(final, "reason", None))
            self._write_config()
        except OSError:
            log.exception("recording: closing %s failed", self.folder)

    # -- internals ---------------------------------------------------------------------------
    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except (OSError, ValueError, TypeError):
            log.exception("recording: %s stopped (disk or encoding error)", self.folder)
            self._ok = False

    def _line(self, direction: str, wire: dict[str, Any]) -> None:
        row = {"t_s": round(time.monotonic() - self._t0, 4), "dir": direction,
               "audio_ms": round(self._samples * 1000 / INPUT_SAMPLE_RATE_HZ, 1), "event": wire}
        self._log.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")

    def _unit_index(self) -> int:
        ms = self._samples * 1000 / INPUT_SAMPLE_RATE_HZ
        return 0 if ms < FIRST_UNIT_MS else 1 + int((ms - FIRST_UNIT_MS) // self._unit_ms)

    def _input(self, audio: np.ndarray, cmd: Any) -> None:
        unit = self._unit_index()
        names = [self._save_frame(unit, i, f) for i, f in enumerate(self._frames_of(cmd))]
        wire: dict[str, Any] = {"type": "input_audio_buffer.append"}
        if isinstance(cmd, C.AudioAppend):
            wire.update(cmd.model_dump(exclude_none=True, exclude={"audio", "video_frames"}))
        wire["audio"] = {"samples": int(audio.size), "start_sample": self._samples}
        if names:
            wire["video_frames"] = names
        self._line("client", wire)
        self._in.write(np.clip(np.asarray(audio, np.float32), -1.0, 1.0))
        self._samples += int(audio.size)

    @staticmethod
    def _frames_of(cmd: Any) -> Sequence[Any]:
        if isinstance(cmd, C.AppendArrays):
            return cmd.frames
        return getattr(cmd, "video_frames", None) or ()

    def _save_frame(self, unit: int, index: int, frame: Any) -> str:
        if isinstance(frame, str):
            data = decode_base64(frame)
            data = data if data[:3] == b"\xff\xd8\xff" else encode_jpeg(decode_image(data))
        else:
            data = encode_jpeg(np.asarray(frame, np.uint8))
        name = f"frames/unit_{unit:05d}_{index}.jpg"
        (self.folder / name).write_bytes(data)
        return name

    def _save_ref(self, ref: str) -> str:
        if not ref.startswith("data:"):
            return ref
        ext = "wav" if "wav" in ref[: ref.find(",")] else "bin"
        (self.folder / f"ref_audio.{ext}").write_bytes(decode_base64(ref))
        return f"ref_audio.{ext}"

    def _event(self, ev: E.ServerEvent) -> None:
        wire = ev.to_wire()
        if isinstance(ev, E.AudioDelta) and ev.audio is not None:
            audio = np.asarray(ev.audio, np.float32).reshape(-1)
            wire["delta"] = int(audio.size)
            self._out.write(np.clip(audio, -1.0, 1.0))
        self._line("server", wire)

    def _write_config(self) -> None:
        text = json.dumps(self._config, indent=2, ensure_ascii=False, default=str) + "\n"
        (self.folder / "config.json").write_text(text, encoding="utf-8")



class WireTap:
    """Records a session whose client commands are forwarded as they are (the remote backend's
    sessions: the vLLM-Omni server, not this process, decodes them).

    It follows the session's ``session.update`` (input format and rate) as the server would, so the
    appends it hands to the :class:`SessionRecorder` are float32 16 kHz like a local session's;
    an append it cannot decode is recorded as no audio (the remote server answers its error).

    Args:
        recorder: the session's :class:`SessionRecorder`.
        limits: the deploy config's ``limits`` (the largest append).
    """

    def __init__(self, recorder: SessionRecorder, limits: Any) -> None:
        self._rec = recorder
        self._settings = SessionSettings()
        self._input = InputDecoder(limits)
        self._audio_started = False

    def command(self, cmd: Any) -> None:
        """A client command as the session forwards it."""
        if isinstance(cmd, C.SessionUpdate):
            with contextlib.suppress(C.ProtocolError):  # refused by the remote, which says so to the client
                self._settings = apply_update(self._settings, cmd.session, audio_started=self._audio_started)
                self._input.configure(self._settings)
        if isinstance(cmd, C.AudioAppend):
            try:
                audio = self._input.audio(cmd, self._settings)
            except C.ProtocolError:
                audio = np.zeros(0, np.float32)
            self._audio_started = True
            self._rec.input(audio, cmd)
            return
        self._rec.command(cmd)

    def event(self, ev: E.ServerEvent) -> None:
        """A server event as the session emits it to its client."""
        self._rec.event(ev)

    def close(self, final: E.ServerEvent, session: dict[str, Any]) -> None:
        """The session ended with ``final``; ``session`` is its last session object."""
        self._rec.close(final, session)


class _NoRecorder:
    """The taps of :class:`SessionRecorder`, doing nothing (recording off)."""

    def command(self, cmd: Any) -> None:
        """No-op."""

    def input(self, audio: np.ndarray, cmd: Any) -> None:
        """No-op."""

    def event(self, ev: E.ServerEvent) -> None:
        """No-op."""

    def close(self, final: E.ServerEvent, session: dict[str, Any]) -> None:
        """No-op."""


NO_RECORDER = _NoRecorder()
"""The recorder of a session that is not recorded."""
