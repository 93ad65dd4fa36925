"""Contract of the in-process vLLM-Omni path against vLLM-Omni 0.30's own engine-side protocol code.

Loaded from the wheel without vLLM (see vllm_omni_engine.py):

* every wire event our sessions send — each client command our transports accept, in-process
  array appends, our own event acks — goes through our real :class:`RemoteSession` and
  :class:`InProcessLink` into vLLM-Omni's ``translate_realtime_command``, and becomes the
  engine command it should (with its fields);
* every typed event of ``vllm_omni.engine.duplex.events`` renders with its own ``to_realtime()``
  and decodes with our one decoder (typed where we have a class, passed through unchanged
  where we do not), and the same events pushed through the session reach our client re-stamped.

The edge: ``vllm_omni.entrypoints.duplex_omni.DuplexOmni`` — building it loads MiniCPM-o on GPUs —
is replaced by :class:`EngineEdge`, which records the engine commands ``open_session()``'s handle
is given and yields the typed events the test hands it. Whether the GPU engine then *acts* on
those commands as intended is not tested here (no GPU, no vLLM).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import inspect
from typing import Any

import numpy as np
import pytest

from app.backend.protocol import commands as C
from app.backend.protocol import events as E
from app.backend.protocol.decoder import RawEvent, decode_event
from app.backend.remote.engine import RemoteEngine
from app.backend.remote.inprocess import InProcessVllmOmni
from app.backend.remote.session import RemoteSession
from app.config import load_deploy_config
from tests.compat.vllm_omni_client import (
    skip_module_without_wheel,
    wheel_dir_from_env,
)
from tests.compat.vllm_omni_engine import load_vllm_omni_engine_protocol

skip_module_without_wheel()

asyncio_test = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module")
def vo() -> Any:
    return load_vllm_omni_engine_protocol(wheel_dir_from_env())


class Handle:
    """An engine-resident session as ``DuplexOmni.open_session`` returns it: ``submit``, ``events``, ``close``."""

    def __init__(self) -> None:
        self.submitted: list[Any] = []
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False
        self.close_reason: str | None = None

    async def submit(self, command: Any) -> None:
        self.submitted.append(command)

    async def events(self):
        while (ev := await self.queue.get()) is not None:
            yield ev

    async def close(self) -> None:
        self.closed = True
        self.queue.put_nowait(None)


class EngineEdge:
    """Stands for ``DuplexOmni`` (the GPU engine): records sessions opened and what they were sent."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []
        self.handles: list[Handle] = []

    async def open_session(self, config: dict[str, Any]) -> Handle:
        self.configs.append(config)
        self.handles.append(Handle())
        return self.handles[-1]


def in_process_session() -> tuple[RemoteSession, EngineEdge]:
    """Our real session over our real in-process link, with the engine edge behind it."""
    config = load_deploy_config("configs/remote.yaml").model_copy(update={"remote": None})
    transport = InProcessVllmOmni(config)
    edge = EngineEdge()
    transport.omni = edge  # what start() would build on GPUs
    engine = RemoteEngine(config, in_process=transport)
    session = RemoteSession("duplex-local", engine, config)
    session.start()
    return session, edge


