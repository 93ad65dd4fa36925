"""Unit tests for app.media.image."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageFile

from app.media import (
    MediaError,
    decode_image,
    encode_jpeg,
    encode_png,
    fit_within,
    grid_shape,
    stack_frames,
)

BIG = 10**9
RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def solid(h: int, w: int, colour: tuple[int, int, int]) -> np.ndarray:
    out = np.zeros((h, w, 3), np.uint8)
    out[:] = colour
    return out


def png_bytes(img: Image.Image) -> bytes:
    bio = io.BytesIO()
    img.save(bio, format="PNG")
    return bio.getvalue()


# ------------------------------------------------------------------ decode


def test_decode_png_exact() -> None:
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 256, size=(17, 23, 3), dtype=np.uint8)
    out = decode_image(encode_png(arr), max_bytes=BIG, max_pixels=BIG)
    assert out.dtype == np.uint8 and out.shape == (17, 23, 3)
    assert np.array_equal(out, arr)


def test_decode_grey_and_rgba() -> None:
    grey = Image.fromarray(np.full((4, 5), 77, np.uint8))
    out = decode_image(png_bytes(grey), max_bytes=BIG, max_pixels=BIG)
    assert out.shape == (4, 5, 3) and (out == 77).all()
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[:2] = (255, 0, 0, 255)  # opaque red top, transparent bottom
    out = decode_image(png_bytes(Image.fromarray(rgba)), max_bytes=BIG, max_pixels=BIG)
    assert out[0, 0].tolist() == list(RED)
    assert out[3, 3].tolist() == list(WHITE)  # transparent composited over white


def test_decode_bad_bytes() -> None:
    good = encode_png(solid(32, 32, RED))
    for bad in (b"", b"this is not an image", good[:60]):
        with pytest.raises(MediaError) as err:
            decode_image(bad, max_bytes=BIG, max_pixels=BIG)
        assert err.value.code == "bad_image"
        assert isinstance(err.value, ValueError)
        assert " at 0x" not in str(err.value)  # no Python object repr in a client-facing message


def test_decode_limits() -> None:
    data = encode_png(solid(30, 40, BLUE))
    assert decode_image(data, max_bytes=len(data), max_pixels=1200).shape == (30, 40, 3)
    with pytest.raises(MediaError) as err:
        decode_image(data, max_bytes=len(data) - 1, max_pixels=BIG)
    assert (err.value.code, err.value.param) == ("too_large", "max_bytes")
    with pytest.raises(MediaError) as err:
        decode_image(data, max_bytes=BIG, max_pixels=1199)
    assert (err.value.code, err.value.param) == ("too_large", "max_pixels")


def test_pixel_limit_checked_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode_png(solid(400, 500, GREEN))

    def boom(self: ImageFile.ImageFile) -> None:
        raise AssertionError("pixels decoded before the size check")

    monkeypatch.setattr(ImageFile.ImageFile, "load", boom)
    with pytest.raises(MediaError) as err:
        decode_image(data, max_bytes=BIG, max_pixels=1000)
    assert err.value.code == "too_large"


def test_decompression_bomb_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    # 121 px -> PIL warning, 400 px -> PIL error; both become too_large
    for side in (11, 20):
        with pytest.raises(MediaError) as err:
            decode_image(
                encode_png(solid(side, side, RED)), max_bytes=BIG, max_pixels=BIG
            )
        assert err.value.code == "too_large"


def test_exif_orientation_applied() -> None:
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = RED  # left half red
    arr[:, 20:] = BLUE  # right half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    bio = io.BytesIO()
    Image.fromarray(arr).save(bio, format="JPEG", quality=95, exif=exif)
    out = decode_image(bio.getvalue(), max_bytes=BIG, max_pixels=BIG)
    assert out.shape == (40, 20, 3)
    top, bottom = out[5, 10].astype(int), out[35, 10].astype(int)
    assert top[0] > 200 and top[2] < 60  # the red left edge is now on top
    assert bottom[2] > 200 and bottom[0] < 60


# ------------------------------------------------------------------ encode / resize


def test_encode_jpeg_round_trip() -> None:
    arr = solid(24, 32, (200, 100, 50))
    data = encode_jpeg(arr, quality=90)
    assert data[:3] == b"\xff\xd8\xff"
    out = decode_image(data, max_bytes=BIG, max_pixels=BIG)
    assert out.shape == arr.shape
    assert np.abs(out.astype(int) - arr.astype(int)).max() <= 6
    smaller = encode_jpeg(
        np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8), 10
    )
    larger = encode_jpeg(
        np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8), 95
    )
    assert len(smaller) < len(larger)
    for bad in (np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3), np.float32)):
        with pytest.raises(MediaError):
            encode_jpeg(bad)
    with pytest.raises(MediaError):
        encode_jpeg(arr, quality=0)


def test_fit_within() -> None:
    arr = solid(50, 100, GREEN)
    out = fit_within(arr, 40)
    assert out.shape == (20, 40, 3) and (out == GREEN).all()
    tall = fit_within(solid(99, 33, RED), 30)
    assert tall.shape == (30, 10, 3)
    assert fit_within(arr, 100) is arr  # never upscaled, untouched
    with pytest.raises(MediaError):
        fit_within(arr, 0)


# ------------------------------------------------------------------ stacking


@pytest.mark.parametrize(
    ("n", "shape"),
    [
        (1, (1, 1)),
        (2, (1, 2)),
        (3, (2, 2)),
        (4, (2, 2)),
        (5, (2, 3)),
        (7, (3, 3)),
        (9, (3, 3)),
        (10, (3, 4)),
    ],
)
def test_grid_shape(n: int, shape: tuple[int, int]) -> None:
    assert grid_shape(n) == shape


def test_stack_frames_grid_of_three() -> None:
    # the last frame has another size
    frames = [solid(48, 64, RED), solid(48, 64, GREEN), solid(10, 7, BLUE)]
    out = stack_frames(frames)
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8
    # 2x2 grid of 24x32 cells, row-major; the 4th cell is black padding
    assert (out[:24, :32] == RED).all()
    assert (out[:24, 32:] == GREEN).all()
    assert (out[24:, :32] == BLUE).all()  # resized to fill its cell
    assert (out[24:, 32:] == 0).all()


def test_stack_frames_two_and_remainder_padding() -> None:
    out = stack_frames([solid(48, 64, RED), solid(48, 64, BLUE)])
    assert out.shape == (48, 64, 3)
    assert (out[:, :32] == RED).all() and (out[:, 32:] == BLUE).all()  # 1x2 grid
    colours = [RED, GREEN, BLUE, WHITE, (9, 9, 9)]
    odd = stack_frames([solid(31, 50, c) for c in colours])  # 2x3 grid, cells 15x16
    assert odd.shape == (31, 50, 3)
    for i, c in enumerate(colours):
        r, col = divmod(i, 3)
        assert (odd[r * 15 : (r + 1) * 15, col * 16 : (col + 1) * 16] == c).all()
    assert (odd[15:30, 32:48] == 0).all()  # unused 6th cell
    assert (odd[:, 48:] == 0).all() and (odd[30:] == 0).all()  # remainder strips


def test_stack_frames_single_and_keep_aspect() -> None:
    one = solid(8, 8, RED)
    out = stack_frames([one])
    assert np.array_equal(out, one) and out is not one
    kept = stack_frames([solid(48, 64, RED), solid(48, 64, GREEN)], keep_aspect=True)
    # cells are 48x32; a 4:3 frame fits as 24x32, centred vertically (rows 12..35)
    assert (
        (kept[12:36, :32] == RED).all()
        and (kept[:12] == 0).all()
        and (kept[36:] == 0).all()
    )
    assert (kept[12:36, 32:] == GREEN).all()


def test_stack_frames_errors() -> None:
    with pytest.raises(MediaError):
        stack_frames([])
    with pytest.raises(MediaError):
        stack_frames([solid(2, 2, RED)] * 9)  # 3x3 grid cannot fit in 2x2 pixels
    with pytest.raises(MediaError):
        stack_frames([np.zeros((4, 4), np.uint8)])
