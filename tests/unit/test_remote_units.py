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

from app.backend.engine import Engine, FamilyUnavailable
from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.backend.remote import (
    RemoteEngine,
    make_engine,
    missing_vllm_modules,
    realtime_url,
)
from app.backend.remote.chat import forward_chat
from app.backend.remote.inprocess import vllm_deploy_yaml
from app.backend.remote.wire import (
    AppendEncoder,
    RefAudioError,
    load_ref_audio,
    session_update_wire,
)
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


def test_in_process_model_comes_from_the_config_then_the_environment(monkeypatch):
    from app.backend.remote.inprocess import DEFAULT_MODEL, MODEL_ENV, InProcessVllmOmni
    from app.config import ConfigError, parse_deploy_config

    data = _remote_cfg(url=None).model_dump(exclude_none=True)
    cfg = parse_deploy_config({**data, "model": "/models/MiniCPM-o-4_5"})
    monkeypatch.setenv(MODEL_ENV, "/env/model")
    assert InProcessVllmOmni(cfg).model == "/models/MiniCPM-o-4_5"  # the config wins
    assert InProcessVllmOmni(_remote_cfg(url=None)).model == "/env/model"
    monkeypatch.delenv(MODEL_ENV)
    assert InProcessVllmOmni(_remote_cfg(url=None)).model == DEFAULT_MODEL
    assert "model" not in vllm_deploy_yaml(cfg)  # vLLM-Omni takes the model as an argument, not a YAML key
    with pytest.raises(ConfigError, match="model"):
        parse_deploy_config({**data, "model": ""})


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


# --------------------------------------------------------------------------- session lifecycle (fake link)
class FakeLink:
    """A scripted remote: records what it is sent, yields what the test pushes."""

    def __init__(self, refuse_open: bool = False) -> None:
        self.sent: list[dict] = []
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.refuse_open = refuse_open
        self.closed = False
        self.close_info = ""

    async def open(self) -> None:
        if self.refuse_open:
            from app.backend.remote import LinkUnavailable

            raise LinkUnavailable("connection refused")

    async def send(self, event: dict) -> None:
        self.sent.append(event)

    async def recv(self):
        return await self.inbox.get()

    async def close(self) -> None:
        self.closed = True
        self.inbox.put_nowait(None)


class FakeBackend:
    """The engine side of a session with one scripted target (itself)."""

    ref_audio = "data:audio/wav;base64,UklGRg=="
    remote_model = "remote-model"
    name = "fake"

    def __init__(self, link: FakeLink) -> None:
        from app.backend.metrics import EngineMetrics

        self.link, self.metrics, self.lost_why, self.refusals, self.open = link, EngineMetrics(), [], 0, 0

    def admission_order(self):
        return [self]

    def no_backend(self):
        return "remote_unavailable", "none"

    async def new_link(self):
        return self.link

    def capabilities(self):
        return {"chunk_period_ms": 1000}

    def adopt_capabilities(self, caps):
        pass

    def session_opened(self):
        self.open += 1

    def session_closed(self):
        self.open -= 1

    def admitted(self, seconds, caps):
        pass

    def refused(self):
        self.refusals += 1

    def lost(self, why, *, during_admission=False):
        self.lost_why.append(why)


def _session(link: FakeLink, monkeypatch=None):
    from app.backend.remote.session import RemoteSession

    backend = FakeBackend(link)
    s = RemoteSession("duplex-local", backend, _remote_cfg(url="http://127.0.0.1:9"))
    s.start()
    return s, backend


async def _drain(s, n: int, timeout: float = 3.0) -> list:
    return [await asyncio.wait_for(s.next_event(), timeout) for _ in range(n)]


