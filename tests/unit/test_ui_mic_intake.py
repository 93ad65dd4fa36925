"""app.ui.mic_intake: 48 kHz mic frames become ~20 ms 16 kHz appends; unit ends and capture times are known."""

from __future__ import annotations

import numpy as np
import pytest

from app.constants import FIRST_UNIT_EXTRA_MS, INPUT_SAMPLE_RATE_HZ, ms_to_samples
from app.ui.mic_intake import MicIntake

FRAME = np.zeros(960, np.float32)  # 20 ms at 48 kHz


def test_48_khz_frames_become_16_khz_appends_once_20_ms_are_buffered():
    mic = MicIntake(1000)
    assert not mic.ready and mic.take(0.0) is None
    mic.push(FRAME, 48_000)
    mic.push(FRAME, 48_000)  # (the streaming resampler holds back its filter delay, ~150 samples, at the start)
    assert mic.ready
    audio, _ = mic.take(1.0)
    assert audio.dtype == np.float32 and 640 - 200 <= audio.size <= 640
    assert not mic.ready and mic.take(1.0) is None


def test_the_append_that_reaches_each_unit_end_says_so_once():
    unit_ms = 200
    mic = MicIntake(unit_ms)
    closes_at = []
    for i in range(60):  # 1.2 s
        mic.push(np.zeros(320, np.float32), INPUT_SAMPLE_RATE_HZ)
        _, closes = mic.take(i * 0.02)
        if closes:
            closes_at.append(mic.sent)
    first = ms_to_samples(FIRST_UNIT_EXTRA_MS + unit_ms, INPUT_SAMPLE_RATE_HZ)
    unit = ms_to_samples(unit_ms, INPUT_SAMPLE_RATE_HZ)
    ends = [first + k * unit for k in range(10)]
    want = [-(-b // 320) * 320 for b in ends if b <= mic.sent]  # the first 320-sample append at or past each end
    assert closes_at == want


def test_capture_time_of_a_sample_is_placed_between_the_appends_marks():
    mic = MicIntake(1000)
    for i in range(5):
        mic.push(np.zeros(320, np.float32), INPUT_SAMPLE_RATE_HZ)
        mic.take(10.0 + 0.02 * (i + 1))  # the append ending at sample 320 (i + 1) was captured by then
    assert mic.time_of_sample(320) == pytest.approx(10.02)
    assert mic.time_of_sample(480) == pytest.approx(10.03)
    assert mic.time_of_sample(10_000) is None


def test_before_a_session_only_the_newest_seconds_are_kept():
    mic = MicIntake(1000)
    for _ in range(100):  # 2 s
        mic.push(np.zeros(320, np.float32), INPUT_SAMPLE_RATE_HZ)
    mic.keep_last(0.5)
    audio, _ = mic.take(0.0)
    assert 8000 <= audio.size < 8000 + 320
