"""Our server as a front end for a remote vLLM-Omni-protocol server, with real servers on loopback.

Server B = our own server running the real ``tiny`` models (it speaks the same protocol as
vLLM-Omni). Server A = our server with ``configs/remote.yaml`` (``model_family: vllm_omni``)
pointing ``remote.url`` at B. Clients talk to A only: the openai SDK for chat, our
DuplexClient / raw websockets for realtime.

Until ``app.server.build_app`` picks :class:`RemoteEngine` itself (the lead's integration
patch), :func:`build_front_app` assembles A from the same routers plus a forwarding chat route
identical to the patch.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
import time
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import uvicorn
import websockets

from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.backend.remote import RemoteEngine
from app.client.duplex import DuplexClient
from app.client.protocol import DuplexProtocolError
from app.config import RemoteConfig, load_deploy_config
from app.constants import INPUT_SAMPLE_RATE_HZ, OUTPUT_SAMPLE_RATE_HZ
from tests.conftest import espeak_wav
from tests.integration.rt_helpers import (
    assert_invariants,
    response_audio,
    silence,
    types,
    wav_pcm16,
)
from tests.live_server import LiveServer, free_port

pytestmark = pytest.mark.asyncio(loop_scope="session")

REMOTE_YAML = "configs/remote.yaml"


# --------------------------------------------------------------------------- servers
def front_config(remote_url: str, **remote: Any) -> Any:
    """``configs/remote.yaml`` with ``remote.url`` (and other ``remote`` fields) replaced."""
    base = load_deploy_config(REMOTE_YAML)
    fields = {**base.remote.model_dump(), "url": remote_url, **remote}
    return base.model_copy(update={"remote": RemoteConfig(**fields)})


def build_front_app(config: Any) -> Any:
    """Server A's app: ``build_app`` on the remote config (it must choose the RemoteEngine)."""
    from app.server import build_app

    app = build_app(config, with_ui=False)
    assert isinstance(app.state.engine, RemoteEngine)
    return app


class FrontServer(LiveServer):
    """Server A on loopback (``LiveServer`` with the front-end app)."""

    def __init__(self, config: Any) -> None:
        self.port = free_port()
        self.app = build_front_app(config)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                     ws_max_size=64 * 1024 * 1024))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0, *, healthy: bool = True) -> FrontServer:
        """Start; wait for ``/health`` 200 (or any answer when ``healthy`` is False)."""
        if healthy:
            return super().start(timeout_s)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                httpx.get(self.base_url + "/health", timeout=2)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("front server did not start")


def tiny_config(deploy_config: Any, max_sessions: int | None = None) -> Any:
    if max_sessions is None:
        return deploy_config
    return deploy_config.model_copy(
        update={"duplex_session": deploy_config.duplex_session.model_copy(update={"max_sessions": max_sessions})})


@pytest.fixture(scope="module")
def server_b(deploy_config, tiny_family):
    srv = LiveServer(deploy_config, tiny_family).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def ref_wav(speech_dir):
    return espeak_wav("This is my reference voice for cloning.", speech_dir / "ref_voice.wav")


@pytest.fixture(scope="module")
def front_recordings(tmp_path_factory):
    return tmp_path_factory.mktemp("front_recordings")


@pytest.fixture(scope="module")
def server_a(server_b, ref_wav, front_recordings):
    cfg = front_config(server_b.base_url, ref_audio=str(ref_wav))
    cfg = cfg.model_copy(update={"recording": cfg.recording.model_copy(update={"dir": str(front_recordings)})})
    srv = FrontServer(cfg).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def story_wav(speech_dir):
    return espeak_wav("Tell me a story about a cat and a dog.", speech_dir / "story.wav", lead_s=0.3)


# --------------------------------------------------------------------------- chat
async def test_streaming_chat_through_front_returns_text_and_audio(server_a, server_b):
    client = openai.AsyncOpenAI(base_url=server_a.base_url + "/v1", api_key="unused", max_retries=0)
    models = await client.models.list()
    assert [m.id for m in models.data] == [server_b.engine.config.server.served_model_name]  # the remote's list
    t0 = time.perf_counter()
    stream = await client.chat.completions.create(
        model="MiniCPM-o-4_5",  # our served name: rewritten to the remote's model
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        modalities=["text", "audio"], audio={"voice": "default", "format": "wav"}, stream=True)
    text, wavs, arrivals = "", [], []
    async for chunk in stream:
        arrivals.append(time.perf_counter() - t0)
        extra = chunk.model_extra or {}
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if extra.get("modality") == "audio" and delta.content:
            wavs.append(sf.read(io.BytesIO(base64.b64decode(delta.content)), dtype="float32"))
        elif delta.content:
            text += delta.content
    assert "paris" in text.lower(), text
    assert wavs and all(rate == OUTPUT_SAMPLE_RATE_HZ for _, rate in wavs)
    audio = np.concatenate([a for a, _ in wavs])
    assert audio.size > 0.5 * OUTPUT_SAMPLE_RATE_HZ and float(np.abs(audio).max()) > 0.05
    assert len(arrivals) >= 3


