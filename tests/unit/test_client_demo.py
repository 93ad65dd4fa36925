"""Unit tests of the realtime demo (app.client.demo) and its latency helpers.

The demo runs against a scripted loopback fake scripted_server (the far edge for a client unit test):
it answers the handshake, replies to a commit with one speaking response, acknowledges playback
and closes. No model, no app scripted_server.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile as sf
import websockets

from app.client.collector import EventCollector
from app.client.config import unit_boundary_ms
from app.client.demo import (
    build_arg_parser,
    main_realtime_demo,
    run_realtime_demo_async,
)
from app.client.duplex import AppendRecord
from app.client.invariants import check_invariants, load_events_jsonl
from app.client.latency import commit_latency, detect_speech_end_ms, speech_end_latency
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ

OUT_CHUNK = b"\x10\x00" * (OUTPUT_SAMPLE_RATE_HZ // 10)  # 100 ms of output PCM16


class ScriptedServer:
    """Records client events; answers a commit with one speaking response (GA names)."""

    def __init__(
        self, *, texts: tuple[str, ...] = ("Hello ", "world."), fail_commit: bool = False
    ) -> None:
        self.received: list[dict[str, Any]] = []
        self.texts = texts
        self.fail_commit = fail_commit
        self.url = ""
        self._seq = 0
        self._server: Any = None

    async def start(self) -> None:
        self._server = await websockets.serve(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _send(self, ws: Any, **event: Any) -> None:
        self._seq += 1
        await ws.send(json.dumps({**event, "server_event_seq": self._seq}))

    async def _handle(self, ws: Any) -> None:
        async for raw in ws:
            event = json.loads(raw)
            self.received.append(event)
            kind = event["type"]
            session = {"id": "duplex-1", "epoch": 0, "capabilities": {"chunk_period_ms": 1000}}
            if kind == "session.update":
                await self._send(ws, type="session.created", session=session)
                await self._send(ws, type="session.updated", session=session)
            elif kind == "input_audio_buffer.commit" and self.fail_commit:
                error = {
                    "type": "invalid_request_error",
                    "code": "input_audio_buffer_empty",
                    "message": "empty",
                }
                await self._send(ws, type="error", error=error)
            elif kind == "input_audio_buffer.commit":
                await self._send(
                    ws, type="input_audio_buffer.committed", item_id="item_u1", epoch=0
                )
                await self._respond(ws, "resp_1")
            elif kind == "playback.ack":
                await self._send(
                    ws, type="playback.acknowledged", event={"played_ms": event["played_ms"]}
                )
            elif kind == "session.close":
                await self._send(
                    ws, type="session.closed", session_id="duplex-1", reason="client_close"
                )
                return

    async def _respond(self, ws: Any, rid: str) -> None:
        meta = {"epoch": 0}
        await self._send(
            ws,
            type="response.created",
            response_id=rid,
            response={"id": rid, "status": "in_progress"},
        )
        await self._send(
            ws, type="response.speak", response_id=rid, item_id=f"item_{rid}", metadata=meta
        )
        for text in self.texts:
            audio = base64.b64encode(OUT_CHUNK).decode()
            await self._send(
                ws, type="response.output_audio.delta", response_id=rid, delta=audio, metadata=meta
            )
            await self._send(
                ws, type="response.output_audio_transcript.delta", response_id=rid, delta=text
            )
        await self._send(ws, type="response.output_audio.done", response_id=rid)
        transcript = "".join(self.texts)
        await self._send(
            ws, type="response.output_audio_transcript.done", response_id=rid, transcript=transcript
        )
        await self._send(
            ws, type="response.done", response={"id": rid, "status": "completed", "metadata": meta}
        )
        await self._send(ws, type="rate_limits.updated", rate_limits=[])


@pytest.fixture
async def scripted_server() -> AsyncIterator[ScriptedServer]:
    fake = ScriptedServer()
    await fake.start()
    yield fake
    await fake.stop()


def write_speech_wav(
    path: Path, tone_ms: int, total_ms: int, rate: int = INPUT_SAMPLE_RATE_HZ
) -> Path:
    """A 440 Hz tone for ``tone_ms`` then silence up to ``total_ms``."""
    t = np.arange(rate * total_ms // 1000) / rate
    audio = 0.3 * np.sin(2 * np.pi * 440 * t)
    audio[rate * tone_ms // 1000 :] = 0.0
    sf.write(path, audio.astype(np.float32), rate, subtype="PCM_16")
    return path


def write_video(path: Path, seconds: int, fps: int = 10) -> Path:
    """A small mpeg4 clip whose frame brightness rises with time (no audio track)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(seconds * fps):
            rgb = np.full((48, 64, 3), (i * 5) % 256, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


# -- speech end and latency helpers -----------------------------------------------------------


def test_detect_speech_end_ms(tmp_path: Path) -> None:
    rate = INPUT_SAMPLE_RATE_HZ
    tone = (0.3 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate) * 32767).astype("<i2")
    pcm = np.concatenate([tone[: rate * 7 // 10], np.zeros(rate // 2, dtype="<i2")]).tobytes()
    assert detect_speech_end_ms(pcm) == pytest.approx(700, abs=20)
    assert detect_speech_end_ms(np.zeros(rate, dtype="<i2").tobytes()) is None
    assert detect_speech_end_ms(b"") is None
    quiet_hiss = (np.random.default_rng(0).normal(0, 1e-4, rate) * 32767).astype("<i2").tobytes()
    assert detect_speech_end_ms(quiet_hiss) is None  # below the absolute floor


def _collector_with(events: list[tuple[float, dict[str, Any]]]) -> EventCollector:
    collector = EventCollector()
    for at, event in events:
        collector.add(event, received_at_s=at)
    return collector


def test_commit_and_speech_end_latency() -> None:
    audio = base64.b64encode(OUT_CHUNK * 10).decode()  # 1 s of output
    collector = _collector_with(
        [
            (10.0, {"type": "response.created", "response": {"id": "r"}}),
            (10.2, {"type": "response.output_audio.delta", "response_id": "r", "delta": audio}),
            (
                10.3,
                {
                    "type": "response.output_audio_transcript.delta",
                    "response_id": "r",
                    "delta": "Hi",
                },
            ),
            (10.5, {"type": "response.done", "response": {"id": "r", "status": "completed"}}),
        ]
    )
    commit = commit_latency(collector, commit_sent_at_s=10.1)
    assert commit["ttfp_ms"] == pytest.approx(100.0) and commit["ttft_ms"] == pytest.approx(200.0)
    assert commit["response_generation_ms"] == pytest.approx(500.0) and commit[
        "rtf"
    ] == pytest.approx(0.5)
    assert commit["audio_duration_s"] == 1.0 and commit["text_stream_ms"] == pytest.approx(200.0)
    appends = [AppendRecord("a", 0, 200, 9.9, 0), AppendRecord("b", 200, 400, 10.05, 0)]
    stream = speech_end_latency(collector, appends, 250.0, realtime=True)
    assert stream["speech_end_append_audio_end_ms"] == 400
    assert stream["stream_ttfp_ms"] == pytest.approx(150.0) and stream[
        "stream_ttft_ms"
    ] == pytest.approx(250.0)
    assert stream["stream_rtf"] == pytest.approx(0.15) and stream["stream_audio_duration_s"] == 1.0
    paced_off = speech_end_latency(collector, appends, 250.0, realtime=False)
    assert (
        paced_off["stream_ttfp_ms"] is None
        and "not paced" in paced_off["stream_measurement_origin"]
    )
    beyond = speech_end_latency(collector, appends, 900.0, realtime=True)
    assert (
        beyond["stream_ttfp_ms"] is None and "no speech end" in beyond["stream_measurement_origin"]
    )


# -- the demo against the scripted scripted_server ------------------------------------------------------


async def test_demo_writes_result_files(scripted_server: ScriptedServer, tmp_path: Path) -> None:
    wav = write_speech_wav(tmp_path / "in.wav", tone_ms=600, total_ms=1300)
    out = tmp_path / "out"
    result = await run_realtime_demo_async(
        scripted_server.url,
        wav,
        out,
        model="tiny",
        realtime=False,
        chunk_ms=100,
        timeout_s=5,
        instructions="hi",
    )
    assert result["ok"] is True and result["protocol_ok"] is True, result
    assert result["model_decision"] == "speak" and result["post_commit"]["decision"] == "speak"
    assert result["transcript"] == "Hello world." and result["response_ids"] == ["resp_1"]
    assert result["audio_bytes"] == 2 * len(OUT_CHUNK) and result["audio_duration_s"] == 0.2
    assert result["counts"]["response.output_audio.delta"] == 2
    assert result["latency"]["ttfp_ms"] is not None and result["latency"]["ttft_ms"] is not None
    assert result["latency"]["measurement_origin"] == "input_audio_buffer.commit send"
    assert result["latency"]["speech_end_ms"] == pytest.approx(600, abs=20)
    assert result["latency"]["stream_ttfp_ms"] is None  # not paced
    assert result["invariant_violations"] == [] and result["errors"] == []
    assert (out / "output.pcm").read_bytes() == OUT_CHUNK * 2
    data, rate = sf.read(out / "output.wav", dtype="int16")
    assert rate == OUTPUT_SAMPLE_RATE_HZ and data.tobytes() == OUT_CHUNK * 2
    events = load_events_jsonl(out / "events.jsonl")
    assert events[0]["type"] == "session.created" and events[-1]["type"] == "session.closed"
    assert all("_client_received_at_s" in e for e in events) and check_invariants(events) == []
    assert json.loads((out / "result.json").read_text())["ok"] is True
    sent = [e["type"] for e in scripted_server.received]
    assert sent[0] == "session.update" and sent[-1] == "session.close"
    assert sent.index("input_audio_buffer.commit") > sent.index("input_audio_buffer.append")
    acks = [e for e in scripted_server.received if e["type"] == "playback.ack"]
    assert acks[-1]["response_id"] == "resp_1" and acks[-1]["played_ms"] == 200
    assert scripted_server.received[0]["session"]["instructions"] == "hi"


async def test_demo_realtime_stream_latency(
    scripted_server: ScriptedServer, tmp_path: Path
) -> None:
    wav = write_speech_wav(tmp_path / "in.wav", tone_ms=300, total_ms=500)
    result = await run_realtime_demo_async(
        scripted_server.url, wav, tmp_path / "out", realtime=True, chunk_ms=100, timeout_s=5
    )
    latency = result["latency"]
    assert result["ok"] is True
    assert latency["speech_end_append_audio_end_ms"] == 300
    assert (
        latency["stream_ttfp_ms"] is not None and latency["stream_ttfp_ms"] >= 150
    )  # 200 ms of audio still to send
    assert latency["stream_rtf"] is not None and latency["stream_measurement_origin"].startswith(
        "send time"
    )


async def test_demo_records_server_error(tmp_path: Path) -> None:
    fake = ScriptedServer(fail_commit=True)
    await fake.start()
    try:
        wav = write_speech_wav(tmp_path / "in.wav", tone_ms=100, total_ms=200)
        result = await run_realtime_demo_async(
            fake.url, wav, tmp_path / "out", realtime=False, timeout_s=5
        )
    finally:
        await fake.stop()
    assert result["ok"] is False
    assert result["errors"][0]["error"]["code"] == "input_audio_buffer_empty"
    assert result["post_commit"]["stopped_by_error"] == "input_audio_buffer_empty"


async def test_demo_connection_refused_is_reported(tmp_path: Path) -> None:
    wav = write_speech_wav(tmp_path / "in.wav", tone_ms=100, total_ms=200)
    result = await run_realtime_demo_async("http://127.0.0.1:9", wav, tmp_path / "out", timeout_s=1)
    assert result["ok"] is False and result["errors"][0]["error"] == "DuplexConnectionError"
    assert (tmp_path / "out" / "result.json").exists()


async def test_demo_video_frames_and_composites(
    scripted_server: ScriptedServer, tmp_path: Path
) -> None:
    wav = write_speech_wav(tmp_path / "in.wav", tone_ms=1000, total_ms=2500)
    video = write_video(tmp_path / "in.mp4", seconds=2)
    out = tmp_path / "out"
    result = await run_realtime_demo_async(
        scripted_server.url,
        wav,
        out,
        input_video=video,
        stack_frames=3,
        realtime=False,
        chunk_ms=200,
        timeout_s=5,
    )
    assert result["ok"] is True, result
    with_frames = [
        e
        for e in scripted_server.received
        if e["type"] == "input_audio_buffer.append" and "video_frames" in e
    ]
    assert [len(e["video_frames"]) for e in with_frames] == [2, 2]
    assert (
        with_frames[0]["audio_end_ms"] >= unit_boundary_ms(0) > with_frames[0]["audio_end_ms"] - 200
    )
    assert sorted(p.name for p in (out / "frames").iterdir()) == [
        "frame_0000.jpg",
        "frame_0001.jpg",
        "stack_0000.jpg",
        "stack_0001.jpg",
    ]
    assert (
        base64.b64decode(with_frames[1]["video_frames"][0])
        == (out / "frames" / "frame_0001.jpg").read_bytes()
    )
    assert result["input"]["appends_with_frames"] == 2 and result["input"]["stack_frames"] == 3


def test_cli_flags() -> None:
    args = build_arg_parser().parse_args(
        [
            "--url",
            "http://h:1",
            "--model",
            "m",
            "--input-wav",
            "a.wav",
            "--input-video",
            "v.mp4",
            "--video-fps",
            "2",
            "--stack-frames",
            "5",
            "--ref-audio",
            "r.wav",
            "--output-dir",
            "o",
            "--chunk-ms",
            "100",
            "--timeout-s",
            "9",
            "--no-realtime-pacing",
            "--require-audio",
            "--instructions",
            "be brief",
            "--speech-end-ms",
            "1200",
        ]
    )
    assert (args.url, args.model, args.video_fps, args.stack_frames, args.chunk_ms) == (
        "http://h:1",
        "m",
        2.0,
        5,
        100,
    )
    assert args.no_realtime_pacing and args.require_audio and args.instructions == "be brief"
    assert args.input_wav == Path("a.wav") and args.speech_end_ms == 1200.0


async def test_cli_entry_runs_demo(
    scripted_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wav = write_speech_wav(tmp_path / "in.wav", tone_ms=200, total_ms=400)
    argv = [
        "--url",
        scripted_server.url,
        "--input-wav",
        str(wav),
        "--output-dir",
        str(tmp_path / "o"),
        "--no-realtime-pacing",
    ]
    code = await asyncio.to_thread(main_realtime_demo, argv)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["ok"] is True and summary["transcript"] == "Hello world."
    assert set(summary["latency"]) == {
        "ttft_ms",
        "ttfp_ms",
        "rtf",
        "stream_ttft_ms",
        "stream_ttfp_ms",
        "stream_rtf",
    }
