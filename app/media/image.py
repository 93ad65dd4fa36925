"""Image decode / encode / resize and frame stacking.

Images travel as ``np.ndarray`` of dtype ``uint8``, shape ``(height, width, 3)``, RGB order.
Every failure raises :class:`app.media.errors.MediaError` (``bad_image`` / ``too_large``).
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from app.media.errors import BAD_IMAGE, TOO_LARGE, MediaError

_RESIZE_FILTER = Image.Resampling.BICUBIC
_WHITE = (255, 255, 255)


def _check_rgb(rgb: Any, name: str = "image") -> np.ndarray:
    arr = np.asarray(rgb)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3 or 0 in arr.shape:
        raise MediaError(
            BAD_IMAGE,
            f"{name} must be uint8 of shape (h, w, 3), got {arr.dtype} {arr.shape}",
        )
    return arr


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any PIL mode -> RGB; transparent pixels are composited over white."""
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        bg = Image.new("RGB", rgba.size, _WHITE)
        bg.paste(rgba, mask=rgba.getchannel("A"))
        return bg
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        scale = 1.0 if img.mode == "F" else 257.0
        arr = np.clip(np.rint(arr / scale), 0, 255).astype(np.uint8)
        return Image.fromarray(arr).convert("RGB")
    return img if img.mode == "RGB" else img.convert("RGB")