async def test_chat_non_streaming_and_remote_errors_pass_through(server_a, server_b):
    async with httpx.AsyncClient(timeout=60) as http:
        bad = {"model": "MiniCPM-o-4_5", "messages": [{"role": "user", "content": "hi"}], "modalities": "text"}
        via_a = await http.post(server_a.base_url + "/v1/chat/completions", json=bad)
        direct = await http.post(server_b.base_url + "/v1/chat/completions",
                                 json={**bad, "model": server_b.engine.config.server.served_model_name})
        assert via_a.status_code == direct.status_code == 400
        assert via_a.json()["error"]["code"] == direct.json()["error"]["code"]
        assert via_a.json()["error"]["message"] == direct.json()["error"]["message"]
        ok = await http.post(server_a.base_url + "/v1/chat/completions",
                             json={"messages": [{"role": "user", "content": "What is the capital of France?"}],
                                   "modalities": ["text"]})
        assert ok.status_code == 200 and ok.headers["content-type"].startswith("application/json")
        body = ok.json()
        assert body["object"] == "chat.completion" and "paris" in body["choices"][0]["message"]["content"].lower()
        health = await http.get(server_a.base_url + "/health")
        assert health.status_code == 200 and health.json()["remote"]["url"] == server_b.base_url
        metrics = await http.get(server_a.base_url + "/metrics")
        assert metrics.status_code == 200 and "omni_duplex_sessions_active" in metrics.text


# --------------------------------------------------------------------------- duplex
async def test_duplex_spoken_question_gets_spoken_answer_through_front(server_a, server_b, question_wav,
                                                                       front_recordings):
    async with DuplexClient(server_a.base_url, handshake_timeout_s=20) as c:
        assert c.session_id and c.session["remote_session_id"] and c.session_id != c.session["remote_session_id"]
        b_session = server_b.engine.sessions.sessions[c.session["remote_session_id"]]
        assert b_session.settings.ref_audio.startswith("data:audio/wav;base64,")  # remote.ref_audio injected
        caps = c.capabilities
        assert caps["chunk_period_ms"] == 1000 and caps["supports_session_resume"] is False
        assert caps["model_family"] == "tiny"  # the remote session's own capabilities
        await c.stream_pcm(wav_pcm16(question_wav), chunk_ms=100, realtime=False)
        await c.commit()
        done = await c.wait_for("response.done", timeout_s=90)
        ev = c.collector.events
    assert_invariants(ev, "remote_spoken_question")
    assert done["response"]["status"] == "completed"
    rid = done["response_id"]
    transcript = "".join(e["delta"] for e in ev if e["type"] == "response.output_audio_transcript.delta")
    assert "paris" in transcript.lower(), transcript
    audio = response_audio(ev, rid)
    assert audio.size > 0.5 * OUTPUT_SAMPLE_RATE_HZ
    seqs = [e["server_event_seq"] for e in ev]
    assert seqs == list(range(1, len(seqs) + 1))  # re-stamped locally, gap-free
    assert ev[-1]["type"] == "session.closed" and ev[-1]["session_id"] == c.session_id
    assert ev[-1]["reason"] == "client_close"
    delta = next(e for e in ev if e["type"] == "response.output_audio.delta")
    assert delta["sample_rate_hz"] == OUTPUT_SAMPLE_RATE_HZ and delta["metadata"]["session_id"] == c.session_id
    await asyncio.sleep(0.3)
    assert server_a.engine.sessions.active == 0 and server_b.engine.sessions.active == 0
    # serve --record-dir records a forwarded session as it does a local one
    (folder,) = front_recordings.glob(f"*_{c.session_id}")
    config = json.loads((folder / "config.json").read_text())
    assert config["complete"] is True and config["closed_reason"] == "client_close"
    assert abs(sf.info(folder / "input.wav").duration - sf.info(question_wav).duration) < 0.05
    assert abs(sf.info(folder / "output.wav").frames - audio.size) <= 1  # every delta the client got
    rows = [json.loads(line)["event"]["type"] for line in (folder / "events.jsonl").read_text().splitlines()]
    assert rows[0] == "session.update" and "input_audio_buffer.commit" in rows and rows[-1] == "session.closed"


