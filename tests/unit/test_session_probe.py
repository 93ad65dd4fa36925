"""SessionProbe: the instants behind the realtime latency histograms (a stepped clock, real metrics)."""

from __future__ import annotations

import numpy as np

from app.backend.duplex.probe import SessionProbe
from app.backend.metrics import EngineMetrics
from app.backend.protocol import events as E


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def value(m: EngineMetrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels or None) or 0.0


def test_first_audio_counts_from_the_arrival_of_the_last_speech_sample_on_the_page_route():
    m, clock = EngineMetrics(), Clock()
    p = SessionProbe(m, 1000, route=lambda: "page", clock=clock)
    for _ in range(30):  # 3 s of 100 ms appends, one every 100 ms
        p.on_input(1600)
        clock.t += 0.1
    # speech ended at 1.25 s of media time: that sample arrived with append 12, at t = 100 + 12 * 0.1
    p.on_event(E.SpeechStopped(epoch=0, audio_end_ms=1250, item_id="i1"))
    p.on_event(E.ResponseCreated(epoch=0, response_id="r1"))
    clock.t = 102.0
    p.on_event(E.AudioDelta(epoch=0, response_id="r1", audio=np.zeros(10, np.float32)))
    p.on_event(E.AudioDelta(epoch=0, response_id="r1", audio=np.zeros(10, np.float32)))  # not a first audio
    assert value(m, "omni_duplex_first_audio_seconds_count", route="page") == 1
    assert abs(value(m, "omni_duplex_first_audio_seconds_sum", route="page") - (102.0 - 101.2)) < 1e-9
    # the user talks over it from 2.0 s of media time (arrived at t = 102.0); the reply ends for that at t = 103
    p.on_event(E.SpeechStarted(epoch=0, audio_start_ms=2000, item_id="i2"))
    clock.t = 103.0
    p.on_event(E.ResponseListen(epoch=0, session_id="s", unit_index=2, response_id="r1", reason="user_overlap"))
    assert abs(value(m, "omni_duplex_barge_in_stop_seconds_sum", kind="overlap") - (103.0 - 102.0)) < 1e-9
    assert value(m, "omni_duplex_barge_in_stop_seconds_count", kind="client") == 0


def test_a_reply_that_ends_on_its_own_is_no_barge_in_and_units_time_their_decision():
    m, clock = EngineMetrics(), Clock()
    p = SessionProbe(m, 1000, clock=clock)
    p.on_input(16_480)  # 1030 ms: closes unit 0
    p.on_event(E.InputCommitted(epoch=0, item_id="i1", turn_id=1))  # a commit ends the turn: from now
    p.on_event(E.ResponseCreated(epoch=0, response_id="r1"))
    clock.t += 0.5
    p.on_event(E.AudioDelta(epoch=0, response_id="r1", audio=np.zeros(10, np.float32)))
    assert abs(value(m, "omni_duplex_first_audio_seconds_sum", route="realtime") - 0.5) < 1e-9
    p.on_event(E.SpeechStarted(epoch=0, audio_start_ms=900, item_id="i2"))  # overlap, but the reply completes
    p.on_event(E.ResponseDone(epoch=0, response_id="r1", status="completed"))
    assert value(m, "omni_duplex_barge_in_stop_seconds_count", kind="overlap") == 0
    p.on_event(E.UnitMetrics(epoch=0, unit_index=0, compute_ms=12.0, context_tokens=300, max_context_tokens=1200))
    assert abs(value(m, "omni_duplex_unit_decision_seconds_sum") - 0.5) < 1e-9
    assert value(m, "omni_duplex_context_tokens_sum") == 300
    assert value(m, "omni_duplex_context_used_ratio_sum") == 0.25
    assert abs(value(m, "omni_turn_detector_unit_seconds_sum") - 0.012) < 1e-9
