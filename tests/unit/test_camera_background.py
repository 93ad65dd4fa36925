"""Camera reads in the background: the same description as a foreground read, on a thread of the
lowest OS priority, and never through the core lock (a read in flight must not hold up speech work)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

from app.backend.models.tiny.ocr import RapidOcr
from app.backend.models.tiny.runtime import CORES, Priority
from app.backend.models.tiny.vision import (
    BACKGROUND_NICE,
    BackgroundCamera,
    SceneDescriber,
)


@pytest.fixture(scope="module")
def reader():
    r = BackgroundCamera()
    yield r
    r.close()


@pytest.fixture(scope="module")
def sign() -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", (640, 480), "white")
    ImageDraw.Draw(img).text((40, 200), "EXIT 12", fill="black", font=ImageFont.load_default(size=56))
    return np.asarray(img)


def test_reads_what_a_foreground_read_reads(reader, sign):
    seen = reader.submit(sign).result(timeout=60)
    assert seen == SceneDescriber(RapidOcr()).describe(sign) == 'a white background; the text: EXIT 12'


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_runs_at_the_lowest_os_priority(reader):
    nice = reader._pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    assert nice.result(timeout=60) == BACKGROUND_NICE == 19


def test_never_waits_for_the_core_lock(reader, sign):
    reader.submit(sign).result(timeout=60)  # (engine built)
    waited_out = CORES.waited_out
    with CORES.hold(Priority.TURN):  # speech work holds the cores for longer than a read takes
        text = reader.submit(sign).result(timeout=60)
    assert "EXIT 12" in text
    assert CORES.waited_out == waited_out  # it did not queue for the lock (it would have run after 5 s)


def test_a_bad_frame_fails_its_future_only(reader, sign):
    with pytest.raises(ValueError):
        reader.submit(np.zeros((8, 8, 3), np.float32)).result(timeout=60)
    assert "EXIT 12" in reader.submit(sign).result(timeout=60)
