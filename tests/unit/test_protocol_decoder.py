"""The one client-event decoder: codes for bad frames, aliases, typed commands."""

import json

import pytest

from app.backend.protocol import commands as C

MAX = 1024


def dec(obj):
    return C.decode_command(json.dumps(obj) if not isinstance(obj, (str, bytes)) else obj, max_bytes=MAX)


@pytest.mark.parametrize(
    "raw, code",
    [
        ("not json", "invalid_json"),
        (b"\xff\xfe", "invalid_json"),
        ("[1, 2]", "bad_event"),
        ('{"no_type": 1}', "bad_event"),
        ('{"type": "nope.nothing"}', "unknown_event"),
        ('{"type": "conversation.item.create"}', "unknown_event"),
        ('{"type": "input_audio_buffer.append"}', "bad_event"),
        ('{"type": "input_audio_buffer.append", "audio": 5}', "bad_event"),
        ('{"type": "playback.ack", "played_ms": -1}', "bad_event"),
        ('{"type": "input_audio_buffer.append", "audio": "' + "A" * 2000 + '"}', "event_too_large"),
    ],
)
def test_bad_frames_get_stable_codes(raw, code):
    with pytest.raises(C.ProtocolError) as ei:
        dec(raw)
    assert ei.value.code == code


def test_event_id_is_echoed_in_errors():
    with pytest.raises(C.ProtocolError) as ei:
        dec({"type": "input_audio_buffer.append", "event_id": "ev7"})
    assert ei.value.event_id == "ev7"
    assert ei.value.param == "audio"


@pytest.mark.parametrize(
    "alias, cls",
    [
        ("input.commit", C.Commit),
        ("audio.playback_ack", C.PlaybackAck),
        ("close_session", C.CloseSession),
        ("close", C.CloseSession),
    ],
)
def test_aliases_map_to_ga_commands(alias, cls):
    extra = {"played_ms": 10} if cls is C.PlaybackAck else {}
    cmd = dec({"type": alias, **extra})
    assert isinstance(cmd, cls)


def test_append_is_typed():
    cmd = dec({"type": "input_audio_buffer.append", "audio": "AAAA", "video_frames": ["x"], "audio_end_ms": 100})
    assert isinstance(cmd, C.AudioAppend)
    assert cmd.video_frames == ["x"] and cmd.audio_end_ms == 100


@pytest.mark.parametrize("t", ["response.cancel", "barge_in", "output_audio_buffer.clear", "input.cancel"])
def test_hard_interrupts_share_one_command(t):
    assert isinstance(dec({"type": t}), C.CancelResponse)


def test_json_nested_too_deep_is_invalid_json_not_a_crash():
    # found by the fuzzer (tests/fuzz_protocol.py): json.loads raised RecursionError, which escaped
    # the decoder and ended the WebSocket handler with a traceback instead of an error event
    deep = '{"type": "session.update", "session": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(C.ProtocolError) as exc:
        C.decode_command(deep, max_bytes=len(deep))
    assert exc.value.code == "invalid_json" and "nested too deeply" in exc.value.message


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
def test_non_finite_numbers_are_bad_events(literal):
    # found reviewing what the fuzzer sends: Python's json reads NaN/Infinity, pydantic let
    # played_ms=Infinity through (>= 0), and playback.acknowledged echoed it back as a bare
    # Infinity token, which is not JSON (browsers' JSON.parse rejects the whole event)
    with pytest.raises(C.ProtocolError) as exc:
        dec('{"type": "playback.ack", "response_id": "r", "played_ms": ' + literal + "}")
    assert exc.value.code == "bad_event" and exc.value.param == "played_ms"
