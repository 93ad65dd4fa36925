"""Unit tests of the server-event decoder (app/backend/protocol/decoder.py): round trips, beta names,
raw pass-through, handshake error shapes. Fast, no models, no servers."""

from __future__ import annotations

import base64
import dataclasses
import json

import numpy as np
import pytest

from app.backend.protocol import events as E
from app.backend.protocol.decoder import (
    EventDecodeError,
    RawEvent,
    WireAudioDelta,
    decode_event,
    decode_event_json,
)
from app.media import float_to_pcm16

SESSION = {"id": "duplex-1", "object": "realtime.session", "state": "active", "epoch": 2, "turn_id": 1,
           "capabilities": {"chunk_period_ms": 1000, "requires_ref_audio": True}}

TYPED_EVENTS: list[E.ServerEvent] = [
    E.SessionCreated(epoch=2, server_event_seq=1, session=SESSION),
    E.SessionUpdated(epoch=2, server_event_seq=2, session=SESSION),
    E.SessionClosed(epoch=3, server_event_seq=3, session_id="duplex-1", reason="client_close"),
    E.SessionExpired(epoch=3, server_event_seq=4, session_id="duplex-1", reason="idle_ttl_expired"),
    E.ErrorEvent(epoch=1, server_event_seq=5, code="bad_audio", message="odd byte count", event_id="evt_1",
                 param="audio"),
    E.ErrorEvent(epoch=1, server_event_seq=6, code="resource_exhausted", message="full", error_type="rate_limit_error"),
    E.SpeechStarted(epoch=1, server_event_seq=7, audio_start_ms=120, item_id="item_u1"),
    E.SpeechStopped(epoch=1, server_event_seq=8, audio_end_ms=1870, item_id="item_u1"),
    E.InputCommitted(epoch=4, server_event_seq=9, item_id="item_u1", turn_id=2, history_len=3),
    E.InputCleared(epoch=1, server_event_seq=10),
    E.InputTranscription(epoch=1, server_event_seq=11, item_id="item_u1", transcript="What is the capital?"),
    E.ItemDeleted(epoch=1, server_event_seq=12, item_id="item_old"),
    E.ResponseCreated(epoch=5, server_event_seq=13, response_id="resp_a"),
    E.OutputItemAdded(epoch=1, server_event_seq=14, response_id="resp_a"),
    E.OutputItemAdded(epoch=1, server_event_seq=15, response_id="resp_a", done=True, transcript="Paris."),
    E.ContentPart(epoch=1, server_event_seq=16, response_id="resp_a"),
    E.ContentPart(epoch=1, server_event_seq=17, response_id="resp_a", done=True, transcript="Paris."),
    E.ResponseSpeak(epoch=5, server_event_seq=18, response_id="resp_a"),
    E.TranscriptDelta(epoch=1, server_event_seq=20, response_id="resp_a", delta="Paris is "),
    E.TextDelta(epoch=1, server_event_seq=21, response_id="resp_a", delta="Paris"),
    E.TextDone(epoch=1, server_event_seq=22, response_id="resp_a", text="Paris."),
    E.AudioDone(epoch=1, server_event_seq=23, response_id="resp_a"),
    E.TranscriptDone(epoch=1, server_event_seq=24, response_id="resp_a", transcript="Paris is the capital."),
    E.ResponseDone(epoch=6, server_event_seq=25, response_id="resp_a", status="cancelled", reason="client_cancelled",
                   transcript="Paris is", metadata={"audio_duration_ms": 1000.0, "context_tokens": 80}),
    E.ResponseDone(epoch=6, server_event_seq=26, response_id="resp_b", status="completed", transcript="Hi."),
    E.RateLimitsUpdated(epoch=1, server_event_seq=27),
    E.ResponseListen(epoch=7, server_event_seq=28, session_id="duplex-1", unit_index=4),
    E.ResponseListen(epoch=7, server_event_seq=29, session_id="duplex-1", unit_index=9, response_id="resp_a",
                     reason="user_overlap", metadata={"compute_ms": 3.5}),
    E.OutputAudioCleared(epoch=1, server_event_seq=30, response_id="resp_a"),
    E.PlaybackAcknowledged(epoch=1, server_event_seq=31, response_id="resp_a", played_ms=300.0, committed_ms=300.0,
                           truncate=True, history_committed="Paris"),
    E.UnitMetrics(epoch=8, server_event_seq=32, unit_index=3, compute_ms=12.5, context_tokens=140,
                  max_context_tokens=4096, decision="speak"),
    E.ErrorEvent(epoch=1, server_event_seq=33, code="resource_exhausted", message="full", error_type="rate_limit_error",
                 retryable=True, retry_after_ms=5000),
    E.PlaybackAcknowledged(epoch=1, server_event_seq=34, response_id="resp_a", played_ms=9000.0, committed_ms=1200.0,
                           history_committed="Paris", delivered_ms=1200.0),
]


@pytest.mark.parametrize("ev", TYPED_EVENTS, ids=lambda ev: ev.to_wire()["type"])
def test_round_trip_typed_events(ev):
    wire = json.loads(json.dumps(ev.to_wire()))  # through real JSON
    back = decode_event(wire, epoch=ev.epoch)
    assert type(back) is type(ev)
    assert back == ev
    assert back.to_wire() == ev.to_wire()


def test_round_trip_without_caller_epoch_where_the_wire_carries_it():
    for ev in TYPED_EVENTS:
        back = decode_event(ev.to_wire(), epoch=-1)
        if back.epoch == -1:  # shapes without an epoch take the caller's
            continue
        assert back.epoch == ev.epoch, ev