def decode_image(data: bytes, *, max_bytes: int, max_pixels: int) -> np.ndarray:
    """Decode JPEG/PNG/WebP/GIF/BMP/... bytes into an upright RGB array.

    The byte size is checked first, then the pixel count from the header (``Image.open`` does
    not decode pixels), and only then are the pixels decoded, so an oversized image costs no
    decode time. PIL's decompression-bomb warning is turned into an error too. EXIF
    orientation is applied (``ImageOps.exif_transpose``); a malformed EXIF block is ignored.
    Only the first frame of animated formats is used; transparency is composited over white.

    Args:
        data: encoded image bytes.
        max_bytes: limit on ``len(data)``.
        max_pixels: limit on ``width * height``.

    Returns:
        uint8 array, shape (h, w, 3), RGB (h, w after EXIF rotation).

    Raises:
        MediaError: ``too_large`` over ``max_bytes`` / ``max_pixels`` (or PIL's bomb limit);
            ``bad_image`` for empty, undecodable or truncated data.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MediaError(
            BAD_IMAGE, f"image data must be bytes, got {type(data).__name__}"
        )
    size = len(data)
    if size > max_bytes:
        raise MediaError(
            TOO_LARGE, f"image is {size} bytes, limit {max_bytes}", param="max_bytes"
        )
    if size == 0:
        raise MediaError(BAD_IMAGE, "image data is empty")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(bytes(data)))
            width, height = img.size
            if width <= 0 or height <= 0:
                raise MediaError(BAD_IMAGE, f"image has invalid size {width}x{height}")
            if width * height > max_pixels:
                raise MediaError(
                    TOO_LARGE,
                    f"image is {width}x{height} = {width * height} pixels, limit {max_pixels}",
                    param="max_pixels",
                )
            img.load()
        except MediaError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise MediaError(
                TOO_LARGE, f"image too large: {exc}", param="max_pixels"
            ) from exc
        except UnidentifiedImageError as exc:  # Pillow's message names an in-memory object: not useful
            raise MediaError(BAD_IMAGE, "cannot decode image: not a format Pillow recognises "
                                        "(send PNG, JPEG, WebP, GIF or BMP)") from exc
        except (
            OSError,
            ValueError,
            SyntaxError,
            EOFError,
        ) as exc:
            raise MediaError(BAD_IMAGE, f"cannot decode image: {exc}") from exc
        except (
            Exception
        ) as exc:  # Pillow plugins raise assorted errors on hostile input
            raise MediaError(BAD_IMAGE, f"cannot decode image: {exc}") from exc
    # A malformed EXIF block keeps the stored orientation rather than failing the image.
    with contextlib.suppress(
        OSError, ValueError, KeyError, TypeError, IndexError, SyntaxError
    ):
        upright = ImageOps.exif_transpose(img)
        if upright is not None:
            img = upright
    try:
        return np.array(_to_rgb(img), dtype=np.uint8)
    except Exception as exc:
        raise MediaError(BAD_IMAGE, f"cannot convert image to RGB: {exc}") from exc


def encode_jpeg(rgb: np.ndarray, quality: int = 80) -> bytes:
    """Encode an RGB array as baseline JPEG.

    Args:
        rgb: uint8 array, shape (h, w, 3).
        quality: JPEG quality 1..95.

    Returns:
        JPEG bytes.

    Raises:
        MediaError: ``bad_image`` for a wrong array or quality.
    """
    arr = _check_rgb(rgb)
    if (
        isinstance(quality, bool)
        or not isinstance(quality, int)
        or not 1 <= quality <= 95
    ):
        raise MediaError(
            BAD_IMAGE, f"JPEG quality must be 1..95, got {quality!r}", param="quality"
        )
    bio = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(bio, format="JPEG", quality=quality)
    return bio.getvalue()


def encode_png(rgb: np.ndarray) -> bytes:
    """Encode an RGB array (uint8, shape (h, w, 3)) as PNG bytes (lossless).

    Raises:
        MediaError: ``bad_image`` for a wrong array.
    """
    arr = _check_rgb(rgb)
    bio = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(bio, format="PNG")
    return bio.getvalue()


def _resize(arr: np.ndarray, width: int, height: int) -> np.ndarray:
    if arr.shape[1] == width and arr.shape[0] == height:
        return arr
    img = Image.fromarray(np.ascontiguousarray(arr))
    return np.asarray(img.resize((width, height), _RESIZE_FILTER, reducing_gap=3.0))


def fit_within(rgb: np.ndarray, max_side: int) -> np.ndarray:
    """Downscale so the longer side is at most ``max_side`` pixels, keeping the aspect ratio.

    Args:
        rgb: uint8 array, shape (h, w, 3).
        max_side: limit for ``max(h, w)``, pixels (>= 1).

    Returns:
        The input array itself when it already fits (never upscaled); otherwise a new uint8
        array of shape (h', w', 3) with ``max(h', w') == max_side`` and the short side
        ``round(short * max_side / long)`` (at least 1).

    Raises:
        MediaError: ``bad_image`` for a wrong array or ``max_side < 1``.
    """
    arr = _check_rgb(rgb)
    if isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 1:
        raise MediaError(
            BAD_IMAGE, f"max_side must be >= 1, got {max_side!r}", param="max_side"
        )
    h, w = arr.shape[:2]
    longest = max(h, w)
    if longest <= max_side:
        return arr
    scale = max_side / longest
    new_w = max_side if w == longest else max(1, round(w * scale))
    new_h = max_side if h == longest else max(1, round(h * scale))
    return _resize(arr, new_w, new_h)


def shrink_by_whole_factor(rgb: np.ndarray, max_side: int) -> np.ndarray:
    """Downscale by the smallest whole factor that brings the longer side to at most ``max_side``
    (a box filter: PIL's ``Image.reduce``), for previews.

    About 1 ms for 640x480 -> 320x240 where :func:`fit_within`'s resampling takes ~4 ms (measured
    on this project's 2-core machine), so it suits a per-frame video echo; the result may be smaller
    than ``max_side`` (800 px -> 267 px for 320).

    Args:
        rgb: uint8 array, shape (h, w, 3) (any channel order; it is kept).
        max_side: limit for ``max(h, w)``, pixels (>= 1).

    Returns:
        The input array itself when it already fits; otherwise a new contiguous uint8 array of
        shape ``(ceil(h / f), ceil(w / f), 3)`` with ``f = ceil(max(h, w) / max_side)``.

    Raises:
        MediaError: ``bad_image`` for a wrong array or ``max_side < 1``.
    """
    arr = _check_rgb(rgb)
    if isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 1:
        raise MediaError(BAD_IMAGE, f"max_side must be >= 1, got {max_side!r}", param="max_side")
    factor = -(-max(arr.shape[:2]) // max_side)
    if factor <= 1:
        return arr
    return np.asarray(Image.fromarray(np.ascontiguousarray(arr)).reduce(factor))


def grid_shape(n: int) -> tuple[int, int]:
    """Near-square grid for ``n`` tiles: ``(rows, cols)`` with ``cols = ceil(sqrt(n))``,
    ``rows = ceil(n / cols)`` (n=1 -> 1x1, 2 -> 1x2, 3/4 -> 2x2, 5/6 -> 2x3, 9 -> 3x3)."""
    if n < 1:
        raise MediaError(BAD_IMAGE, f"need at least one tile, got {n}")
    cols = math.ceil(math.sqrt(n))
    return math.ceil(n / cols), cols


def stack_frames(
    frames: Sequence[np.ndarray], *, keep_aspect: bool = False
) -> np.ndarray:
    """Tile the sub-frames of one unit into ONE composite image of the capture size.

    This is the image half of vLLM-Omni's ``--stack-frames N`` (MiniCPM-o high-refresh
    video): each duplex unit sends its base frame plus one composite built from the ``N-1``
    sub-frames captured inside the unit, so the Thinker sees ``N`` moments for the token cost
    of two images. Call it with those ``N-1`` sub-frames, oldest first.

    Layout: ``n = len(frames)`` tiles on a near-square grid (:func:`grid_shape`:
    ``cols = ceil(sqrt(n))``, ``rows = ceil(n / cols)``), row-major from the top-left. The
    composite has the size ``(H, W)`` of ``frames[0]``; every cell is ``(H // rows, W // cols)``
    pixels, and each frame (whatever its own size) is resized into its cell — stretched to
    fill it, or, with ``keep_aspect=True``, fitted inside it and centred. Unused cells, the
    ``H % rows`` / ``W % cols`` remainder strips and letterbox bars are black (0).

    Args:
        frames: ``n >= 1`` uint8 RGB arrays, shapes (h_i, w_i, 3), sizes may differ.
        keep_aspect: preserve each frame's aspect ratio inside its cell.

    Returns:
        uint8 array, shape (H, W, 3) == ``frames[0].shape``. With ``n == 1`` this is a copy of
        ``frames[0]``.

    Raises:
        MediaError: ``bad_image`` for an empty list, a wrong array, or a first frame too small
            to hold one pixel per cell.
    """
    if len(frames) == 0:
        raise MediaError(BAD_IMAGE, "stack_frames needs at least one frame")
    arrays = [_check_rgb(f, f"frames[{i}]") for i, f in enumerate(frames)]
    height, width = arrays[0].shape[:2]
    rows, cols = grid_shape(len(arrays))
    cell_h, cell_w = height // rows, width // cols
    if cell_h < 1 or cell_w < 1:
        raise MediaError(
            BAD_IMAGE,
            f"a {width}x{height} frame cannot hold a {cols}x{rows} grid of sub-frames",
        )
    out = np.zeros((height, width, 3), dtype=np.uint8)
    for i, arr in enumerate(arrays):
        r, c = divmod(i, cols)
        y0, x0 = r * cell_h, c * cell_w
        if keep_aspect:
            h, w = arr.shape[:2]
            scale = min(cell_w / w, cell_h / h)
            tw = min(cell_w, max(1, round(w * scale)))
            th = min(cell_h, max(1, round(h * scale)))
            y0 += (cell_h - th) // 2
            x0 += (cell_w - tw) // 2
        else:
            th, tw = cell_h, cell_w
        out[y0 : y0 + th, x0 : x0 + tw] = _resize(arr, tw, th)
    return out
