"""shrink_by_whole_factor: the cheap per-frame downscale of the page's video echo."""

from __future__ import annotations

import numpy as np
import pytest

from app.media import MediaError, shrink_by_whole_factor


@pytest.mark.parametrize(("shape", "max_side", "want"), [
    ((480, 640, 3), 320, (240, 320, 3)),   # webcam VGA: halved
    ((720, 1280, 3), 320, (180, 320, 3)),  # 720p: a quarter
    ((600, 800, 3), 320, (200, 267, 3)),   # factor 3, rounded up
    ((240, 320, 3), 320, (240, 320, 3)),   # fits: unchanged
])
def test_shrinks_by_the_smallest_whole_factor_that_fits(shape, max_side, want):
    out = shrink_by_whole_factor(np.zeros(shape, np.uint8), max_side)
    assert out.shape == want and out.dtype == np.uint8 and max(out.shape[:2]) <= max_side


def test_a_box_filter_of_a_strided_view_keeps_the_channel_order():
    bgr = np.zeros((4, 4, 3), np.uint8)
    bgr[:2, :2] = (10, 20, 30)  # top-left block, the rest black
    rgb_view = bgr[:, :, ::-1]
    out = shrink_by_whole_factor(rgb_view, 2)
    assert out.shape == (2, 2, 3)
    assert out[0, 0].tolist() == [30, 20, 10] and out[1, 1].tolist() == [0, 0, 0]


def test_fitting_input_is_returned_as_is():
    a = np.zeros((10, 10, 3), np.uint8)
    assert shrink_by_whole_factor(a, 10) is a


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_a_bad_limit_is_a_clear_error(bad):
    with pytest.raises(MediaError):
        shrink_by_whole_factor(np.zeros((4, 4, 3), np.uint8), bad)
