"""Realtime duplex demo: stream a WAV (and optionally a video) through ``/v1/realtime``.

Mirrors vLLM-Omni's ``examples/online_serving/minicpmo/realtime_duplex_demo.py``:
configure -> stream (paced like a microphone, camera frames on unit boundaries) -> ack playback
-> commit -> await ``input_audio_buffer.committed`` -> await a post-commit decision
(``response.listen`` or a non-cancelled ``response.done``; then the ``response.done`` of any
response still in flight) -> ack playback -> close.

Files written to ``output_dir``:

* ``output.pcm`` — output speech, 24 kHz mono PCM16, appended live as deltas arrive;
* ``output.wav`` — the same audio as a WAV file;
* ``events.jsonl`` — every server event, one JSON object a line, each with
  ``_client_received_at_s`` (client ``time.monotonic()`` seconds at receipt);
* ``result.json`` — the summary returned by :func:`run_realtime_demo` (keys below);
* ``frames/frame_NNNN.jpg`` and ``frames/stack_NNNN.jpg`` — camera frames sent (video input).

``result.json``: ``ok`` (session created and closed, no ``error`` event, a decision seen, and
audio when ``require_audio``), ``reason`` (why not, one line; None when ok), ``protocol_ok``
(a session was created and no invariant was violated: nothing connected is not "protocol ok"), ``model_decision``
(``speak`` if any response finished non-cancelled with output, else ``listen`` if the model
listened, else ``None``), ``post_commit``, ``transcript``/``transcripts``, ``response_ids``,
``counts`` (events per GA type), ``audio_bytes``, ``audio_duration_s``, ``errors`` (server
``error`` events plus client-side ``client.*`` entries), ``latency`` (see
:mod:`app.client.latency`: commit-origin ``ttft_ms``/``ttfp_ms``/``rtf`` and speech-end-origin
``speech_end_ms``/``stream_ttft_ms``/``stream_ttfp_ms``/``stream_rtf``), ``timing`` (collector
cadence summary), ``input`` and ``invariant_violations``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from app.client.collector import EventCollector
from app.client.config import AudioFormat, SessionConfig, api_key_from_env
from app.client.duplex import DuplexClient
from app.client.invariants import check_invariants, failure_reason
from app.client.latency import commit_latency, detect_speech_end_ms, speech_end_latency
from app.client.protocol import (
    AUDIO_DELTA,
    DuplexClientError,
    DuplexProtocolError,
    DuplexSessionClosedError,
    event_response_id,
    event_type,
)
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ


@dataclass
class DemoInput:
    """Prepared input: 16 kHz PCM16 audio plus optional base64 JPEG frames (one per unit)."""

    pcm16: bytes
    frames: list[str] = field(default_factory=list)
    composites: list[str | None] = field(default_factory=list)


def load_input(
    input_wav: str | Path | None,
    input_video: str | Path | None,
    *,
    video_fps: float,
    stack_frames: int,
    frames_dir: Path | None = None,
    frame_max_side: int = 0,
) -> DemoInput:
    """Decode the demo input.

    Audio: ``input_wav`` (any format :func:`app.media.decode_audio` reads), else the video's
    audio track, resampled to ``INPUT_SAMPLE_RATE_HZ`` mono PCM16. Video: frames sampled at
    ``video_fps`` (frame ``k`` rides unit ``k``, so use ``1000 / unit_ms`` fps to keep camera and
    audio in step); with ``stack_frames = N > 1`` the video is sampled at ``N * video_fps`` and
    the ``N - 1`` samples after each base frame are tiled into one composite
    (:func:`app.media.stack_frames`). ``frame_max_side > 0`` downscales each frame so its longer
    side is at most that many pixels (the guide's ``--frame-max-side``; 0 keeps the capture size).
    Frames are JPEG-encoded and, when ``frames_dir`` is given, saved there.

    Raises:
        ValueError: neither input given, ``stack_frames < 1`` or ``video_fps <= 0``.
        app.media.MediaError: undecodable media.
        OSError: unreadable files.
    """
    from app.media import (
        decode_audio,
        demux_video,
        encode_jpeg,
        fit_within,
        float_to_pcm16,
    )
    from app.media import stack_frames as tile_frames

    if input_wav is None and input_video is None:
        raise ValueError("need input_wav or input_video")
    if stack_frames < 1 or video_fps <= 0:
        raise ValueError("stack_frames must be >= 1 and video_fps > 0")
    prepared = DemoInput(pcm16=b"")
    audio = None
    if input_video is not None:
        video = demux_video(
            Path(input_video), fps=video_fps * stack_frames, audio_rate=INPUT_SAMPLE_RATE_HZ
        )
        audio = video.audio
        frames = video.frames
        if frame_max_side > 0:
            frames = [fit_within(f, frame_max_side) if max(f.shape[:2]) > frame_max_side else f for f in frames]
        for start in range(0, len(frames), stack_frames):
            group = frames[start : start + stack_frames]
            prepared.frames.append(
                _jpeg_b64(encode_jpeg(group[0]), frames_dir, f"frame_{len(prepared.frames):04d}")
            )
            composite = None
            if len(group) > 1:
                name = f"stack_{len(prepared.composites):04d}"
                composite = _jpeg_b64(encode_jpeg(tile_frames(group[1:])), frames_dir, name)
            prepared.composites.append(composite)
    if input_wav is not None:
        audio = decode_audio(Path(input_wav).read_bytes(), target_rate=INPUT_SAMPLE_RATE_HZ)
    prepared.pcm16 = float_to_pcm16(audio) if audio is not None else b""
    return prepared


def _jpeg_b64(jpeg: bytes, directory: Path | None, name: str) -> str:
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.jpg").write_bytes(jpeg)
    return base64.b64encode(jpeg).decode("ascii")


def _ref_audio_value(ref_audio: str | Path | None) -> str | None:
    """A data URL for ``ref_audio`` (a path), or ``ref_audio`` itself if already a data URL."""
    if ref_audio is None:
        return None
    if isinstance(ref_audio, str) and ref_audio.startswith("data:"):
        return ref_audio
    return "data:audio/wav;base64," + base64.b64encode(Path(ref_audio).read_bytes()).decode("ascii")


async def _follow_audio(client: DuplexClient, sink: BinaryIO) -> None:
    """Append each audio delta's PCM to ``sink`` as it arrives, until the session ends."""
    cursor = 0
    events = client.collector.events
    while True:
        while cursor < len(events):
            event = events[cursor]
            cursor += 1
            if event_type(event) == AUDIO_DELTA and event.get("delta"):
                sink.write(base64.b64decode(event["delta"]))
                sink.flush()
        if client.closed:
            return
        with contextlib.suppress(DuplexSessionClosedError, TimeoutError):
            await client.wait_for(lambda _e: True, 3600.0, after_index=cursor, raise_on_error=False)


ACK_INTERVAL_S = 0.25
"""How often the demo acks playback while it streams (vLLM-Omni's Omni-DuplexEval runner acks every
~250 ms while audio plays)."""


async def _ack_collected_playback(client: DuplexClient, acked: dict[str, float],
                                  skip: frozenset[str] = frozenset()) -> None:
    """Ack every response's received audio as played (0 ms for a silent, unfinished one).

    ``acked`` (response id -> ms acked) skips responses already acked at their full length, and
    ``skip`` names responses that may no longer be acked: an ack of an earlier response after a later
    turn was committed is refused by the server (``playback_ack_too_late``)."""
    collector = client.collector
    output_format = AudioFormat("pcm16", collector.output_sample_rate_hz)
    for rid in list(collector.response_ids):
        if rid in skip:
            continue
        pcm = collector.audio_bytes(rid)
        if not pcm and collector.response_is_done(rid):
            continue
        played = output_format.duration_ms(len(pcm))
        if acked.get(rid) == played and collector.response_is_done(rid):
            continue
        acked[rid] = played
        await client.ack_playback(rid, played_ms=played)


def _is_decision(event: dict[str, Any]) -> bool:
    kind = event_type(event)
    if kind == "response.listen":
        return True
    response = event.get("response")
    status = response.get("status") if isinstance(response, dict) else None
    return kind == "response.done" and status != "cancelled"


async def _converse(
    client: DuplexClient,
    prepared: DemoInput,
    *,
    chunk_ms: int,
    realtime: bool,
    timeout_s: float,
    post: dict[str, Any],
    errors: list[dict[str, Any]],
) -> int:
    """Stream, commit and await the decision; returns the number of appends that carried frames."""
    acked: dict[str, float] = {}

    async def ack_while_streaming() -> None:  # a client acks as it plays, not only at the end
        while True:
            await asyncio.sleep(ACK_INTERVAL_S)
            await _ack_collected_playback(client, acked)

    acker = asyncio.create_task(ack_while_streaming())
    try:
        frames_sent = await client.stream_pcm(
            prepared.pcm16,
            chunk_ms=chunk_ms,
            realtime=realtime,
            video_frames=prepared.frames or None,
            stacked_video_frames=prepared.composites or None,
        )
    finally:
        acker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acker
    await _ack_collected_playback(client, acked)
    commit_index = len(client.collector.events)
    before_commit = frozenset(client.collector.response_ids)  # answers to turns before the commit
    await client.commit()
    deadline = time.monotonic() + timeout_s
    stage = "input_audio_buffer.committed"
    try:
        committed = await client.wait_for(stage, timeout_s, after_index=commit_index)
        post["input_committed_event_index"] = client.collector.events.index(committed)
        stage = "post-commit decision"
        # Only events after ``committed`` decide: listens of units the server closed before
        # the commit can still arrive after it was sent (appends are processed in order).
        decision = await client.wait_for(
            _is_decision,
            deadline - time.monotonic(),
            after_index=post["input_committed_event_index"] + 1,
        )
        post["decision"] = "listen" if event_type(decision) == "response.listen" else "speak"
        stage = "response.done of in-flight responses"
        for rid in list(client.collector.response_ids):
            if not client.collector.response_is_done(rid):
                await client.wait_for(
                    lambda e, rid=rid: (
                        event_type(e) == "response.done" and event_response_id(e) == rid
                    ),
                    deadline - time.monotonic(),
                    after_index=commit_index,
                )
    except TimeoutError:
        errors.append({"type": "client.timeout", "stage": stage, "timeout_s": timeout_s})
    except DuplexProtocolError as exc:  # the error event itself is already in the collector
        post["stopped_by_error"] = exc.code or exc.message
    await _ack_collected_playback(client, acked, skip=before_commit)
    return frames_sent


def _model_decision(collector: EventCollector) -> str | None:
    for rid in collector.response_ids:
        done = collector.first("response.done", response_id=rid)
        status = (done or {}).get("response", {}).get("status")
        if (
            done
            and status != "cancelled"
            and (collector.audio_bytes(rid) or collector.response_text(rid))
        ):
            return "speak"
    return "listen" if collector.count("response.listen") else None


async def run_realtime_demo_async(
    url: str,
    input_wav: str | Path | None,
    output_dir: str | Path,
    *,
    model: str | None = None,
    input_video: str | Path | None = None,
    video_fps: float = 1.0,
    stack_frames: int = 1,
    frame_max_side: int = 0,
    ref_audio: str | Path | None = None,
    chunk_ms: int = 200,
    realtime: bool = True,
    timeout_s: float = 60.0,
    instructions: str | None = None,
    require_audio: bool = False,
    speech_end_ms: float | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Run the demo inside a running event loop; see :func:`run_realtime_demo`."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prepared = load_input(
        input_wav,
        input_video,
        video_fps=video_fps,
        stack_frames=stack_frames,
        frames_dir=out / "frames" if input_video is not None else None,
        frame_max_side=frame_max_side,
    )
    if speech_end_ms is None:
        speech_end_ms = detect_speech_end_ms(prepared.pcm16, INPUT_SAMPLE_RATE_HZ)
    config = SessionConfig(instructions=instructions, ref_audio=_ref_audio_value(ref_audio))
    collector = EventCollector(output_sample_rate_hz=OUTPUT_SAMPLE_RATE_HZ)
    client = DuplexClient(url, model, config, collector=collector, api_key=api_key)
    errors: list[dict[str, Any]] = []
    post: dict[str, Any] = {
        "input_committed_event_index": None,
        "decision": None,
        "decision_required": True,
    }
    frames_sent = 0
    with (out / "output.pcm").open("wb") as sink:
        try:
            async with client:
                follower = asyncio.create_task(_follow_audio(client, sink))
                try:
                    frames_sent = await _converse(
                        client,
                        prepared,
                        chunk_ms=chunk_ms,
                        realtime=realtime,
                        timeout_s=timeout_s,
                        post=post,
                        errors=errors,
                    )
                finally:
                    await client.close()
                    await follower
        except (DuplexClientError, TimeoutError) as exc:
            errors.append(
                {"type": "client.error", "error": type(exc).__name__, "message": str(exc)}
            )
    return _write_results(
        out,
        client,
        prepared,
        post=post,
        errors=errors,
        frames_sent=frames_sent,
        chunk_ms=chunk_ms,
        realtime=realtime,
        speech_end_ms=speech_end_ms,
        require_audio=require_audio,
        video={
            "input_video": str(input_video) if input_video else None,
            "video_fps": video_fps,
            "stack_frames": stack_frames,
            "frame_max_side": frame_max_side,
        },
    )


def _write_results(
    out: Path,
    client: DuplexClient,
    prepared: DemoInput,
    *,
    post: dict[str, Any],
    errors: list[dict[str, Any]],
    frames_sent: int,
    chunk_ms: int,
    realtime: bool,
    speech_end_ms: float | None,
    require_audio: bool,
    video: dict[str, Any],
) -> dict[str, Any]:
    from app.media import encode_wav, pcm16_to_float

    collector = client.collector
    audio = collector.audio_bytes()
    (out / "output.wav").write_bytes(
        encode_wav(pcm16_to_float(audio), collector.output_sample_rate_hz)
    )
    with (out / "events.jsonl").open("w", encoding="utf-8") as handle:
        for event in collector.events:
            handle.write(json.dumps(event, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for event in collector.events:
        counts[event_type(event)] = counts.get(event_type(event), 0) + 1
    all_errors = collector.errors() + errors
    violations = check_invariants(collector.events)
    post["response_listen_count"] = counts.get("response.listen", 0)
    post["response_done_count"] = counts.get("response.done", 0)
    decision = _model_decision(collector)
    ok = bool(
        counts.get("session.created")
        and counts.get("session.closed")
        and not all_errors
        and post["decision"] is not None
        and (audio or not require_audio)
    )
    connected = bool(counts.get("session.created"))
    result: dict[str, Any] = {
        "ok": ok,
        "reason": None if ok else failure_reason(counts, all_errors, post, bool(audio), require_audio),
        "protocol_ok": connected and not violations,
        "url": client.url,
        "session_id": client.session_id,
        "model_decision": decision,
        "post_commit": post,
        "transcript": collector.response_text(),
        "transcripts": {rid: collector.response_text(rid) for rid in collector.response_ids},
        "response_ids": list(collector.response_ids),
        "counts": counts,
        "audio_bytes": len(audio),
        "audio_duration_s": round(collector.audio_duration_ms() / 1000.0, 4),
        "output_sample_rate_hz": collector.output_sample_rate_hz,
        "errors": all_errors,
        "latency": {
            **commit_latency(collector, client.commit_sent_at_s),
            **speech_end_latency(collector, client.appends, speech_end_ms, realtime=realtime),
        },
        "timing": collector.timing_summary(input_committed_at_s=client.commit_sent_at_s),
        "input": {
            "audio_duration_ms": AudioFormat("pcm16", INPUT_SAMPLE_RATE_HZ).duration_ms(
                len(prepared.pcm16)
            ),
            "chunk_ms": chunk_ms,
            "realtime": realtime,
            "frames": len(prepared.frames),
            "appends_with_frames": frames_sent,
            "unit_ms": client.unit_ms,
            **video,
        },
        "invariant_violations": violations,
    }
    (out / "result.json").write_text(
        json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return result


def run_realtime_demo(
    url: str,
    input_wav: str | Path | None,
    output_dir: str | Path,
    *,
    model: str | None = None,
    input_video: str | Path | None = None,
    video_fps: float = 1.0,
    stack_frames: int = 1,
    frame_max_side: int = 0,
    ref_audio: str | Path | None = None,
    chunk_ms: int = 200,
    realtime: bool = True,
    timeout_s: float = 60.0,
    instructions: str | None = None,
    require_audio: bool = False,
    speech_end_ms: float | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Stream one input through a duplex session and write the demo's files (blocking).

    Must be called outside a running event loop; inside one, await
    :func:`run_realtime_demo_async` (same arguments).

    Args:
        url: server base or realtime URL (``http://127.0.0.1:8000`` works).
        input_wav: input speech (any decodable audio; resampled to 16 kHz mono); may be
            ``None`` when ``input_video`` supplies the audio.
        output_dir: created if missing; receives the files listed in the module docstring.
        model: served model name (query + ``session.model``); ``None`` leaves it out.
        input_video: optional video: camera frames, and the audio when ``input_wav`` is ``None``.
        video_fps: base frames per second; frame ``k`` rides unit ``k``.
        stack_frames: ``N``; ``N > 1`` adds one composite of ``N - 1`` sub-frames per unit.
        frame_max_side: downscale frames to this longer side, px (0 = capture size).
        ref_audio: reference voice, a WAV path or a data URL.
        chunk_ms: append length, ms.
        realtime: pace appends like a microphone (needed for the ``stream_*`` figures).
        timeout_s: limit for the post-commit phase (committed, decision, in-flight done), s.
        instructions: session instructions.
        require_audio: ``ok`` only if output audio arrived.
        speech_end_ms: end of the user's speech on the input's clock, ms; default:
            :func:`app.client.latency.detect_speech_end_ms` on the input audio.
        api_key: a keyed server's key (sent as ``Authorization: Bearer``).

    Returns:
        The ``result.json`` dict. Server/transport failures do not raise: they end up in
        ``errors`` with ``ok: false``.

    Raises:
        ValueError: bad arguments (no input, bad URL scheme).
        app.media.MediaError, OSError: unreadable input files.
    """
    return asyncio.run(
        run_realtime_demo_async(
            url,
            input_wav,
            output_dir,
            model=model,
            input_video=input_video,
            video_fps=video_fps,
            stack_frames=stack_frames,
            frame_max_side=frame_max_side,
            ref_audio=ref_audio,
            chunk_ms=chunk_ms,
            realtime=realtime,
            timeout_s=timeout_s,
            instructions=instructions,
            require_audio=require_audio,
            speech_end_ms=speech_end_ms,
            api_key=api_key,
        )
    )


def build_arg_parser() -> argparse.ArgumentParser:
    """The ``realtime-demo`` command line (flags follow vLLM-Omni's demo)."""
    parser = argparse.ArgumentParser(
        prog="realtime-demo", description="Stream a WAV/video through WS /v1/realtime?duplex=1."
    )
    parser.add_argument(
        "--url", default="http://127.0.0.1:8000", help="server base or realtime URL"
    )
    parser.add_argument("--model", default=None, help="served model name")
    parser.add_argument(
        "--input-wav", type=Path, default=None, help="input speech (any audio format)"
    )
    parser.add_argument(
        "--input-video", type=Path, default=None, help="input video (frames + its audio)"
    )
    parser.add_argument(
        "--video-fps", type=float, default=1.0, help="base frames per second (default 1)"
    )
    parser.add_argument(
        "--stack-frames", type=int, default=1, help="N: tile N-1 sub-frames per unit"
    )
    parser.add_argument(
        "--frame-max-side", type=int, default=0, help="downscale frames to this longer side, px (0 = keep)"
    )
    parser.add_argument("--ref-audio", type=Path, default=None, help="reference voice WAV")
    parser.add_argument("--output-dir", type=Path, default=Path("out/realtime_demo"))
    parser.add_argument("--chunk-ms", type=int, default=200, help="append size, ms")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="post-commit wait limit, s")
    parser.add_argument(
        "--no-realtime-pacing", action="store_true", help="send input as fast as possible"
    )
    parser.add_argument(
        "--require-audio", action="store_true", help="ok only if output audio arrived"
    )
    parser.add_argument("--instructions", default=None, help="session instructions")
    parser.add_argument(
        "--speech-end-ms", type=float, default=None, help="end of speech in the input, ms"
    )
    parser.add_argument("--api-key", default=None,
                        help="a keyed server's key (default: $OPENAI_API_KEY, else the first of $OMNI_API_KEY)")
    return parser


def main_realtime_demo(argv: Sequence[str] | None = None) -> int:
    """CLI entry: run the demo, print a one-line JSON summary; exit code 0 iff ``ok`` (2: bad arguments or input)."""
    from app.media import MediaError

    parser = build_arg_parser()
    args = parser.parse_args(argv)
    if args.input_wav is None and args.input_video is None:
        parser.error("one of --input-wav / --input-video is required")
    try:  # an unreadable or undecodable input file is a usage error (exit 2), not a traceback
        result = run_realtime_demo(
            args.url, args.input_wav, args.output_dir, model=args.model, input_video=args.input_video,
            video_fps=args.video_fps, stack_frames=args.stack_frames, frame_max_side=args.frame_max_side,
            ref_audio=args.ref_audio, chunk_ms=args.chunk_ms, realtime=not args.no_realtime_pacing,
            timeout_s=args.timeout_s, instructions=args.instructions, require_audio=args.require_audio,
            speech_end_ms=args.speech_end_ms, api_key=args.api_key or api_key_from_env())
    except (FileNotFoundError, IsADirectoryError, PermissionError, MediaError) as exc:
        parser.error(str(exc))
    summary = {key: result[key] for key in ("ok", "reason", "protocol_ok", "model_decision", "transcript",
                                            "audio_duration_s")}
    summary["latency"] = {k: result["latency"][k]
                          for k in ("ttft_ms", "ttfp_ms", "rtf", "stream_ttft_ms", "stream_ttfp_ms", "stream_rtf")}
    summary["output_dir"] = str(args.output_dir)
    print(json.dumps(summary, ensure_ascii=False))
    if not result["ok"]:
        print(f"realtime-demo failed: {result['reason']}", file=sys.stderr)
    return 0 if result["ok"] else 1
