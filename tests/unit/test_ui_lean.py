"""The lean page path without a browser or models: the mic jitter buffer, the trim of a reply's
leading quiet, dry-clock gaps, and the timing trace (:mod:`app.ui.rtc`, :mod:`app.ui.playback`,
:mod:`app.ui.trace`)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from app.backend.protocol import events as E
from app.ui import rtc
from app.ui import trace as page_trace
from app.ui.playback import TRIM_KEEP_S, Playback, leading_quiet

RATE = 24_000


# ----------------------------------------------------------------------------- jitter buffer
def _pkt(seq: int) -> SimpleNamespace:
    return SimpleNamespace(sequence_number=seq & 0xFFFF, timestamp=(seq * 960) & 0xFFFFFFFF, payload_type=111,
                           _data=bytes([seq & 0xFF]))


def _feed(seqs: list[int]) -> tuple[list[int | None], list[int], rtc.AudioJitterBuffer]:
    extra: list[int] = []
    jb = rtc.AudioJitterBuffer(lambda p, f: extra.append(p.sequence_number))
    out = []
    for s in seqs:
        _, frame = jb.add(_pkt(s))
        out.append(None if frame is None else frame.data[0])
    return out, extra, jb


def test_jitter_buffer_hands_in_order_packets_out_at_once():
    out, extra, jb = _feed([10, 11, 12, 13])
    assert out == [10, 11, 12, 13] and extra == [] and jb.lost == 0


def test_jitter_buffer_waits_for_a_reordered_packet_then_decodes_both_in_order():
    out, extra, _ = _feed([10, 12, 11, 13])
    assert out == [10, None, 12, 13] and extra == [11]  # 11 goes to the decoder first, then 12


def test_jitter_buffer_gives_a_lost_packet_up_without_building_latency():
    out, extra, jb = _feed([10, 12, 13, 14, 15, 16])
    assert out == [10, None, None, 14, 15, 16] and extra == [12, 13] and jb.lost == 1
    assert _feed([10, 11, 13, 14, 15, 12, 16])[0][-2:] == [None, 16]  # too late: dropped


def test_jitter_buffer_across_the_sequence_wrap():
    out, _, _ = _feed([65534, 65535, 0, 1])
    assert out == [65534 & 0xFF, 65535 & 0xFF, 0, 1]


def test_install_swaps_the_audio_receivers_buffer_only():
    from aiortc.rtcrtpreceiver import RTCRtpReceiver

    assert rtc.install() and rtc.install()  # idempotent
    transport = SimpleNamespace(state="new")
    assert isinstance(RTCRtpReceiver("audio", transport)._RTCRtpReceiver__jitter_buffer,
                      rtc.AudioJitterBuffer)
    assert not isinstance(RTCRtpReceiver("video", transport)._RTCRtpReceiver__jitter_buffer,
                          rtc.AudioJitterBuffer)


# ----------------------------------------------------------------------------- playback
def _reply(quiet_s: float, loud_s: float) -> np.ndarray:
    return np.concatenate([np.zeros(int(quiet_s * RATE), np.float32), np.full(int(loud_s * RATE), 0.2, np.float32)])


def test_a_replys_leading_quiet_is_trimmed_but_counts_as_played():
    pb = Playback(RATE, lead_s=0.0, slice_s=0.05)
    pb.push("r1", _reply(0.04, 0.5))
    rel = pb.pop_due(10.0)
    assert rel is not None and rel.audio[int(TRIM_KEEP_S * RATE) + 1] == pytest.approx(0.2)
    assert pb.played_ms["r1"] == pytest.approx(40.0 - 1000 * TRIM_KEEP_S + 50.0, abs=0.1)
    pb.push("r1", _reply(0.04, 0.1))  # a later delta of the same reply: a pause in speech, kept
    trimmed = int(0.04 * RATE) - int(TRIM_KEEP_S * RATE)
    assert sum(s.audio.size for s in pb._segments) == int(0.54 * RATE) - trimmed + int(0.14 * RATE)


def test_leading_quiet_is_bounded():
    assert leading_quiet(np.zeros(RATE, np.float32), RATE) == int(0.2 * RATE) - int(TRIM_KEEP_S * RATE)
    assert leading_quiet(np.full(100, 0.3, np.float32), RATE) == 0
    assert leading_quiet(np.zeros(0, np.float32), RATE) == 0


def test_a_dry_playback_clock_mid_reply_is_reported():
    pb = Playback(RATE, lead_s=0.0, slice_s=0.1)
    pb.push("r1", np.full(int(0.1 * RATE), 0.2, np.float32))
    first = pb.pop_due(10.0)
    assert first is not None and first.response_id == "r1" and first.gap_s == 0.0
    pb.push("r1", np.full(int(0.1 * RATE), 0.2, np.float32))
    late = pb.pop_due(10.35)  # played out at 10.1: 250 ms without audio
    assert late is not None and late.gap_s == pytest.approx(0.25)
    pb.push("r2", np.full(int(0.1 * RATE), 0.2, np.float32))
    assert pb.pop_due(20.0).gap_s == 0.0  # a new reply after a pause is no gap


# ----------------------------------------------------------------------------- trace
def test_trace_marks_events_and_the_first_sample_leaving_the_track():
    tr = page_trace.PageTrace()
    tr.mic_frame(np.full(960, 0.3, np.float32), 48_000, 5.0)
    tr.mic_frame(np.zeros(960, np.float32), 48_000, 5.02)
    tr.on_event(E.SpeechStopped(audio_end_ms=1000), 6.0, lambda n: 5.01)
    tr.on_event(E.AudioDelta(response_id="r1", audio=_reply(0.04, 0.1), sample_rate_hz=RATE), 6.5, lambda n: None)
    (_, k1, f1), (_, k2, f2) = tr.marks
    assert k1 == "speech_stopped" and f1["mic_loud_arrived"] == 5.0 and f1["end_sample_arrived"] == 5.01
    assert k2 == "delta" and f2["onset_ms"] == pytest.approx(40.0)

    class Track:
        queue = asyncio.Queue()

        def __init__(self) -> None:
            self.pts = 0

        async def recv(self):
            f = SimpleNamespace(pts=self.pts, samples=480)
            self.pts += 480
            return f

    track = Track()
    tr.emitted_slice("r0", 1000, True)
    tr.dropped()  # cleared before it was sent: never marked
    rel = SimpleNamespace(response_id="r1", first_of=["r1"], audio=np.zeros(1440, np.float32), gap_s=0.0)
    tr.on_emit(rel, track)
    for _ in range(4):
        asyncio.run(track.recv())
    sent = [f for _, k, f in tr.marks if k == "sent"]
    assert sent == [{"response_id": "r1", "pos": 1000, "pts": 960}]
    assert tr.snapshot()["marks"][-1][1] == "sent"


def test_pipeline_probe_marks_the_utterance_asr_by_request_and_the_reply_by_response():
    class Stages:  # the three calls the probe wraps, as the pipeline makes them
        async def transcribe(self, ctx, audio, context=""):
            return "hello"

        async def _generate(self, ctx, prompt, params, on_text):
            for raw in ("", "The", "The answer"):
                on_text(raw)
            return "The answer"

        async def speak(self, ctx, segments):
            for _ in range(2):
                yield b"pcm"

    stages, tr = Stages(), page_trace.PageTrace()
    page_trace.probe_pipeline(stages)
    page_trace.register("s1", tr)
    try:
        async def turn():
            await stages.transcribe(SimpleNamespace(request_id="s1:asr1"), np.zeros(1600, np.float32))
            await stages._generate(SimpleNamespace(request_id="s1:r1"), None, None, lambda raw: True)
            return [c async for c in stages.speak(SimpleNamespace(request_id="s1:r1"), ["The answer"])]

        assert asyncio.run(turn()) == [b"pcm", b"pcm"]
        asyncio.run(stages.transcribe(SimpleNamespace(request_id="other:asr1"), np.zeros(160, np.float32)))
    finally:
        page_trace.unregister("s1")
    got = [(k, f.get("request") or f.get("response_id")) for _, k, f in tr.marks]
    assert got == [("asr_start", "asr1"), ("asr_done", "asr1"), ("llm_start", "r1"), ("llm_first", "r1"),
                   ("llm_done", "r1"), ("tts_first", "r1")]
    assert tr.marks[0][2]["audio_ms"] == 100.0