async def test_hard_barge_in_through_front_cancels_the_response(server_a, story_wav):
    async with DuplexClient(server_a.base_url, handshake_timeout_s=20) as c:
        await c.stream_pcm(wav_pcm16(story_wav) + silence(0.3), chunk_ms=100, realtime=False)
        t0 = time.monotonic()
        while "response.output_audio.delta" not in types(c.collector.events) and time.monotonic() - t0 < 90:
            await c.stream_pcm(silence(0.2), chunk_ms=100, realtime=True)
        first = next(e for e in c.collector.events if e["type"] == "response.output_audio.delta")
        rid = first["response_id"]
        assert not any(e["type"] == "response.done" for e in c.collector.events), "answered before the barge-in"
        mark = len(c.collector.events)
        await c.cancel_response()
        done = await c.wait_for(lambda e: e["type"] == "response.done" and e["response_id"] == rid, timeout_s=10,
                                after_index=mark)
        await c.stream_pcm(silence(1.2), chunk_ms=100, realtime=False)
        await asyncio.sleep(0.3)
        ev = c.collector.events
    assert_invariants(ev, "remote_hard_barge_in")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] in ("client_cancelled", "barge_in")
    after = ev[ev.index(done) + 1:]
    assert not [e for e in after if e.get("response_id") == rid and e["type"] != "output_audio_buffer.cleared"]


async def test_in_process_session_api_with_arrays(server_b, question_wav):
    """The WebRTC handler's path: typed commands in (AppendArrays with float32 audio and RGB
    frames), typed events out, over a RemoteEngine running in this event loop."""
    engine = RemoteEngine(front_config(server_b.base_url))
    await engine.start()
    try:
        s = engine.sessions.open()
        s.submit(C.SessionUpdate(type="session.update", session={"modalities": ["audio", "text"]}))
        audio, rate = sf.read(str(question_wav), dtype="float32")
        assert rate == INPUT_SAMPLE_RATE_HZ
        frame = np.full((120, 160, 3), 200, np.uint8)
        step = INPUT_SAMPLE_RATE_HZ // 5
        for i in range(0, audio.size, step):
            s.submit(C.AppendArrays(audio=audio[i:i + step], frames=(frame,) if i == 5 * step else ()))
        s.submit(C.Commit(type="input_audio_buffer.commit"))
        got: list[E.ServerEvent] = []
        while not any(isinstance(e, E.ResponseDone) for e in got):
            got.append(await asyncio.wait_for(s.next_event(), 90))
        s.submit(C.CloseSession(type="session.close"))
        while not isinstance(got[-1], E.SessionClosed):
            got.append(await asyncio.wait_for(s.next_event(), 10))
    finally:
        await engine.stop()
    assert isinstance(got[0], E.SessionCreated) and got[0].session["id"] == s.id
    deltas = [e for e in got if isinstance(e, E.AudioDelta)]
    assert deltas and all(d.audio.dtype == np.float32 and d.sample_rate_hz == OUTPUT_SAMPLE_RATE_HZ for d in deltas)
    assert sum(d.audio.size for d in deltas) > 0.5 * OUTPUT_SAMPLE_RATE_HZ
    heard = [e.transcript for e in got if isinstance(e, E.InputTranscription)]
    assert any("capital" in h.lower() and "france" in h.lower() for h in heard), heard
    assert [e.server_event_seq for e in got] == list(range(1, len(got) + 1))
    assert got[-1].reason == "client_close" and engine.sessions.active == 0


