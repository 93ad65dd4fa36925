"""Scripted duplex sessions run in-process, stepped deterministically, with normalised event streams.

Each script is a list of steps sent to one in-process session through the one wire decoder
(exactly what ``WS /v1/realtime`` does with a frame). After every step the harness waits until
the session has *settled*: its inbox is empty and none of its background work (ASR, Thinker,
Talker, Code2Wav, OCR) is still running. So a reply is always fully produced before the next
append arrives, and the stream depends only on the input, not on machine speed or load.

Normalisation: ids (``resp_*``, ``item_*``, ``duplex-*``, client event ids) become ``<resp 1>``,
``<item 2>``... in order of first appearance; base64 audio becomes its decoded sample count;
wall-clock figures (``compute_ms``) are dropped. Everything else (event order, epochs, media
clock ``audio_*_ms``, transcripts, durations, context tokens) is kept.

Re-record (only together with a deliberate behaviour change, said in the commit):
``.venv/bin/python -m tests.golden.harness``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import float_to_pcm16

GOLDEN_DIR = Path(__file__).parent
APPEND_MS = 100
_ID = re.compile(r"\b(resp_[0-9a-f]+|item_resp_[0-9a-f]+|item_[0-9a-f]+|duplex-[0-9a-f-]+|evt_[0-9A-Za-z_]+)\b")


# ----------------------------------------------------------------------------- inputs
def _speech(text: str, cache: Path, rate_wpm: int = 160) -> np.ndarray:
    """espeak-ng speech, resampled to 16 kHz with soxr: the same samples on every run (no dither)."""
    import subprocess

    from app.media import resample

    name = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:48] + f"_{rate_wpm}.wav"
    raw = cache / name
    if not raw.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["espeak-ng", "-v", "en", "-s", str(rate_wpm), "-w", str(raw), text], check=True)
    audio, rate = sf.read(str(raw), dtype="float32")
    return resample(audio, rate, INPUT_SAMPLE_RATE_HZ)


def _silence(s: float) -> np.ndarray:
    return np.zeros(int(s * INPUT_SAMPLE_RATE_HZ), np.float32)


def _appends(audio: np.ndarray, tag: str) -> list[dict[str, Any]]:
    step = INPUT_SAMPLE_RATE_HZ * APPEND_MS // 1000
    out = []
    for i in range(0, audio.size, step):
        b64 = base64.b64encode(float_to_pcm16(audio[i : i + step])).decode()
        out.append({"type": "input_audio_buffer.append", "audio": b64, "event_id": f"evt_{tag}_{i // step}"})
    return out


WALL_CLOCK_KEYS = frozenset({"compute_ms", "turn_score_ms", "thinker_steps", "thinker_batch", "thinker_wait_ms",
                             "asr_reads", "asr_batch", "asr_wait_ms"})
"""Fields measured in wall time, or split over units by it (the Thinker batch figures: how many of a
reply's steps fall in each unit), dropped by :func:`normalise`."""

SCRIPT_NAMES = ("question", "barge_in", "commit", "hard_cancel", "bad_events")
"""The scripted sessions (keys of :func:`scripts`)."""


def scripts(cache: Path) -> dict[str, list[Any]]:
    """The scripted sessions: name -> steps (wire JSON objects, or raw text frames)."""
    q = _speech("What is the capital of France?", cache)
    long_q = _speech("Please tell me a long story about a dragon who lives in a castle.", cache)
    stop = _speech("Wait, stop. What is two plus two?", cache)
    update = {"type": "session.update", "session": {"instructions": "You are a helpful assistant."}}
    return {
        "question": [update, *_appends(np.concatenate([_silence(0.5), q, _silence(3.0)]), "q")],
        "barge_in": [update, *_appends(np.concatenate([_silence(0.5), long_q, _silence(1.6)]), "q"),
                     *_appends(np.concatenate([stop, _silence(3.0)]), "b")],
        "commit": [update, *_appends(np.concatenate([_silence(0.3), q]), "q"),
                   {"type": "input_audio_buffer.commit", "event_id": "evt_commit"},
                   *_appends(_silence(0.5), "s"),
                   "ACK_LAST_RESPONSE",
                   {"type": "input_audio_buffer.commit", "event_id": "evt_commit_empty"}],
        "hard_cancel": [update, *_appends(np.concatenate([_silence(0.5), long_q, _silence(1.2)]), "q"),
                        "CANCEL_ACTIVE_RESPONSE", *_appends(_silence(2.0), "s")],
        "bad_events": [update,
                       "{not json",
                       {"type": "no.such.event", "event_id": "evt_unknown"},
                       {"type": "input_audio_buffer.append", "audio": "%%%not-base64%%%", "event_id": "evt_b64"},
                       {"type": "input_audio_buffer.append", "audio": "AAAA", "format": "mp4a",
                        "event_id": "evt_fmt"},
                       {"type": "response.cancel", "event_id": "evt_cancel"},
                       {"type": "input_audio_buffer.commit", "event_id": "evt_empty"},
                       {"type": "conversation.item.create", "event_id": "evt_item"},
                       {"type": "input_audio_buffer.append", "audio": "AAAA", "video_frames": ["bm9wZQ=="],
                        "event_id": "evt_frame"},
                       {"type": "playback.ack", "response_id": "resp_nope", "played_ms": 10, "event_id": "evt_ack"},
                       *_appends(np.concatenate([_silence(0.3), q, _silence(2.0)]), "q"),
                       {"type": "session.close", "event_id": "evt_close"}],
    }


# ----------------------------------------------------------------------------- running
def settled(session: Any) -> bool:
    """True when the session's inbox is empty and none of its background work is running."""
    if hasattr(session, "settled"):
        return session.settled()
    return session._inbox.empty() and all(t.done() for t in session._work)  # before the split (recording)


async def _settle(session: Any, timeout_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    calm = 0
    while calm < 3:  # settled on three consecutive looks (work posts its result, then ends)
        await asyncio.sleep(0.002)
        calm = calm + 1 if settled(session) else 0
        if loop.time() > deadline:
            raise TimeoutError("session did not settle")


def _drain(session: Any, out: list[dict[str, Any]]) -> None:
    q = session._outbox
    while not q.empty():
        out.append(q.get_nowait().to_wire())


async def run_script(engine: Any, steps: list[Any]) -> list[dict[str, Any]]:
    """Run one script on a fresh in-process session; returns the wire events (not normalised)."""
    try:
        from app.backend.protocol import commands as C
    except ImportError:  # before the split (recording)
        from app.backend import commands as C

    session = engine.sessions.open()
    events: list[dict[str, Any]] = []
    max_bytes = engine.config.duplex_session.max_message_bytes
    try:
        for step in steps:
            if step == "ACK_LAST_RESPONSE":
                rid = [e for e in events if e["type"] == "response.done"][-1]["response"]["id"]
                step = {"type": "playback.ack", "response_id": rid, "played_ms": 700, "truncate": True,
                        "event_id": "evt_ack"}
            elif step == "CANCEL_ACTIVE_RESPONSE":
                created = [e for e in events if e["type"] == "response.created"]
                step = {"type": "response.cancel", "event_id": "evt_cancel",
                        **({"response_id": created[-1]["response"]["id"]} if created else {})}
            raw = step if isinstance(step, str) else json.dumps(step)
            try:
                session.submit(C.decode_command(raw, max_bytes=max_bytes))
            except C.ProtocolError as err:
                session.reject(err)
            await _settle(session)
            _drain(session, events)
            if session.closed:
                break
    finally:
        if not session.closed:
            session.submit(C.CloseSession(type="session.close"))
        await session.wait_closed()
        _drain(session, events)
    return events


def normalise(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stable form of an event stream (see the module docstring)."""
    names: dict[str, str] = {}

    def name(m: re.Match[str]) -> str:
        raw = m.group(0)
        if raw not in names:
            kind = raw.split("_")[0].split("-")[0]
            names[raw] = f"<{kind} {sum(1 for v in names.values() if v.startswith('<' + kind + ' ')) + 1}>"
        return names[raw]

    def walk(obj: Any, key: str = "") -> Any:
        if isinstance(obj, dict):
            return {k: walk(v, k) for k, v in obj.items() if k not in WALL_CLOCK_KEYS}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        if isinstance(obj, str):
            if key in ("delta", "audio") and len(obj) > 64:
                return f"<{len(base64.b64decode(obj)) // 2} samples>"
            return _ID.sub(name, obj)
        return obj

    return [walk(e) for e in events]


ASR_EVENT = "conversation.item.input_audio_transcription.completed"

_FINAL_MARK = re.compile(r"[.!?]+$")


def across_cpus(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``stream`` with the sentence-final mark of each input transcription made ``.``: Whisper picks
    it from near-equal scores, and another CPU's float kernels may pick another (an AMD EPYC hears
    the barge-in's "Wait, stop." where the recording machine, an Intel Xeon, heard "Wait, stop!").
    Everything else, the words included, stays exact."""
    out = []
    for e in stream:
        if e.get("type") == ASR_EVENT and isinstance(e.get("transcript"), str):
            e = {**e, "transcript": _FINAL_MARK.sub(".", e["transcript"])}
        out.append(e)
    return out


async def record_all(engine: Any, cache: Path) -> dict[str, list[dict[str, Any]]]:
    """Run every script; returns name -> normalised stream."""
    return {name: normalise(await run_script(engine, steps)) for name, steps in scripts(cache).items()}


def golden_path(name: str) -> Path:
    """Where the golden stream of script ``name`` is stored."""
    return GOLDEN_DIR / f"{name}.jsonl"


def write_golden(name: str, stream: list[dict[str, Any]]) -> None:
    """Write one golden stream (one JSON object per line)."""
    golden_path(name).write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in stream))


def read_golden(name: str) -> list[dict[str, Any]]:
    """Read one golden stream."""
    return [json.loads(line) for line in golden_path(name).read_text().splitlines() if line.strip()]


GOLDEN_TURN_POLICY = {"detector": "silence", "resume_window_ms": 0}
"""The turn policy the goldens were recorded with (the VAD silence timer), whatever the default."""


def golden_config(config: Any) -> Any:
    """``config`` with :data:`GOLDEN_TURN_POLICY`."""
    from app.config import parse_deploy_config

    data = config.model_dump(exclude_none=True)
    data["turn_policy"] = {**data["turn_policy"], **GOLDEN_TURN_POLICY}
    return parse_deploy_config(data)


async def _main() -> None:
    import tempfile

    from app.backend.engine import Engine
    from app.backend.models.tiny.family import load_tiny_family
    from app.config import load_deploy_config

    engine = Engine(golden_config(load_deploy_config()), load_tiny_family())
    await engine.start()
    try:
        streams = await record_all(engine, Path(tempfile.gettempdir()) / "omni-golden-speech")
    finally:
        await engine.stop()
    for name, stream in streams.items():
        write_golden(name, stream)
        print(f"{name}: {len(stream)} events")


if __name__ == "__main__":
    asyncio.run(_main())