def test_audio_delta_round_trip_is_pcm16_exact():
    rng = np.random.default_rng(0)
    audio = (0.5 * rng.standard_normal(24_000)).clip(-1, 1).astype(np.float32)
    ev = E.AudioDelta(epoch=3, server_event_seq=19, response_id="resp_a", audio=audio, sample_rate_hz=24_000,
                      audio_duration_ms=1000.04, text_chars=9, end_of_turn=True, session_id="duplex-1")
    wire = ev.to_wire()
    back = decode_event(json.loads(json.dumps(wire)), epoch=0)
    assert isinstance(back, E.AudioDelta) and isinstance(back, WireAudioDelta)
    assert back.audio.dtype == np.float32 and back.audio.shape == audio.shape
    assert np.max(np.abs(back.audio - audio)) <= 1.5 / 32767
    for f in ("epoch", "server_event_seq", "response_id", "sample_rate_hz", "text_chars", "end_of_turn", "session_id"):
        assert getattr(back, f) == getattr(ev, f), f
    assert back.audio_duration_ms == pytest.approx(1000.0)
    # re-rendering keeps the received bytes (no requantisation)
    assert back.to_wire() == wire
    # a replaced array is rendered anew
    back.audio = np.zeros(10, np.float32)
    assert base64.b64decode(back.to_wire()["delta"]) == b"\0\0" * 10


def test_beta_names_decode_like_ga():
    pcm = float_to_pcm16(np.full(480, 0.25, np.float32))
    beta = [
        {"type": "response.audio.delta", "response_id": "r", "delta": base64.b64encode(pcm).decode(),
         "sample_rate_hz": 24000},
        {"type": "response.audio_transcript.delta", "response_id": "r", "delta": "hi"},
        {"type": "response.audio.done", "response_id": "r"},
        {"type": "response.audio_transcript.done", "response_id": "r", "transcript": "hi"},
        {"type": "response.text.delta", "response_id": "r", "delta": "x"},
    ]
    got = [decode_event(o) for o in beta]
    assert [type(g) for g in got] == [WireAudioDelta, E.TranscriptDelta, E.AudioDone, E.TranscriptDone, E.TextDelta]
    assert got[0].audio.size == 480 and abs(float(got[0].audio[0]) - 0.25) < 1e-3
    assert got[1].delta == "hi" and got[3].transcript == "hi"
    # they render under the GA names
    assert got[0].to_wire()["type"] == "response.output_audio.delta"


def test_unknown_events_pass_through_unchanged():
    obj = {"type": "conversation.item.added", "server_event_seq": 40, "item": {"id": "item_x", "role": "user"},
           "extra": [1, 2, {"k": None}]}
    ev = decode_event(obj)
    assert isinstance(ev, RawEvent) and ev.type == "conversation.item.added"
    assert ev.to_wire() == obj
    ev.server_event_seq = 7  # re-stamped by a proxy
    assert ev.to_wire() == {**obj, "server_event_seq": 7}
    no_seq = {"type": "overlap.decision", "policy": "listen_only"}
    assert decode_event(no_seq).to_wire() == no_seq


def test_vllm_omni_shapes():
    listen = {"type": "response.listen", "session_id": "duplex-9", "epoch": 2,
              "response": {"status": "listening", "metadata": {"reason": "model_listen"}}}
    ev = decode_event(listen)
    assert isinstance(ev, E.ResponseListen) and ev.epoch == 2 and ev.response_id is None and ev.unit_index == 0
    done = {"type": "response.done", "response": {"id": "resp_1", "status": "cancelled",
                                                   "status_details": {"type": "cancelled", "reason": "barge_in"},
                                                   "output": [], "metadata": {"committed": True}}}
    ev = decode_event(done, epoch=4)
    assert isinstance(ev, E.ResponseDone)
    assert (ev.response_id, ev.status, ev.reason, ev.transcript, ev.epoch) == ("resp_1", "cancelled", "barge_in", "", 4)
    assert ev.metadata == {"committed": True}
    created = {"type": "response.created", "response": {"id": "resp_2", "status": "in_progress",
                                                         "metadata": {"duplex_event": "speak"}}}
    assert decode_event(created).response_id == "resp_2"


def test_handshake_error_shapes():
    flat = {"type": "error", "error": "duplex_session_capacity_exhausted: limit=4", "code": "resource_exhausted"}
    ev = decode_event(flat)
    assert isinstance(ev, E.ErrorEvent)
    assert (ev.code, ev.error_type, ev.message) == ("resource_exhausted", "rate_limit_error",
                                                    "duplex_session_capacity_exhausted: limit=4")
    both = {"type": "error", "code": "resource_exhausted", "message": "full",
            "error": {"type": "rate_limit_error", "code": "resource_exhausted", "message": "full"}}
    ev = decode_event(both)
    assert (ev.code, ev.error_type, ev.message) == ("resource_exhausted", "rate_limit_error", "full")


@pytest.mark.parametrize("bad", ["{nope", "[]", '{"type": 3}', '{"x": 1}',
                                 '{"type": "response.output_audio.delta", "delta": "!!"}',
                                 '{"type": "response.output_audio.delta", "delta": "AA=="}',
                                 '{"type": "response.output_audio.delta", "delta": "AAAA", "format": "mp3"}'])
def test_malformed_events_raise(bad):
    with pytest.raises(EventDecodeError):
        decode_event_json(bad)


def test_every_typed_event_class_is_covered():
    covered = {type(ev) for ev in TYPED_EVENTS} | {E.AudioDelta}
    declared = {c for c in vars(E).values()
                if isinstance(c, type) and issubclass(c, E.ServerEvent) and dataclasses.is_dataclass(c)
                and c.TYPE}
    assert declared <= covered, declared - covered
