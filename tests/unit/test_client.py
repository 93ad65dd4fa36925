"""Unit tests of the duplex client (app.client) against a tiny loopback fake fake_server.

The fake is the far edge for a client unit test: it records what the client sends and answers
the handshake/close with canned events; it implements no protocol logic.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
import websockets

from app.client.collector import EventCollector
from app.client.config import (
    AudioFormat,
    SessionConfig,
    build_realtime_url,
    unit_boundary_ms,
)
from app.client.duplex import MAX_BUFFERED_EVENTS, DuplexClient
from app.client.protocol import (
    AUDIO_DELTA,
    DuplexProtocolError,
    DuplexSessionClosedError,
    strip_data_url,
)
from app.constants import (
    FIRST_UNIT_MS,
    INPUT_SAMPLE_RATE_HZ,
    OUTPUT_SAMPLE_RATE_HZ,
    UNIT_MS,
)

PCM16_BYTES_PER_MS = INPUT_SAMPLE_RATE_HZ * 2 // 1000

Reply = Callable[[Any, dict[str, Any]], Awaitable[None]]


def reaching(boundary_ms: int, chunk_ms: int) -> int:
    """``audio_end_ms`` of the first ``chunk_ms`` append that reaches ``boundary_ms``."""
    return math.ceil(boundary_ms / chunk_ms) * chunk_ms


def pcm_ms(ms: int) -> bytes:
    """``ms`` milliseconds of silent pcm16 at the input rate."""
    return b"\x00\x00" * (INPUT_SAMPLE_RATE_HZ * ms // 1000)


class FakeServer:
    """Loopback WebSocket fake_server that records client events and replies from a script."""

    def __init__(self, *, chunk_period_ms: int = UNIT_MS, on_event: Reply | None = None) -> None:
        self.received: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.chunk_period_ms = chunk_period_ms
        self.on_event = on_event
        self.url = ""
        self._server: Any = None

    async def __aenter__(self) -> Self:
        self._server = await websockets.serve(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [event for event in self.received if event.get("type") == event_type]

    async def _handle(self, ws: Any) -> None:
        self.paths.append(ws.request.path)
        async for raw in ws:
            event = json.loads(raw)
            self.received.append(event)
            if self.on_event is not None:
                await self.on_event(ws, event)
            if event["type"] == "session.update" and self.on_event is None:
                await self.handshake(ws)
            elif event["type"] == "session.close":
                await ws.send(json.dumps({"type": "session.closed", "reason": "client_close"}))
                return

    async def handshake(self, ws: Any) -> None:
        session = {"id": "duplex-test", "capabilities": {"chunk_period_ms": self.chunk_period_ms}}
        await ws.send(json.dumps({"type": "session.created", "session": session}))
        await ws.send(json.dumps({"type": "session.updated", "session": session}))


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as fake:
        yield fake


# -- pure helpers -------------------------------------------------------------------------------


def test_build_realtime_url_forces_duplex_query() -> None:
    url = build_realtime_url("http://127.0.0.1:8000", "tiny")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("ws", "127.0.0.1:8000", "/v1/realtime")
    assert parse_qs(parts.query) == {"duplex": ["1"], "model": ["tiny"], "autostart": ["0"]}
    assert url.endswith("?duplex=1&model=tiny&autostart=0")


@pytest.mark.parametrize(
    ("base", "expected_prefix"),
    [
        ("https://example.com", "wss://example.com/v1/realtime?"),
        ("http://h:1/v1", "ws://h:1/v1/realtime?"),
        ("ws://h:1/v1/duplex", "ws://h:1/v1/duplex?"),
        ("wss://h/v1/realtime/", "wss://h/v1/realtime?"),
    ],
)
def test_build_realtime_url_schemes_and_paths(base: str, expected_prefix: str) -> None:
    assert build_realtime_url(base, "m").startswith(expected_prefix)


def test_build_realtime_url_overrides_autostart_and_keeps_other_keys() -> None:
    query = parse_qs(urlsplit(build_realtime_url("ws://h/v1/realtime?autostart=1&x=2", None)).query)
    assert query == {"autostart": ["0"], "x": ["2"], "duplex": ["1"]}


@pytest.mark.parametrize("bad", ["ftp://h/x", "ws:///nohost", "127.0.0.1:8000"])
def test_build_realtime_url_rejects_bad_urls(bad: str) -> None:
    with pytest.raises(ValueError, match="unsupported realtime URL"):
        build_realtime_url(bad, "m")


def test_session_payload_defaults() -> None:
    payload = SessionConfig().to_session_payload(model="tiny")
    assert payload["model"] == "tiny"
    assert payload["modalities"] == ["audio", "text"]
    assert payload["input_audio_format"] == payload["output_audio_format"] == "pcm16"
    assert payload["sample_rate_hz"] == INPUT_SAMPLE_RATE_HZ
    assert payload["audio"] == {
        "input": {"sample_rate_hz": INPUT_SAMPLE_RATE_HZ},
        "output": {"sample_rate_hz": OUTPUT_SAMPLE_RATE_HZ},
    }
    assert "turn_detection" in payload and payload["turn_detection"] is None
    assert payload["extra_body"] == {"auto_response": True}
    assert "chunk_period_ms" not in payload and "instructions" not in payload


def test_session_payload_optional_fields_and_extra_body_merge() -> None:
    config = SessionConfig(
        instructions="hi",
        ref_audio="data:audio/wav;base64,AAAA",
        temperature=0.5,
        overlap_policy="listen_only",
        playback_commit_policy="ack_only",
        auto_response=False,
        extra_body={"force_listen_count": 0},
        chunk_period_ms=500,
    )
    payload = config.to_session_payload(model=None)
    assert "model" not in payload
    assert payload["instructions"] == "hi" and payload["temperature"] == 0.5
    assert payload["overlap_policy"] == "listen_only"
    assert payload["playback_commit_policy"] == "ack_only"
    assert payload["extra_body"] == {"auto_response": False, "force_listen_count": 0}


def test_pcm16_durations() -> None:
    fmt = AudioFormat("pcm16", INPUT_SAMPLE_RATE_HZ)
    assert fmt.byte_count(100) == 3200
    assert fmt.duration_ms(3200) == 100.0
    assert len(pcm_ms(100)) == 3200


def test_unit_boundaries_follow_constants() -> None:
    assert unit_boundary_ms(0) == FIRST_UNIT_MS
    assert unit_boundary_ms(2, 500) == FIRST_UNIT_MS + 1000


def test_strip_data_url() -> None:
    assert strip_data_url("data:image/jpeg;base64,QUJD") == "QUJD"
    assert strip_data_url("QUJD") == "QUJD"
    assert strip_data_url("data:image/jpeg,raw") == "data:image/jpeg,raw"


# -- against the fake fake_server ---------------------------------------------------------------------


async def test_handshake_and_close(fake_server: FakeServer) -> None:
    config = SessionConfig(instructions="be brief")
    async with DuplexClient(fake_server.url, "tiny", config) as client:
        assert client.session_id == "duplex-test"
        assert client.unit_ms == UNIT_MS
    path = urlsplit(fake_server.paths[0])
    assert path.path == "/v1/realtime"
    assert parse_qs(path.query) == {"duplex": ["1"], "model": ["tiny"], "autostart": ["0"]}
    update = fake_server.received[0]
    assert update["type"] == "session.update"
    assert update["session"] == config.to_session_payload(model="tiny")
    assert update["event_id"].startswith("evt_")
    assert fake_server.received[-1]["type"] == "session.close"
    assert client.closed and client.closed_reason == "client_close"
    assert [e["type"] for e in client.collector.events] == [
        "session.created",
        "session.updated",
        "session.closed",
    ]


@pytest.mark.parametrize(
    "error_event",
    [
        {"type": "error", "error": "ref_audio is required", "code": "ref_audio_required"},
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "code": "ref_audio_required",
                "message": "ref_audio is required",
            },
        },
    ],
    ids=["flat", "nested"],
)
async def test_handshake_error_raises_protocol_error(error_event: dict[str, Any]) -> None:
    async def reject(ws: Any, event: dict[str, Any]) -> None:
        if event["type"] == "session.update":
            await ws.send(json.dumps(error_event))
            await ws.close()

    async with FakeServer(on_event=reject) as fake:
        with pytest.raises(DuplexProtocolError) as info:
            async with DuplexClient(fake.url, "tiny", handshake_timeout_s=5):
                pass
    assert info.value.code == "ref_audio_required"
    assert info.value.message == "ref_audio is required"


async def test_handshake_times_out_without_session_created() -> None:
    async def silent(ws: Any, event: dict[str, Any]) -> None:
        return None

    async with FakeServer(on_event=silent) as fake:
        with pytest.raises(TimeoutError):
            async with DuplexClient(fake.url, "tiny", handshake_timeout_s=0.3):
                pass


async def test_append_audio_bookkeeping(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        await client.append_audio(pcm_ms(100))
        await client.append_audio(pcm_ms(100), is_speech=True)
        assert client.audio_end_ms == 200.0
    appends = fake_server.of_type("input_audio_buffer.append")
    assert [(a["duration_ms"], a["audio_end_ms"]) for a in appends] == [(100, 100), (100, 200)]
    assert "is_speech" not in appends[0] and appends[1]["is_speech"] is True
    assert appends[0]["format"] == "pcm16"
    assert appends[0]["sample_rate_hz"] == INPUT_SAMPLE_RATE_HZ
    assert len(base64.b64decode(appends[0]["audio"])) == 3200
    assert [r.audio_end_ms for r in client.appends] == [100.0, 200.0]


async def test_append_audio_rejects_partial_samples(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        with pytest.raises(ValueError, match="whole number"):
            await client.append_audio(b"\x00\x00\x00")


async def test_append_strips_data_url_prefixes(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        await client.append_audio(pcm_ms(100), video_frames=["data:image/jpeg;base64,QUJD", "REVG"])
    (append,) = fake_server.of_type("input_audio_buffer.append")
    assert append["video_frames"] == ["QUJD", "REVG"]


async def test_stream_pcm_slices_100_100_50(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        sent = await client.stream_pcm(pcm_ms(250), chunk_ms=100, realtime=False)
    assert sent == 0
    appends = fake_server.of_type("input_audio_buffer.append")
    assert [a["duration_ms"] for a in appends] == [100, 100, 50]
    assert [a["audio_end_ms"] for a in appends] == [100, 200, 250]
    assert all("video_frames" not in a for a in appends)


async def test_stream_pcm_composite_rides_with_base_frame(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        sent = await client.stream_pcm(
            pcm_ms(2400),
            chunk_ms=200,
            realtime=False,
            video_frames=["f0", "data:image/jpeg;base64,f1"],
            stacked_video_frames=["s0", None],
        )
    assert sent == 2
    with_frames = [
        (a["audio_end_ms"], a["video_frames"])
        for a in fake_server.of_type("input_audio_buffer.append")
        if "video_frames" in a
    ]
    # unit 0 closes at FIRST_UNIT_MS (1030 ms: the 200 ms append ending at 1200), unit 1 a unit later.
    assert with_frames == [
        (reaching(unit_boundary_ms(0), 200), ["f0", "s0"]),
        (reaching(unit_boundary_ms(1), 200), ["f1"]),
    ]


async def test_stream_pcm_holds_last_frame_and_uses_server_unit() -> None:
    async with FakeServer(chunk_period_ms=500) as fake, DuplexClient(fake.url, "tiny") as client:
        assert client.unit_ms == 500
        sent = await client.stream_pcm(
            pcm_ms(2100),
            chunk_ms=100,
            realtime=False,
            video_frames=["f0", "f1"],
            stacked_video_frames=["s0", "s1"],
        )
    with_frames = [
        (a["audio_end_ms"], a["video_frames"])
        for a in fake.of_type("input_audio_buffer.append")
        if "video_frames" in a
    ]
    assert sent == 3
    assert with_frames == [
        (reaching(unit_boundary_ms(0, 500), 100), ["f0", "s0"]),
        (reaching(unit_boundary_ms(1, 500), 100), ["f1", "s1"]),
        (reaching(unit_boundary_ms(2, 500), 100), ["f1"]),  # video over: last frame held, alone
    ]


async def test_stream_pcm_realtime_pacing_matches_audio_clock(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await client.stream_pcm(pcm_ms(300), chunk_ms=100, realtime=True)
        elapsed = loop.time() - started
        offsets = [r.sent_at_s - client.appends[0].sent_at_s for r in client.appends]
    assert 0.28 <= elapsed < 0.6
    assert offsets[1] == pytest.approx(0.1, abs=0.05) and offsets[2] == pytest.approx(0.2, abs=0.05)


async def test_control_events_and_event_ids(fake_server: FakeServer) -> None:
    async with DuplexClient(fake_server.url, "tiny") as client:
        commit_id = await client.commit()
        assert client.commit_sent_at_s is not None
        await client.commit(final=False, create_response=True, is_speech=False)
        await client.cancel_response()
        await client.cancel_response("resp_1")
        await client.clear_input()
        await client.barge_in()
        await client.ack_playback("resp_1", played_ms=1234.7)
        await client.ack_playback("resp_1", "item_x", 500, truncate=True)
        explicit = await client.send({"type": "session.heartbeat", "event_id": "mine"})
    sent = [e for e in fake_server.received if e["type"] not in {"session.update", "session.close"}]
    for event in sent:
        event.pop("event_id")
    assert commit_id.startswith("evt_") and explicit == "mine"
    assert sent == [
        {"type": "input_audio_buffer.commit", "final": True},
        {
            "type": "input_audio_buffer.commit",
            "final": False,
            "response_create": True,
            "is_speech": False,
        },
        {"type": "response.cancel"},
        {"type": "response.cancel", "response_id": "resp_1"},
        {"type": "input_audio_buffer.clear"},
        {"type": "barge_in"},
        {
            "type": "playback.ack",
            "response_id": "resp_1",
            "item_id": "item_resp_1",
            "played_ms": 1234,
            "committed_ms": 1234,
        },
        {
            "type": "playback.ack",
            "response_id": "resp_1",
            "item_id": "item_x",
            "played_ms": 500,
            "committed_ms": 500,
            "truncate": True,
        },
        {"type": "session.heartbeat"},
    ]


def _speaking_script() -> list[dict[str, Any]]:
    pcm = base64.b64encode(b"\x01\x00" * 240).decode()  # 10 ms at 24 kHz
    return [
        {"type": "input_audio_buffer.committed", "server_event_seq": 3},
        {
            "type": "response.created",
            "response": {"id": "r1", "status": "in_progress"},
            "server_event_seq": 4,
        },
        {"type": "response.speak", "response_id": "r1", "server_event_seq": 5},
        {"type": "response.audio.delta", "response_id": "r1", "delta": pcm, "server_event_seq": 6},
        {
            "type": "response.audio_transcript.delta",
            "response_id": "r1",
            "delta": "Hel",
            "server_event_seq": 7,
        },
        {
            "type": "response.output_audio.delta",
            "response_id": "r1",
            "delta": pcm,
            "server_event_seq": 8,
        },
        {
            "type": "response.output_audio_transcript.delta",
            "response_id": "r1",
            "delta": "lo",
            "server_event_seq": 9,
        },
        {
            "type": "response.done",
            "response": {"id": "r1", "status": "completed"},
            "server_event_seq": 10,
        },
        {"type": "rate_limits.updated", "rate_limits": [], "server_event_seq": 11},
    ]


async def test_events_wait_for_collector_and_acks() -> None:
    async def scripted(ws: Any, event: dict[str, Any]) -> None:
        if event["type"] == "session.update":
            session = {"id": "s", "capabilities": {}}
            await ws.send(
                json.dumps({"type": "session.created", "session": session, "server_event_seq": 1})
            )
            await ws.send(
                json.dumps({"type": "session.updated", "session": session, "server_event_seq": 2})
            )
        elif event["type"] == "input_audio_buffer.commit":
            for reply in _speaking_script():
                await ws.send(json.dumps(reply))

    async with FakeServer(on_event=scripted) as fake, DuplexClient(fake.url, "tiny") as client:
        start = len(client.collector.events)
        await client.commit()
        done = await client.wait_for("response.done", 5, after_index=start)
        limits = await client.wait_for(
            lambda e: e.get("server_event_seq") == 11, 5, after_index=start
        )
        seen = []
        async for event in client.events():
            seen.append(event["type"])
            if event["type"] == "rate_limits.updated":
                break
        collector = client.collector
        summary = collector.timing_summary(input_committed_at_s=client.commit_sent_at_s)
    assert done["response"]["id"] == "r1" and limits["type"] == "rate_limits.updated"
    assert seen[:3] == ["session.created", "session.updated", "input_audio_buffer.committed"]
    assert all(isinstance(e["_client_received_at_s"], float) for e in collector.events)
    assert collector.response_ids == ["r1"]
    assert collector.response_text("r1") == "Hello"
    assert collector.audio_bytes("r1") == b"\x01\x00" * 480
    assert (
        collector.count("response.output_audio.delta")
        == collector.count("response.audio.delta")
        == 2
    )
    assert summary["audio_chunk_count"] == 2 and summary["audio_duration_ms"] == 20.0
    assert summary["ttfp_ms"] >= 0 and summary["ttft_ms"] >= summary["ttfp_ms"]
    assert summary["measurement_origin"] == "input_audio_buffer.commit send"
    acks = [e["server_event_seq"] for e in fake.received if e["type"] == "session.event_ack"]
    assert acks == list(range(1, 12))


async def test_wait_for_raises_on_error_and_on_close() -> None:
    async def scripted(ws: Any, event: dict[str, Any]) -> None:
        if event["type"] == "session.update":
            await ws.send(json.dumps({"type": "session.created", "session": {"id": "s"}}))
            await ws.send(json.dumps({"type": "session.updated", "session": {"id": "s"}}))
        elif event["type"] == "input_audio_buffer.commit":
            error = {
                "code": "input_audio_buffer_empty",
                "message": "empty",
                "event_id": event["event_id"],
            }
            await ws.send(json.dumps({"type": "error", "error": error}))
        elif event["type"] == "barge_in":
            await ws.send(json.dumps({"type": "session.expired", "reason": "idle_ttl_expired"}))

    async with FakeServer(on_event=scripted) as fake, DuplexClient(fake.url, "tiny") as client:
        start = len(client.collector.events)
        commit_id = await client.commit()
        with pytest.raises(DuplexProtocolError) as info:
            await client.wait_for("input_audio_buffer.committed", 5, after_index=start)
        assert info.value.code == "input_audio_buffer_empty" and info.value.event_id == commit_id
        assert len(client.collector.errors()) == 1
        await client.barge_in()
        with pytest.raises(DuplexSessionClosedError, match="idle_ttl_expired"):
            await client.wait_for("response.done", 5)
        with pytest.raises(DuplexSessionClosedError):
            async for _ in client.events():
                pass
        with pytest.raises(DuplexSessionClosedError):
            await client.commit()


async def test_events_queue_drops_oldest() -> None:
    total = MAX_BUFFERED_EVENTS + 100

    async def flood(ws: Any, event: dict[str, Any]) -> None:
        if event["type"] == "session.update":
            await ws.send(json.dumps({"type": "session.created", "session": {"id": "s"}}))
            await ws.send(json.dumps({"type": "session.updated", "session": {"id": "s"}}))
            for n in range(total):
                await ws.send(json.dumps({"type": "overlap.decision", "n": n}))

    async with (
        FakeServer(on_event=flood) as fake,
        DuplexClient(fake.url, "tiny", auto_ack=False) as client,
    ):
        await client.wait_for(lambda e: e.get("n") == total - 1, 5, after_index=0)
        first = await anext(client.events())
    assert len(client.collector.events) >= total + 2  # the collector keeps everything
    assert first["n"] == total - MAX_BUFFERED_EVENTS


def test_collector_accepts_events_without_receive_time() -> None:
    collector = EventCollector()
    event = collector.add({"type": "response.created", "response_id": "r"}, received_at_s=1.5)
    assert event["_client_received_at_s"] == 1.5
    assert collector.first_received_at("response.created") == 1.5
    assert collector.timing_summary() == {}


def test_timing_summary_has_no_negative_latency_when_the_reply_began_before_the_commit() -> None:
    """A reply the server started on its own (its end of turn) before the client's commit: the
    commit-origin figures are None and say why, never negative (realtime-demo's result.json)."""
    collector = EventCollector()
    pcm = base64.b64encode(np.zeros(2400, np.int16).tobytes()).decode()
    collector.add({"type": "response.created", "response_id": "r"}, received_at_s=1.0)
    collector.add({"type": "response.output_audio_transcript.delta", "response_id": "r", "delta": "Hi."},
                  received_at_s=1.1)
    collector.add({"type": AUDIO_DELTA, "response_id": "r", "delta": pcm}, received_at_s=1.2)
    early = collector.timing_summary(input_committed_at_s=3.0)
    assert early["ttft_ms"] is None and early["ttfp_ms"] is None and early["commit_to_first_audio_ms"] is None
    assert early["measurement_origin"].startswith("none")
    assert early["response_created_to_first_audio_ms"] == 200.0
    late = collector.timing_summary(input_committed_at_s=0.5)
    assert late["ttfp_ms"] == 700.0 and late["commit_to_first_audio_ms"] == 700.0 and late["ttft_ms"] == 600.0
