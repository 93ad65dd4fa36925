"""Compatibility with vLLM-Omni's own duplex client (loaded from its wheel, see vllm_omni_client.py).

* Parity: our client and vLLM-Omni's put the same bytes on the wire for the same calls
  (session.update, URL query, appends, controls), checked against a recording loopback fake.
* Known differences are asserted explicitly so a version bump that changes them is noticed.
* Live (``slow``): vLLM-Omni's client drives our real server, and the server's event log passes
  our invariant checker.

Skipped when the wheel is absent; the skip message gives the pip command.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import websockets

from app.client.config import SessionConfig, build_realtime_url, unit_boundary_ms
from app.client.duplex import DuplexClient
from app.client.invariants import check_invariants
from app.constants import FIRST_UNIT_MS, INPUT_SAMPLE_RATE_HZ
from tests.compat.vllm_omni_client import (
    VLLM_OMNI_VERSION,
    drive_vllm_client,
    load_vllm_omni_duplex_client,
    skip_module_without_wheel,
    wheel_dir_from_env,
)

skip_module_without_wheel()


@pytest.fixture(scope="module")
def vo() -> Any:
    return load_vllm_omni_duplex_client(wheel_dir_from_env())


def pcm_ms(ms: int) -> bytes:
    return b"\x00\x00" * (INPUT_SAMPLE_RATE_HZ * ms // 1000)


class Recorder:
    """Loopback fake: records each connection's path and client events; minimal replies."""

    def __init__(self) -> None:
        self.connections: list[dict[str, Any]] = []
        self.url = ""
        self._server: Any = None

    async def _handle(self, ws: Any) -> None:
        record: dict[str, Any] = {"path": ws.request.path, "events": []}
        self.connections.append(record)
        seq = 0
        async for raw in ws:
            event = json.loads(raw)
            record["events"].append(event)
            if event["type"] == "session.update":
                session = {"id": "duplex-x", "capabilities": {"chunk_period_ms": 1000}}
                for kind in ("session.created", "session.updated"):
                    seq += 1
                    await ws.send(
                        json.dumps({"type": kind, "session": session, "server_event_seq": seq})
                    )
            elif event["type"] == "session.close":
                await ws.send(json.dumps({"type": "session.closed", "reason": "client_close"}))
                return


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    rec = Recorder()
    rec._server = await websockets.serve(rec._handle, "127.0.0.1", 0)
    rec.url = f"ws://127.0.0.1:{rec._server.sockets[0].getsockname()[1]}"
    yield rec
    rec._server.close()
    await rec._server.wait_closed()


