"""What the session takes as seen from the camera's text reads."""

from __future__ import annotations

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
