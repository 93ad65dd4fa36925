"""What the session takes as seen from the camera's text reads."""

from __future__ import annotations

import itertools

import pytest

from app.backend.duplex.camera import Camera, Seen


@pytest.mark.parametrize("read,seen", [
    ("OPEN 24 HOURS, Coffee $3.50", "OPEN 24 HOURS, Coffee $3.50"),
    ("EXIT", "EXIT"),
    ("0:00:17:250 345", ""),  # a clock overlay (Chromium's fake camera draws one): nothing seen
    ("", ""),
])
def test_a_read_with_no_word_is_nothing_seen(read: str, seen: str) -> None:
    cam = Camera("s", None, vision=True, max_frames_per_unit=2, spawn=None, post=None)  # type: ignore[arg-type]
    cam.on_seen(Seen(read))
    assert cam.seen_text == seen




def _camera_on_a_clock(monkeypatch) -> tuple[Camera, list[float], list[int]]:
    import app.backend.duplex.camera as camera_mod

    now = [1000.0]
    monkeypatch.setattr(camera_mod.time, "monotonic", lambda: now[0])
    started: list[int] = []
    cam = Camera("s", None, vision=True, max_frames_per_unit=2, spawn=None, post=None)  # type: ignore[arg-type]

    def spawn(coro):
        started.append(int(coro.cr_frame.f_locals["frame"][0, 0, 0]))
        coro.close()

    cam._spawn = spawn
    return cam, now, started


def _frame(tag: int):
    import numpy as np

    return np.full((4, 4, 3), tag, np.uint8)


def test_while_the_user_speaks_a_frame_is_read_about_once_a_unit(monkeypatch) -> None:
    from app.backend.duplex.camera import EAGER_READ_INTERVAL_S

    cam, now, started = _camera_on_a_clock(monkeypatch)
    at: list[float] = []
    spawn = cam._spawn
    cam._spawn = lambda coro: (at.append(now[0]), spawn(coro))
    cam.maybe_read(force=True)  # a speech onset
    for tag in range(1, 17):  # 8 s of the page's two frames a unit; each read takes 0.3 s
        cam.add([_frame(tag)])
        now[0] += 0.3
        cam.on_seen(Seen("EXIT"))
        now[0] += 0.2
    assert 7 <= len(started) <= 9  # about one a unit, not one a frame (16)
    assert min(b - a for a, b in itertools.pairwise(at)) >= EAGER_READ_INTERVAL_S
    assert started[-1] >= 10  # the reads keep up with the newest frames
    assert EAGER_READ_INTERVAL_S < 1.0  # frames sent one a unit are each read


def test_once_the_turn_has_ended_reads_slow_down(monkeypatch) -> None:
    from app.backend.duplex.camera import READ_REFRESH_S

    cam, now, started = _camera_on_a_clock(monkeypatch)
    cam.maybe_read(force=True)
    cam.add([_frame(1)])
    cam.on_seen(Seen("EXIT"))
    cam.turn_ended()
    for tag in range(2, 10):  # one frame a second while the reply plays and after
        now[0] += 1.0
        cam.add([_frame(tag)])
        cam.on_seen(Seen("EXIT"))
    assert started == [1, 1 + int(READ_REFRESH_S)]  # the refresh rate, not one a frame
    cam.maybe_read(force=True)  # the next question: the newest frame at once
    assert started[-1] == 9
