"""Duplex session lifecycle and limits: unit length, context eviction, reaper, input formats, demo CLI."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import av
import httpx
import numpy as np
import pytest
import soundfile as sf
import websockets
from PIL import Image, ImageDraw, ImageFont

from app.client.config import SessionConfig
from app.client.demo import run_realtime_demo_async
from app.client.duplex import DuplexClient
from app.client.invariants import check_invariants, load_events_jsonl
from app.constants import INPUT_SAMPLE_RATE_HZ
from app.media import encode_wav, float_to_pcm16, resample, to_data_url
from app.media.g711 import ulaw_encode
from tests.integration.rt_helpers import assert_invariants, silence, types, wav_pcm16

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def ask(c: DuplexClient, pcm: bytes, *, realtime: bool = False, timeout_s: float = 40) -> dict:
    """Stream a question, commit, return the completed response.done."""
    await c.stream_pcm(pcm, chunk_ms=100, realtime=realtime)
    await c.commit()
    return await c.wait_for("response.done", timeout_s=timeout_s)


async def test_half_second_units_are_advertised_and_used(make_server, question_wav):
    srv = make_server(duplex_session={"chunk_period_ms": 500})
    async with DuplexClient(srv.ws_url) as c:
        assert c.session["capabilities"]["chunk_period_ms"] == 500
        done = await ask(c, wav_pcm16(question_wav))
        units = [e for e in c.collector.events if e["type"] == "session.unit_metrics"]
    audio_ms = len(wav_pcm16(question_wav)) / 2 / INPUT_SAMPLE_RATE_HZ * 1000
    # unit 0 closes at 530 ms, then one unit every 500 ms
    assert len(units) == int((audio_ms - 530) // 500) + 1
    assert "paris" in done["response"]["output"][0]["content"][0]["transcript"].lower()


async def test_long_session_evicts_oldest_units_and_keeps_answering(make_server, question_wav):
    srv = make_server(duplex_session={"max_context_tokens": 400, "context_watermark_ratio": 0.5})
    async with DuplexClient(srv.ws_url) as c:
        first = await ask(c, wav_pcm16(question_wav))
        assert first["response"]["status"] == "completed"
        await c.stream_pcm(silence(25), chunk_ms=500, realtime=False)  # ~25 listen units: far past 200 tokens
        second = await ask(c, wav_pcm16(question_wav))
        ev = c.collector.events
    assert_invariants(ev, "eviction")
    deleted = {e["item_id"] for e in ev if e["type"] == "conversation.item.deleted"}
    assert f"item_{first['response_id']}" in deleted  # the first answer left the context
    metrics = [e for e in ev if e["type"] == "session.unit_metrics"]
    assert max(m["context_tokens"] for m in metrics) <= 400
    assert second["response"]["status"] == "completed"
    assert "session.closed" not in types(ev[:-1])


async def test_context_length_exceeded_only_when_nothing_can_be_dropped(make_server, question_wav):
    srv = make_server(duplex_session={"max_context_tokens": 120})
    ref = to_data_url(encode_wav(np.zeros(20 * INPUT_SAMPLE_RATE_HZ, np.float32), INPUT_SAMPLE_RATE_HZ), "audio/wav")
    c = DuplexClient(srv.ws_url, config=SessionConfig(ref_audio=ref))
    await c.connect()  # the 20 s reference voice alone is ~258 tokens > 120
    await c.stream_pcm(silence(1.5), chunk_ms=100, realtime=False)
    err = await c.wait_for(lambda e: e["type"] == "error", timeout_s=10, after_index=0, raise_on_error=False)
    assert err["error"]["code"] == "context_length_exceeded"
    closed = await c.wait_for(lambda e: e["type"] == "session.closed", timeout_s=10, after_index=0,
                              raise_on_error=False)
    assert closed["reason"] == "context_length_exceeded"
    await c.close(wait=False)
    assert srv.engine.sessions.active == 0


async def test_a_socket_the_client_closes_frees_its_slot_at_once(make_server):
    """A close frame (1000 normal, 1001 going away) ends the session now: nothing can resume it here
    (``supports_session_resume`` is false), so the slot does not wait out ``disconnect_grace_s``."""
    srv = make_server(duplex_session={"disconnect_grace_s": 30, "max_sessions": 1})
    for code in (1000, 1001):
        ws = await websockets.connect(srv.ws_url + "/v1/realtime?duplex=1")
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.close(code=code)
        t0 = time.monotonic()
        while srv.engine.sessions.active and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.05)
        assert srv.engine.sessions.active == 0 and time.monotonic() - t0 < 2, code
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(srv.base_url + "/metrics", timeout=10)).text
    assert 'omni_duplex_sessions_closed_total{reason="client_socket_closed"} 2.0' in metrics


async def test_reaper_frees_dropped_and_idle_sessions(make_server):
    srv = make_server(duplex_session={"idle_ttl_s": 1.5, "reaper_interval_s": 0.2, "disconnect_grace_s": 0.5,
                                      "max_sessions": 1})
    ws = await websockets.connect(srv.ws_url + "/v1/realtime?duplex=1")
    assert json.loads(await ws.recv())["type"] == "session.created"
    ws.transport.abort()  # socket drop: no close frame, no session.close
    await asyncio.sleep(0.1)
    assert srv.engine.sessions.active == 1  # slot held for the grace period
    t0 = time.monotonic()
    while srv.engine.sessions.active and time.monotonic() - t0 < 5:
        await asyncio.sleep(0.1)
    assert srv.engine.sessions.active == 0 and 0.4 < time.monotonic() - t0 < 3
    async with websockets.connect(srv.ws_url + "/v1/realtime?duplex=1") as idle:
        got = []
        t0 = time.monotonic()
        while not got or got[-1]["type"] not in ("session.expired", "session.closed"):
            got.append(json.loads(await asyncio.wait_for(idle.recv(), 5)))
        assert got[-1]["type"] == "session.expired" and got[-1]["reason"] == "idle_ttl_expired"
        assert 1.0 < time.monotonic() - t0 < 4
    await asyncio.sleep(0.2)
    assert srv.engine.sessions.active == 0


@pytest.mark.parametrize("fmt", ["pcm16@48000", "pcm_f32le@16000", "g711_ulaw@8000"])
async def test_other_input_formats_are_converted(server, question_wav, fmt):
    name, rate = fmt.split("@")
    audio, _ = sf.read(str(question_wav), dtype="float32")
    x = resample(audio, INPUT_SAMPLE_RATE_HZ, int(rate))
    payload = {"pcm16": float_to_pcm16, "pcm_f32le": lambda a: a.astype("<f4").tobytes(), "g711_ulaw": ulaw_encode}[name](x)
    url = server.ws_url + "/v1/realtime?duplex=1&autostart=0"
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update",
                                  "session": {"input_audio_format": name, "sample_rate_hz": int(rate)}}))
        step = int(rate) // 10 * (len(payload) // len(x))
        for i in range(0, len(payload), step):
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": base64.b64encode(payload[i:i + step]).decode()}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        units, heard, committed = 0, "", False
        while True:
            e = json.loads(await asyncio.wait_for(ws.recv(), 40))
            assert e["type"] != "error", e
            units += e["type"] == "session.unit_metrics"
            if e["type"] == "conversation.item.input_audio_transcription.completed":
                heard = e["transcript"]
            if e["type"] == "input_audio_buffer.committed":
                committed = True
            if e["type"] == "response.done" or (e["type"] == "response.listen" and committed and not heard):
                break
        await ws.send(json.dumps({"type": "session.close"}))  # free the slot now, not after the grace period
    seconds = len(x) / int(rate)
    assert units == int((seconds * 1000 - 1030) // 1000) + 1  # the unit clock runs on 16 kHz-equivalent time
    if name != "g711_ulaw":  # 8 kHz mu-law speech is too degraded for a reliable transcript
        assert "capital" in heard.lower()


def _make_video(path, wav_path, text: str, seconds: float, fps: int = 10):
    audio, _ = sf.read(str(wav_path), dtype="float32")
    img = Image.new("RGB", (640, 480), "white")
    ImageDraw.Draw(img).text((40, 200), text, fill="black", font=ImageFont.load_default(size=64))
    frame = np.asarray(img)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=fps)
        vs.width, vs.height, vs.pix_fmt = 640, 480, "yuv420p"
        as_ = out.add_stream("aac", rate=INPUT_SAMPLE_RATE_HZ)
        as_.layout = "mono"
        for _ in range(int(seconds * fps)):
            for p in vs.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
        pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
        for i in range(0, len(pcm), 1024):
            af = av.AudioFrame.from_ndarray(pcm[None, i:i + 1024], format="s16", layout="mono")
            af.sample_rate = INPUT_SAMPLE_RATE_HZ
            for p in as_.encode(af):
                out.mux(p)
        for p in as_.encode():
            out.mux(p)


async def test_realtime_demo_with_video_and_frame_stacking(server, speech_dir, tmp_path):
    from tests.conftest import espeak_wav

    wav = espeak_wav("What does the sign say?", speech_dir / "sign.wav", lead_s=0.3, tail_s=1.5)
    video = tmp_path / "sign.mp4"
    _make_video(video, wav, "OPEN 24 HOURS", seconds=sf.info(str(wav)).duration)
    out = tmp_path / "demo"
    result = await run_realtime_demo_async(server.ws_url, None, out, input_video=video, video_fps=2.0,
                                           stack_frames=3, realtime=False, timeout_s=60)
    assert result["ok"], result.get("errors")
    assert result["model_decision"] == "speak"
    for name in ("output.pcm", "output.wav", "events.jsonl", "result.json"):
        assert (out / name).stat().st_size > 0
    events = load_events_jsonl(out / "events.jsonl")
    assert check_invariants(events) == []
    assert json.loads((out / "result.json").read_text())["latency"]["ttfp_ms"] is not None
    # the base frame and its composite both reached the server and were counted as vision tokens
    units = [e for e in events if e["type"] == "session.unit_metrics"]
    assert units[-1]["context_tokens"] > 12 * len(units) + 66 * len(units)