# --------------------------------------------------------------------------- capacity
async def test_remote_capacity_refusal_passes_through_at_once(deploy_config, tiny_family):
    b = LiveServer(tiny_config(deploy_config, max_sessions=1), tiny_family).start()
    a = FrontServer(front_config(b.base_url)).start()
    try:
        assert a.engine.sessions.max_sessions == 4  # local admission would have let it in
        first = DuplexClient(a.base_url)
        await first.connect()
        t0 = time.perf_counter()
        second = DuplexClient(a.base_url, handshake_timeout_s=10)
        with pytest.raises(DuplexProtocolError) as err:
            await second.connect()
        assert err.value.code == "resource_exhausted"
        assert time.perf_counter() - t0 < 2.0
        refusal = next(e for e in second.collector.events if e["type"] == "error")
        assert refusal["error"]["type"] == "rate_limit_error"
        # raw socket: the error, then session.closed with the code as reason
        async with websockets.connect(a.ws_url + "/v1/realtime?duplex=1&autostart=0") as ws:
            await ws.send(json.dumps({"type": "session.update", "session": {}}))
            got = [json.loads(await asyncio.wait_for(ws.recv(), 5)) for _ in range(2)]
        assert [g["type"] for g in got] == ["error", "session.closed"]
        assert got[0]["error"]["code"] == "resource_exhausted" and got[1]["reason"] == "resource_exhausted"
        assert got[0]["error"]["retryable"] is True and got[0]["error"]["retry_after_ms"] > 0  # passed through
        await asyncio.sleep(0.2)
        assert a.engine.sessions.active == 1  # the refused sessions gave their local slots back
        await first.close()
        await asyncio.sleep(0.3)
        third = DuplexClient(a.base_url)
        await third.connect()
        await third.close()
    finally:
        a.stop()
        b.stop()


# --------------------------------------------------------------------------- remote goes away
def _restart_on_port(config: Any, family: Any, port: int) -> LiveServer:
    srv = LiveServer(config, family)
    srv.port = port
    srv._server = uvicorn.Server(uvicorn.Config(srv.app, host="127.0.0.1", port=port, log_level="warning"))
    srv._thread = threading.Thread(target=srv._server.run, daemon=True)
    srv.base_url, srv.ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    return srv.start()


async def test_remote_going_away_mid_session(deploy_config, tiny_family, question_wav):
    b = LiveServer(deploy_config, tiny_family).start()
    a = FrontServer(front_config(b.base_url)).start()
    b_stopped = False
    try:
        c = DuplexClient(a.base_url)
        await c.connect()
        await c.stream_pcm(wav_pcm16(question_wav)[:32000], chunk_ms=100, realtime=False)
        mark = len(c.collector.events)
        t0 = time.perf_counter()
        await asyncio.to_thread(b.stop)
        b_stopped = True
        closed = await c.wait_for("session.closed", timeout_s=10, after_index=mark, raise_on_error=False)
        ev = c.collector.events[mark:]
        err = next(e for e in ev if e["type"] == "error")
        assert err["error"]["code"] == "remote_unavailable" and err["error"]["type"] == "server_error"
        assert closed["reason"] == "remote_disconnected" and ev.index(err) < ev.index(closed)
        assert time.perf_counter() - t0 < 15
        await c.close()
        async with httpx.AsyncClient(timeout=10) as http:
            h = await http.get(a.base_url + "/health")
            assert h.status_code == 503 and h.json()["status"] == "unhealthy"
            chat = await http.post(a.base_url + "/v1/chat/completions",
                                   json={"messages": [{"role": "user", "content": "hi"}], "modalities": ["text"]})
            assert chat.status_code == 502 and chat.json()["error"]["code"] == "remote_unavailable"
            models = await http.get(a.base_url + "/v1/models")
            assert models.status_code == 200 and models.json()["data"][0]["id"] == "MiniCPM-o-4_5"
        # the next session gets a clear error at once, never a hang
        t1 = time.perf_counter()
        async with websockets.connect(a.ws_url + "/v1/realtime?duplex=1&autostart=0") as ws:
            await ws.send(json.dumps({"type": "session.update", "session": {}}))
            got = [json.loads(await asyncio.wait_for(ws.recv(), 5)) for _ in range(2)]
        assert [g["type"] for g in got] == ["error", "session.closed"], got
        assert got[0]["error"]["code"] == "remote_unavailable" and got[1]["reason"] == "remote_unavailable"
        assert time.perf_counter() - t1 < 2.0
        assert a.engine.sessions.active == 0
        # the remote comes back on the same address: A recovers and serves sessions again
        b = _restart_on_port(deploy_config, tiny_family, b.port)
        b_stopped = False
        deadline = time.monotonic() + 10
        async with httpx.AsyncClient(timeout=5) as http:
            while (await http.get(a.base_url + "/health")).status_code != 200:
                assert time.monotonic() < deadline, "front never saw the remote recover"
                await asyncio.sleep(0.2)
        async with DuplexClient(a.base_url) as again:
            assert again.session_id
    finally:
        a.stop()
        if not b_stopped:
            b.stop()
