"""app.ui.video_intake: FastRTC's audio-video track reads the camera with nothing sent back.

A real ``fastrtc.tracks.VideoStreamHandler_`` over a real aiortc ``MediaStreamTrack`` of PyAV
frames: with the patch, frames reach ``video_receive`` although nobody pulls the outbound track
(``recv()``), as with the page's send-only camera; pulling it too (a peer that takes video back)
still starts the intake once.
"""

from __future__ import annotations

import asyncio

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from app.ui import video_intake


class FrameTrack(MediaStreamTrack):
    """``n`` 64x48 bgr24 frames, then the end of the stream."""

    kind = "video"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    async def recv(self) -> av.VideoFrame:
        await asyncio.sleep(0.005)
        if self.left <= 0:
            raise MediaStreamError
        self.left -= 1
        img = np.full((48, 64, 3), 10 * self.left, np.uint8)
        frame = av.VideoFrame.from_ndarray(img, format="bgr24")
        return frame


class Handler:
    """What FastRTC's track needs of the handler: an async ``video_receive`` (and ``video_emit``)."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, ...]] = []

    async def video_receive(self, frame: np.ndarray) -> None:
        self.frames.append(frame.shape)

    async def video_emit(self) -> np.ndarray:
        return np.zeros((48, 64, 3), np.uint8)


class Channel:
    readyState = "open"

    def send(self, _msg: str) -> None:
        pass


def _track(handler: Handler, n: int):
    from fastrtc.tracks import VideoStreamHandler_
    from fastrtc.utils import Context

    cb = VideoStreamHandler_(FrameTrack(n), event_handler=handler, context=Context(webrtc_id="t"), fps=10)
    cb.set_channel(Channel())
    return cb


async def _wait(cond, timeout_s: float = 5.0) -> None:
    t = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > t:
            raise TimeoutError
        await asyncio.sleep(0.01)


def test_install_is_idempotent():
    assert video_intake.install() is True
    assert video_intake.install() is True


@pytest.mark.asyncio
async def test_camera_is_read_with_no_outbound_pull():
    assert video_intake.install()
    h = Handler()
    cb = _track(h, 5)
    await _wait(lambda: len(h.frames) == 5)  # (recv() never called: nothing is sent back)
    assert h.frames == [(48, 64, 3)] * 5
    cb.stop()


@pytest.mark.asyncio
async def test_pulling_the_echo_too_starts_the_intake_once():
    assert video_intake.install()
    h = Handler()
    cb = _track(h, 4)
    out = await cb.recv()  # a peer that takes video back pulls the outbound track
    assert out is not None and out.width == 64
    await _wait(lambda: len(h.frames) == 4)
    await asyncio.sleep(0.1)
    assert len(h.frames) == 4  # (one reader: every frame once)
    cb.stop()
