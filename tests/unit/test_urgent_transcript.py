"""Words said over a reply are transcribed first: ahead of the reply's own voice work for the
cores (the session holds its input until they are read); other transcripts wait their turn."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import soundfile as sf

from app.backend.models.tiny.runtime import CORES, Priority
from tests.conftest import espeak_wav


@pytest.fixture(scope="module")
def wait_stop(tmp_path_factory) -> np.ndarray:
    audio, _ = sf.read(espeak_wav("Wait, stop.", tmp_path_factory.mktemp("urgent") / "wait.wav"), dtype="float32")
    return audio


def test_an_urgent_transcript_goes_before_the_replys_voice_work(tiny_family, wait_stop):
    release = threading.Event()
    seen: dict[str, bool] = {}

    def talker_piece() -> None:  # the reply's Talker holds the cores
        with CORES.hold(Priority.VOICE):
            release.wait(10)

    def next_talker_piece(fut) -> None:  # and its next piece waits for them
        with CORES.hold(Priority.VOICE):
            time.sleep(0.2)
            seen["urgent done before the next piece ran"] = fut.done()

    holder = threading.Thread(target=talker_piece)
    holder.start()
    time.sleep(0.1)
    pool = ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(tiny_family.thinker.transcribe_batch, [(wait_stop, "")], True)
    waiter = threading.Thread(target=lambda: (time.sleep(0.05), next_talker_piece(fut)))
    waiter.start()
    time.sleep(0.3)  # both wait for the cores now
    release.set()
    [text] = fut.result(timeout=30)
    waiter.join(30)
    holder.join(30)
    pool.shutdown()
    assert "stop" in text.lower()
    assert seen == {"urgent done before the next piece ran": True}


def test_a_plain_transcript_waits_behind_the_voice_work(tiny_family, wait_stop):
    release = threading.Event()
    seen: dict[str, bool] = {}
    plain: list[str] = []

    def talker_piece() -> None:
        with CORES.hold(Priority.VOICE):
            release.wait(10)

    def next_talker_piece() -> None:
        with CORES.hold(Priority.VOICE):
            time.sleep(0.2)
            seen["plain done before the next piece ran"] = bool(plain)

    holder = threading.Thread(target=talker_piece)
    holder.start()
    time.sleep(0.1)
    asr = threading.Thread(target=lambda: plain.extend(tiny_family.thinker.transcribe_batch([(wait_stop, "")])))
    asr.start()
    time.sleep(0.05)
    waiter = threading.Thread(target=next_talker_piece)
    waiter.start()
    time.sleep(0.3)
    release.set()
    for t in (asr, waiter, holder):
        t.join(30)
    assert "stop" in plain[0].lower()
    assert seen == {"plain done before the next piece ran": False}  # (why the overlap reads are urgent)