def pcm16_b64(ms: int, rate: int = 16_000) -> str:
    t = np.arange(rate * ms // 1000) / rate
    return base64.b64encode((np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()).decode()


async def settle(pred, timeout_s: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


# (our client command, the vLLM-Omni engine command it must become, fields to check)
COMMANDS: list[tuple[Any, str, dict[str, Any]]] = [
    (C.SessionUpdate(type="session.update", session={"instructions": "Be brief."}), "UpdateSession",
     {"patch": {"instructions": "Be brief."}}),
    (C.AudioAppend(type="input_audio_buffer.append", audio=pcm16_b64(100), format="pcm16", sample_rate_hz=16_000,
                   duration_ms=100, audio_end_ms=100), "AppendAudio",
     {"format": "pcm_f32le", "sample_rate_hz": 16_000, "duration_ms": 100, "audio_end_ms": 100}),
    (C.AppendArrays(audio=np.zeros(1600, np.float32), frames=(np.full((32, 48, 3), 120, np.uint8),)), "AppendAudio",
     {"sample_rate_hz": 16_000, "duration_ms": 100, "audio_end_ms": 200}),
    (C.Commit(type="input_audio_buffer.commit"), "Commit", {"final": True}),
    (C.ResponseCreate(type="response.create", response={"modalities": ["audio", "text"]}), "CreateResponse", {}),
    (C.PlaybackAck(type="playback.ack", response_id="resp_1", played_ms=480), "AckPlayback",
     {"played_ms": 480, "response_id": "resp_1"}),
    (C.CancelResponse(type="response.cancel", response_id="resp_1"), "CancelResponse", {"response_id": "resp_1"}),
    (C.CancelResponse(type="barge_in"), "BargeIn", {}),
    (C.CancelResponse(type="output_audio_buffer.clear", response_id="resp_1"), "ClearOutputAudio",
     {"response_id": "resp_1"}),
    (C.CancelResponse(type="input.cancel"), "CancelInput", {}),
    (C.TurnSignal(type="turn.signal", event="barge_in"), "BargeIn", {}),
    (C.TurnSignal(type="turn.signal", event="user_turn_end", payload={"k": 1}), "SignalTurn",
     {"event": "user_turn_end"}),
    (C.ClearInput(type="input_audio_buffer.clear"), "ClearInput", {}),
    (C.TextAppend(type="input.text.append", text="hello"), "AppendText", {"text": "hello"}),
    (C.Heartbeat(type="session.heartbeat"), "Heartbeat", {}),
    (C.CloseSession(type="session.close"), "CloseSession", {"reason": "client_close"}),
]


def test_loaded_from_the_wheel_without_vllm(vo: Any) -> None:
    import sys

    assert vo.wheel.startswith("vllm_omni-0.30.0-")
    assert "vllm" not in sys.modules and "torch" not in sys.modules
    assert not hasattr(sys.modules["vllm_omni"], "__file__")


@asyncio_test
async def test_every_command_our_sessions_send_translates_to_its_engine_command(vo: Any) -> None:
    s, edge = in_process_session()
    s.submit(C.SessionUpdate(type="session.update", session={"modalities": ["audio", "text"],
                                                             "ref_audio": "data:audio/wav;base64,UklGRg=="}))
    await settle(lambda: edge.handles)
    assert edge.configs == [{"modalities": ["audio", "text"], "ref_audio": "data:audio/wav;base64,UklGRg=="}]
    handle = edge.handles[0]
    handle.queue.put_nowait(vo.events.SessionCreated(session={"id": "duplex-engine", "capabilities": {}}))
    created = await asyncio.wait_for(s.next_event(), 3)
    assert isinstance(created, E.SessionCreated) and created.session["id"] == "duplex-local"
    s.submit(C.EventAck(type="session.event_ack", server_event_seq=1))  # ours: never forwarded
    for cmd, _, _ in COMMANDS:
        s.submit(cmd)
    await settle(lambda: len(handle.submitted) == len(COMMANDS))
    await asyncio.sleep(0.05)
    assert [type(c).__name__ for c in handle.submitted] == [name for _, name, _ in COMMANDS]
    for got, (cmd, name, fields) in zip(handle.submitted, COMMANDS, strict=True):
        assert isinstance(got, getattr(vo.commands, name))
        for key, value in fields.items():
            assert getattr(got, key) == value, (name, key, getattr(got, key))
    appended = handle.submitted[2]
    assert len(appended.video_frames) == 1 and len(appended.audio) == 4 * 1600  # float32, 100 ms at 16 kHz
    first = np.frombuffer(handle.submitted[1].audio, "<f4")
    assert first.size == 1600 and 0.2 < float(np.abs(first).max()) < 0.3  # our PCM16 sine, decoded
    # nothing came back as an error: every event was understood
    leftover = []
    while not s._outbox.empty():
        leftover.append(s._outbox.get_nowait())
    assert not [e for e in leftover if isinstance(e, E.ErrorEvent)], leftover
    # our own acks of engine events are a transport matter vLLM-Omni's translator rejects,
    # which is why the in-process link drops them before translating
    with pytest.raises(vo.commands.DuplexCommandError) as err:
        vo.realtime_commands.translate_realtime_command({"type": "session.event_ack", "server_event_seq": 3})
    assert err.value.code == "unknown_event"
    handle.queue.put_nowait(vo.events.SessionClosed(reason="client_close"))
    await asyncio.wait_for(s.wait_closed(), 5)


def typed_events(vo: Any) -> list[Any]:
    """One instance of every typed event class vLLM-Omni's engine emits, with realistic fields."""
    samples = (np.sin(np.arange(480) / 8) * 9000).astype("<i2").tobytes()
    values: dict[str, Any] = {
        "session_id": "duplex-engine", "epoch": 1, "response_id": "resp_1", "item_id": "item_1",
        "delta": "hi", "text": "hi there", "transcript": "hi there", "arguments": "{}", "call_id": "call_1",
        "format": "pcm16", "sample_rate_hz": 24_000, "code": "input_backpressure", "message": "slow down",
        "session": {"id": "duplex-engine", "object": "realtime.session", "capabilities": {"chunk_period_ms": 1000}},
        "response": {"id": "resp_1", "object": "realtime.response", "status": "completed"},
        "item": {"id": "item_1", "type": "message", "role": "assistant", "content": []},
        "part": {"type": "audio", "transcript": ""}, "audio_start_ms": 120, "audio_end_ms": 980,
        "reason": "model_listen", "internal_type": "unit_metrics", "details": {},
    }
    out = []
    for name in vo.events.__all__:
        cls = getattr(vo.events, name)
        if not (inspect.isclass(cls) and dataclasses.is_dataclass(cls)) or name == "DuplexEvent":
            continue
        kwargs = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}
        if name == "AudioDelta":
            kwargs["delta"] = base64.b64encode(samples).decode()
        if name in ("SessionClosed", "SessionExpired"):
            kwargs["reason"] = "client_close"
        out.append(cls(**kwargs))
    return out


def test_every_typed_engine_event_decodes_with_our_decoder(vo: Any) -> None:
    events = typed_events(vo)
    assert len(events) >= 40
    ours_typed = 0
    for ev in events:
        wire = ev.to_realtime()
        got = decode_event(wire, epoch=1)  # never raises
        if isinstance(got, RawEvent):
            assert got.to_wire()["type"] == wire["type"] and got.data == wire
        else:
            ours_typed += 1
            assert got.to_wire()["type"] == wire["type"].replace("response.text.", "response.output_text."), wire
    assert ours_typed >= 25
    by_type = {ev.to_realtime()["type"]: decode_event(ev.to_realtime(), epoch=1) for ev in events}
    delta = by_type["response.output_audio.delta"]
    assert isinstance(delta, E.AudioDelta) and delta.audio.dtype == np.float32 and delta.audio.size == 480
    assert delta.sample_rate_hz == 24_000 and delta.response_id == "resp_1"
    err = by_type["error"]
    assert isinstance(err, E.ErrorEvent) and (err.code, err.message) == ("input_backpressure", "slow down")
    assert isinstance(by_type["response.listen"], E.ResponseListen)
    assert isinstance(by_type["response.done"], E.ResponseDone) and by_type["response.done"].response_id == "resp_1"
    assert isinstance(by_type["session.created"], E.SessionCreated)
    assert by_type["session.created"].session["id"] == "duplex-engine"
    assert isinstance(by_type["session.closed"], E.SessionClosed) and by_type["session.closed"].reason == "client_close"
    assert by_type["response.output_audio_transcript.delta"].delta == "hi"


@asyncio_test
async def test_engine_events_reach_our_client_through_the_session(vo: Any) -> None:
    s, edge = in_process_session()
    s.submit(C.SessionUpdate(type="session.update", session={}))
    await settle(lambda: edge.handles)
    handle = edge.handles[0]
    events = [e for e in typed_events(vo) if type(e).__name__ not in ("SessionClosed", "SessionExpired")]
    created = next(e for e in events if type(e).__name__ == "SessionCreated")
    events.remove(created)
    for ev in [created, *events, vo.events.SessionClosed(session_id="duplex-engine", reason="client_close")]:
        handle.queue.put_nowait(ev)
    got: list[E.ServerEvent] = []
    while not got or not isinstance(got[-1], E.SessionClosed):
        got.append(await asyncio.wait_for(s.next_event(), 5))
    assert len(got) == len(events) + 2
    assert [e.server_event_seq for e in got] == list(range(1, len(got) + 1))
    assert got[0].session["id"] == "duplex-local" and got[0].session["remote_session_id"] == "duplex-engine"
    assert got[-1].session_id == "duplex-local" and got[-1].reason == "client_close"
    audio = next(e for e in got if isinstance(e, E.AudioDelta))
    assert audio.audio.size == 480 and audio.session_id in (None, "", "duplex-local")
