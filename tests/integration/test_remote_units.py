"""Fast tests of the remote backend's parts: engine selection, the in-process vLLM-Omni start-up
message, wire conversion, capabilities, and chunk-by-chunk chat pass-through. No models."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import numpy as np
import pytest

from app.backend import commands as C
from app.backend.engine import Engine, FamilyUnavailable
from app.backend.remote import RemoteEngine, make_engine, missing_vllm_modules, realtime_url
from app.backend.remote.chat import forward_chat
from app.backend.remote.inprocess import vllm_deploy_yaml
from app.backend.remote.wire import AppendEncoder, RefAudioError, load_ref_audio, session_update_wire
from app.config import RemoteConfig, load_deploy_config
from app.media import decode_base64, decode_image, encode_wav


def _remote_cfg(**remote):
    base = load_deploy_config("configs/remote.yaml")
    if remote.get("url") is None and "url" in remote:
        return base.model_copy(update={"remote": None})
    return base.model_copy(update={"remote": RemoteConfig(**{**base.remote.model_dump(), **remote})})


def test_make_engine_picks_by_family(deploy_config):
    assert type(make_engine(deploy_config)) is Engine
    assert type(make_engine(_remote_cfg(url="http://127.0.0.1:9"))) is RemoteEngine


@pytest.mark.skipif(not missing_vllm_modules(), reason="vLLM and vLLM-Omni are installed here")
def test_in_process_vllm_omni_fails_with_a_clear_message():
    cfg = _remote_cfg(url=None)
    with pytest.raises(FamilyUnavailable) as err:
        make_engine(cfg)
    msg = str(err.value)
    assert "vllm_omni" in msg and "remote.url" in msg
    for name in missing_vllm_modules():
        assert name in msg.split("missing here:")[1]
    # also when the engine is built directly and started
    engine = RemoteEngine(cfg)
    with pytest.raises(FamilyUnavailable, match="missing here"):
        asyncio.run(engine.start())


def test_vllm_deploy_yaml_keeps_only_vllm_omni_keys():
    data = vllm_deploy_yaml(_remote_cfg(url=None))
    for ours in ("server", "ui", "limits", "turn_policy", "remote", "model_family"):
        assert ours not in data
    assert "chunk_period_ms" not in data["duplex_session"] and data["duplex_session"]["max_sessions"] == 4
    assert all("inbox_size" not in s for s in data["stages"]) and data["pipeline"]


def test_realtime_url():
    assert realtime_url("http://h:1", "m o") == "ws://h:1/v1/realtime?duplex=1&model=m+o&autostart=0"
    assert realtime_url("https://h/", None) == "wss://h/v1/realtime?duplex=1&autostart=0"


def test_session_update_adds_ref_audio_and_remote_model():
    cmd = C.SessionUpdate(type="session.update", session={"model": "ours", "instructions": "hi"})
    wire = session_update_wire(cmd, ref_audio="data:audio/wav;base64,AAAA", model="remote-m")
    assert wire["session"] == {"model": "remote-m", "instructions": "hi", "ref_audio": "data:audio/wav;base64,AAAA"}
    own = C.SessionUpdate(type="session.update", session={"extra_body": {"tts_ref_audio": "data:x"}})
    wire = session_update_wire(own, ref_audio="data:audio/wav;base64,AAAA", model=None)
    assert "ref_audio" not in wire["session"] and "model" not in wire["session"]


def test_load_ref_audio(tmp_path):
    tone = (0.3 * np.sin(np.arange(48_000) / 48_000 * 2 * np.pi * 220)).astype(np.float32)
    path = tmp_path / "voice.wav"
    path.write_bytes(encode_wav(tone, 48_000))
    url = load_ref_audio(str(path))
    assert url.startswith("data:audio/wav;base64,") and len(decode_base64(url)) == 44 + 2 * 16_000
    assert load_ref_audio("https://x/v.wav") == "https://x/v.wav" and load_ref_audio(None) is None
    with pytest.raises(RefAudioError, match="no such file"):
        load_ref_audio(str(tmp_path / "missing.wav"))


def test_append_encoder_renders_arrays_as_wire_append():
    enc = AppendEncoder()
    frame = np.zeros((48, 64, 3), np.uint8)
    a = enc.encode(C.AppendArrays(audio=np.zeros(1600, np.float32)))
    b = enc.encode(C.AppendArrays(audio=np.zeros(3200, np.float32), frames=(frame,)))
    assert (a["duration_ms"], a["audio_end_ms"], b["duration_ms"], b["audio_end_ms"]) == (100, 100, 200, 300)
    assert a["format"] == "pcm16" and a["sample_rate_hz"] == 16_000 and len(base64.b64decode(a["audio"])) == 3200
    assert "video_frames" not in a and decode_image(base64.b64decode(b["video_frames"][0]), max_bytes=1 << 20, max_pixels=1 << 20).shape == (48, 64, 3)


def test_capabilities_default_then_remote():
    engine = RemoteEngine(_remote_cfg(url="http://127.0.0.1:9"))
    caps = engine.capabilities()
    assert caps["chunk_period_ms"] == 1000 and caps["requires_ref_audio"] and caps["supports_voice_cloning"]
    engine.adopt_capabilities({"chunk_period_ms": 500, "supports_session_resume": True, "max_sessions": 8,
                               "requires_ref_audio": False})
    caps = engine.capabilities()
    assert caps["chunk_period_ms"] == 500 and caps["supports_session_resume"] is False
    assert caps["max_sessions"] == 4 and caps["requires_ref_audio"] is False


async def test_chat_stream_passes_chunks_through_as_they_arrive():
    async def slow_sse():
        for i in range(3):
            yield f"data: {json.dumps({'i': i})}\n\n".encode()
            await asyncio.sleep(0.3)
        yield b"data: [DONE]\n\n"

    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=slow_sse())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        status, headers, body = await forward_chat(client, "http://remote/v1/chat/completions",
                                                   {"messages": []}, stream=True)
        t0 = time.perf_counter()
        arrivals = [(time.perf_counter() - t0, chunk) async for chunk in body]
    assert status == 200 and headers["content-type"] == "text/event-stream" and seen[0]["stream"] is True
    assert b"".join(c for _, c in arrivals).count(b"data:") == 4
    assert arrivals[0][0] < 0.1 and arrivals[-1][0] > 0.8  # first chunk at once, not after the whole stream


async def test_chat_connection_failure_is_502_openai_style():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        status, headers, body = await forward_chat(client, "http://remote/v1/chat/completions", {}, stream=False)
        data = b"".join([c async for c in body])
    err = json.loads(data)["error"]
    assert status == 502 and err["code"] == "remote_unavailable" and err["type"] == "server_error"
    assert headers["content-type"] == "application/json"


async def test_chat_remote_error_status_and_body_pass_through():
    body_in = {"error": {"message": "bad", "type": "invalid_request_error", "param": None, "code": "x"}}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(418, json=body_in)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        status, _, body = await forward_chat(client, "http://remote/v1/chat/completions", {}, stream=False)
        data = b"".join([c async for c in body])
    assert status == 418 and json.loads(data) == body_in