async def test_session_forwards_restamps_and_rewrites_ids():
    link = FakeLink()
    s, _ = _session(link)
    s.submit(C.SessionUpdate(type="session.update", session={}))
    s.submit(C.EventAck(type="session.event_ack", server_event_seq=3))  # ours: never forwarded
    await asyncio.sleep(0.05)
    assert link.sent[0]["session"] == {"ref_audio": FakeBackend.ref_audio, "model": "remote-model"}
    link.inbox.put_nowait({"type": "session.created", "server_event_seq": 7,
                           "session": {"id": "duplex-remote", "epoch": 0, "capabilities": {"x": 1}}})
    link.inbox.put_nowait({"type": "response.listen", "server_event_seq": 8, "session_id": "duplex-remote",
                           "epoch": 2, "response": {"status": "listening", "metadata": {"reason": "model_listen"}}})
    created, listen = await _drain(s, 2)
    assert (created.server_event_seq, listen.server_event_seq) == (1, 2)
    assert created.session["id"] == "duplex-local" and created.session["remote_session_id"] == "duplex-remote"
    assert listen.session_id == "duplex-local" and s.epoch == 2
    await asyncio.sleep(0.05)
    assert {"type": "session.event_ack", "server_event_seq": 8} in link.sent
    assert not [m for m in link.sent if m.get("server_event_seq") == 3]


async def test_close_without_remote_answer_times_out_locally(monkeypatch):
    from app.backend.remote import session as S

    monkeypatch.setattr(S, "CLOSE_TIMEOUT_S", 0.2)
    link = FakeLink()
    s, _ = _session(link)
    s.submit(C.SessionUpdate(type="session.update", session={}))
    link.inbox.put_nowait({"type": "session.created", "session": {"id": "duplex-remote"}})
    await _drain(s, 1)
    s.submit(C.CloseSession(type="session.close"))
    (closed,) = await _drain(s, 1)
    assert isinstance(closed, E.SessionClosed) and closed.reason == "client_close" and s.closed
    assert link.sent[-1]["type"] == "session.close"
    await asyncio.wait_for(s.wait_closed(), 5)
    assert link.closed


async def test_expire_closes_the_remote_session_too():
    link = FakeLink()
    s, _ = _session(link)
    s.submit(C.SessionUpdate(type="session.update", session={}))
    link.inbox.put_nowait({"type": "session.created", "session": {"id": "duplex-remote"}})
    await _drain(s, 1)
    s.expire("idle_ttl_expired")
    (ev,) = await _drain(s, 1)
    assert isinstance(ev, E.SessionExpired) and ev.reason == "idle_ttl_expired"
    await asyncio.sleep(0.05)
    assert link.sent[-1] == {"type": "session.close"}
    link.inbox.put_nowait({"type": "session.closed", "session_id": "duplex-remote", "reason": "client_close"})
    link.inbox.put_nowait(None)
    await asyncio.wait_for(s.wait_closed(), 5)


async def test_remote_shutdown_and_unreachable_are_remote_unavailable():
    link = FakeLink()
    s, backend = _session(link)
    s.submit(C.SessionUpdate(type="session.update", session={}))
    link.inbox.put_nowait({"type": "session.created", "session": {"id": "duplex-remote"}})
    link.inbox.put_nowait({"type": "session.expired", "session_id": "duplex-remote", "reason": "server_shutdown"})
    _, err, closed = await _drain(s, 3)
    assert isinstance(err, E.ErrorEvent) and (err.code, err.error_type) == ("remote_unavailable", "server_error")
    assert isinstance(closed, E.SessionClosed) and closed.reason == "remote_disconnected" and backend.lost_why
    s2, backend2 = _session(FakeLink(refuse_open=True))
    err, closed = await _drain(s2, 2)
    assert err.code == "remote_unavailable" and closed.reason == "remote_unavailable" and backend2.lost_why


async def test_handshake_refusal_passes_through_with_its_code():
    link = FakeLink()
    s, backend = _session(link)
    s.submit(C.SessionUpdate(type="session.update", session={}))
    link.inbox.put_nowait({"type": "error", "code": "resource_exhausted", "message": "full",
                           "error": {"type": "rate_limit_error", "code": "resource_exhausted", "message": "full"}})
    link.inbox.put_nowait(None)
    err, closed = await _drain(s, 2)
    assert (err.code, err.error_type) == ("resource_exhausted", "rate_limit_error")
    assert closed.reason == "resource_exhausted" and not backend.lost_why and backend.refusals == 1
    await asyncio.sleep(0.05)
    assert backend.open == 0  # the slot went back_why