def _wire(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Client events minus event_id and event acks (ids are random; acks are checked separately)."""
    return [
        {k: v for k, v in e.items() if k != "event_id"}
        for e in events
        if e["type"] != "session.event_ack"
    ]


def test_loaded_without_vllm(vo: Any) -> None:
    assert vo.__wheel__ == f"vllm_omni-{VLLM_OMNI_VERSION}-py3-none-any.whl"
    assert "vllm" not in sys.modules and not hasattr(sys.modules["vllm_omni"], "__file__")
    assert load_vllm_omni_duplex_client(wheel_dir_from_env()) is vo
    for name in ("DuplexClient", "SessionConfig", "EventCollector", "DuplexProtocolError"):
        assert hasattr(vo, name)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"instructions": "be brief", "ref_audio": "data:audio/wav;base64,AAAA", "temperature": 0.7},
        {
            "overlap_policy": "listen_only",
            "playback_commit_policy": "ack_only",
            "extra_body": {"force_listen_count": 0},
        },
        {"auto_response": False, "turn_detection": {"type": "server_vad"}, "idle_timeout_s": 30.0},
    ],
)
def test_session_update_payload_parity(vo: Any, kwargs: dict[str, Any]) -> None:
    ours = SessionConfig(**kwargs).to_session_payload(model="tiny")
    theirs = vo.SessionConfig(**kwargs).to_session_payload(model="tiny")
    assert ours == theirs


@pytest.mark.parametrize(
    "base", ["ws://h:1", "ws://h:1/v1/realtime?autostart=1", "ws://h:1/v1/realtime?x=y"]
)
def test_url_query_parity(vo: Any, base: str) -> None:
    ours = urlsplit(build_realtime_url(base, "tiny"))
    theirs = urlsplit(vo.DuplexClient(base, model="tiny")._target_url())
    assert (ours.scheme, ours.netloc, ours.path) == (theirs.scheme, theirs.netloc, theirs.path)
    assert parse_qs(ours.query) == parse_qs(theirs.query)


async def _script(client: Any, *, ours: bool) -> None:
    await client.append_audio(pcm_ms(100))
    await client.append_audio(pcm_ms(100), is_speech=True)
    await client.append_audio(pcm_ms(100), video_frames=["data:image/jpeg;base64,QUJD", "REVG"])
    await client.stream_pcm(pcm_ms(250), chunk_ms=100, realtime=False)
    await client.commit()
    await client.commit(final=False, create_response=True)
    await client.cancel_response()
    await client.cancel_response("resp_1")
    await client.clear_input()
    if ours:
        await client.ack_playback("resp_1", "item_resp_1", 1234.5)
    else:
        await client.ack_playback(1234.5, response_id="resp_1", item_id="item_resp_1")


async def test_client_events_parity(vo: Any, recorder: Recorder) -> None:
    async with DuplexClient(recorder.url, "tiny") as ours:
        await _script(ours, ours=True)
    async with vo.DuplexClient(
        recorder.url, model="tiny", reconnect=None, heartbeat_interval_s=None
    ) as theirs:
        await _script(theirs, ours=False)
    mine, vllm = (_wire(c["events"]) for c in recorder.connections)
    assert mine == vllm
    assert urlsplit(recorder.connections[0]["path"]) == urlsplit(recorder.connections[1]["path"])
    for connection in recorder.connections:  # both ack every server_event_seq
        acks = [
            e["server_event_seq"] for e in connection["events"] if e["type"] == "session.event_ack"
        ]
        assert acks == [1, 2]


async def test_known_difference_first_unit_boundary(vo: Any, recorder: Recorder) -> None:
    """Frame k rides the append reaching unit k's boundary in both; the boundaries differ.

    vLLM-Omni 0.30.0 closes unit 0 at ``DUPLEX_FIRST_UNIT_MS`` = 1000 ms; the protocol reference
    (and app.constants.FIRST_UNIT_MS) says 1030 ms (MiniCPM-o's 1035 ms rounded to the hop).
    """
    chunk = 100
    async with DuplexClient(recorder.url, "tiny") as ours:
        await ours.stream_pcm(
            pcm_ms(2500),
            chunk_ms=chunk,
            realtime=False,
            video_frames=["f0", "f1"],
            stacked_video_frames=["s0"],
        )
    async with vo.DuplexClient(
        recorder.url, model="tiny", reconnect=None, heartbeat_interval_s=None
    ) as theirs:
        await theirs.stream_pcm(
            pcm_ms(2500),
            chunk_ms=chunk,
            realtime=False,
            video_frames=["f0", "f1"],
            stacked_video_frames=["s0"],
        )

    def placements(events: list[dict[str, Any]]) -> list[tuple[int, list[str]]]:
        return [(e["audio_end_ms"], e["video_frames"]) for e in events if "video_frames" in e]

    mine, vllm = (placements(c["events"]) for c in recorder.connections)

    def reaching(boundary: int) -> int:
        return math.ceil(boundary / chunk) * chunk

    assert mine == [
        (reaching(unit_boundary_ms(0)), ["f0", "s0"]),
        (reaching(unit_boundary_ms(1)), ["f1"]),
    ]
    theirs_first = vo.DUPLEX_FIRST_UNIT_MS
    assert vllm == [
        (reaching(vo.duplex_unit_boundary_ms(0)), ["f0", "s0"]),
        (reaching(vo.duplex_unit_boundary_ms(1)), ["f1"]),
    ]
    assert (theirs_first, FIRST_UNIT_MS) == (1000, 1030)


@pytest.mark.slow
async def test_vllm_client_against_our_server(server: Any, question_wav: Path, vo: Any) -> None:
    """vLLM-Omni's client holds a session with our real server; the log passes the invariants."""
    from app.media import decode_audio, float_to_pcm16

    pcm16 = float_to_pcm16(
        decode_audio(question_wav.read_bytes(), target_rate=INPUT_SAMPLE_RATE_HZ)
    )
    async with httpx.AsyncClient() as http:
        model = (await http.get(server.base_url + "/v1/models")).json()["data"][0]["id"]
    result = await drive_vllm_client(
        vo, server.ws_url, model, pcm16, chunk_ms=200, realtime=False, timeout_s=120
    )
    types_ = [e["type"] for e in result["events"]]
    # vLLM-Omni's client consumes session.created/updated in its handshake; its log starts after them
    assert result["session_id"] and "input_audio_buffer.committed" in types_
    assert types_[-1] == "session.closed"
    assert result["committed"] and result["decision"] == "speak"
    transcript = "".join(
        e["delta"] for e in result["events"] if e["type"] == "response.output_audio_transcript.delta"
    )
    assert "paris" in transcript.lower(), transcript
    assert [e for e in result["events"] if e["type"] == "error"] == []
    assert check_invariants(result["events"]) == []
