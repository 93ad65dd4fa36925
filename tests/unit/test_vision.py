"""The ``tiny`` eyes (app/backend/models/tiny/vision.py): frames drawn with Pillow here, then
JPEG-compressed and noised as a camera would, described in one line; the text part uses the
real RapidOCR."""

from __future__ import annotations

import io
import math
import random

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from app.backend.models.tiny.clock import angle_of
from app.backend.models.tiny.ocr import RapidOcr
from app.backend.models.tiny.shapes import SHAPES
from app.backend.models.tiny.vision import SceneDescriber

NUMBERS = ["", "one", "two", "three", "four", "five"]
SHAPE_WORDS = [*SHAPES, *(s + "s" for s in SHAPES)]


@pytest.fixture(scope="module")
def eyes() -> SceneDescriber:
    return SceneDescriber(None)


@pytest.fixture(scope="module")
def eyes_ocr() -> SceneDescriber:
    return SceneDescriber(RapidOcr(threads=1))


def camera(img: Image.Image, *, quality: int = 60, noise: float = 6.0, seed: int = 0) -> np.ndarray:
    """``img`` as a camera would give it: Gaussian noise, then JPEG at ``quality``."""
    a = np.asarray(img, dtype=np.float32)
    a = a + np.random.default_rng(seed).normal(0.0, noise, a.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf).convert("RGB"))


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, colour: str) -> None:
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
    elif shape == "square":
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=colour)
    elif shape == "rectangle":
        draw.rectangle([cx - 1.6 * r, cy - 0.7 * r, cx + 1.6 * r, cy + 0.7 * r], fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + 0.8 * r), (cx - r, cy + 0.8 * r)], fill=colour)
    elif shape == "star":
        pts = [(cx + (r if i % 2 == 0 else 0.42 * r) * math.sin(math.pi * i / 5),
                cy - (r if i % 2 == 0 else 0.42 * r) * math.cos(math.pi * i / 5)) for i in range(10)]
        draw.polygon(pts, fill=colour)
    else:
        raise AssertionError(shape)


def scene(items: list[tuple[str, str]], background: str = "white", size=(640, 480), seed: int = 0) -> Image.Image:
    """``items`` (shape, colour) drawn in distinct cells of a 3x2 grid, in a seeded random order."""
    img = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(img)
    w, h = size
    cells = [(c, r) for r in range(2) for c in range(3)]
    random.Random(seed).shuffle(cells)
    for (shape, colour), (c, r) in zip(items, cells, strict=False):
        draw_shape(draw, shape, (c + 0.5) * w / 3, (r + 0.5) * h / 2, min(w / 3, h / 2) * 0.3, colour)
    return img


@pytest.mark.parametrize("shape", ["circle", "square", "triangle", "star", "rectangle"])
@pytest.mark.parametrize("colour,background", [("red", "white"), ("blue", "yellow"), ("green", "black"),
                                               ("purple", "white"), ("orange", "grey")])
def test_one_big_shape_names_its_colour_and_shape(eyes, shape, colour, background) -> None:
    img = Image.new("RGB", (640, 480), background)
    draw_shape(ImageDraw.Draw(img), shape, 320, 240, 150, colour)
    said = eyes.describe(camera(img))
    assert said.startswith(f"a {background} background with a "), said
    assert f"{colour} {shape}" in said, said


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape,colour", [("circle", "red"), ("square", "blue"), ("triangle", "green"),
                                          ("star", "yellow")])
def test_counts_of_one_to_five(eyes, n, shape, colour) -> None:
    background = "black" if colour == "yellow" else "white"
    said = eyes.describe(camera(scene([(shape, colour)] * n, background, seed=n), seed=n))
    if n == 1:
        assert f"a {colour} {shape}" in said, said
    else:
        assert f"{NUMBERS[n]} {colour} {shape}s" in said, said
    others = [w for w in SHAPE_WORDS if w not in (shape, shape + "s")]
    assert not any(f" {w}" in said for w in others), said


def test_groups_counts_and_places(eyes) -> None:
    img = Image.new("RGB", (1280, 720), "white")
    draw = ImageDraw.Draw(img)
    for i in range(3):
        draw_shape(draw, "circle", 150 + i * 170, 200, 60, "red")
    draw_shape(draw, "square", 1100, 550, 80, "blue")
    said = eyes.describe(camera(img))
    assert said == "a white background with three red circles and one blue square at the bottom right", said


def test_a_written_word_appears(eyes_ocr) -> None:
    img = Image.new("RGB", (640, 480), "white")
    draw = ImageDraw.Draw(img)
    draw.text((60, 60), "BANANA", fill="black", font=ImageFont.load_default(size=64))
    draw_shape(draw, "circle", 450, 330, 90, "red")
    said = eyes_ocr.describe(camera(img))
    assert "the text: BANANA" in said and "red circle" in said, said
    assert "black" not in said  # the letters are text, not black shapes


def test_overlay_digits_are_not_text(eyes_ocr) -> None:
    """A running clock overlay like Chromium's fake camera's ("0:00:17:250 345") is not reported."""
    img = Image.new("RGB", (640, 480), (40, 160, 60))
    ImageDraw.Draw(img).text((30, 400), "0:00:17:250 345", fill="white", font=ImageFont.load_default(size=40))
    said = eyes_ocr.describe(camera(img))
    assert said == "a plain green background", said


def draw_clock(hour: int, minute: int, size=(640, 480), background="lightblue", radius=180) -> Image.Image:
    img = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(img)
    cx, cy, r = size[0] / 2, size[1] / 2, radius
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill="white", outline="black", width=6)
    for k in range(12):
        a = math.radians(k * 30)
        draw.line([cx + 0.85 * r * math.sin(a), cy - 0.85 * r * math.cos(a),
                   cx + 0.95 * r * math.sin(a), cy - 0.95 * r * math.cos(a)], fill="black", width=4)
    hour_deg, minute_deg = angle_of(hour, minute)
    for deg, length, width in ((hour_deg, 0.5, 10), (minute_deg, 0.8, 6)):
        a = math.radians(deg)
        draw.line([cx, cy, cx + length * r * math.sin(a), cy - length * r * math.cos(a)], fill="black", width=width)
    return img


def minutes_apart(a: str, b: str) -> int:
    (ha, ma), (hb, mb) = (map(int, t.split(":")) for t in (a, b))
    d = abs((ha % 12) * 60 + ma - (hb % 12) * 60 - mb)
    return min(d, 720 - d)


@pytest.mark.parametrize("hour,minute", [(3, 40), (10, 10), (12, 0), (6, 30), (8, 17), (1, 55), (11, 5),
                                         (4, 22), (9, 45), (7, 3)])
def test_clock_reads_within_two_minutes(eyes, hour, minute) -> None:
    said = eyes.describe(camera(draw_clock(hour, minute), quality=70))
    assert "a clock showing " in said, said
    read = said.split("a clock showing ")[1].split(";")[0]
    assert minutes_apart(read, f"{hour}:{minute:02d}") <= 2, said
    assert "circle" not in said and "line" not in said, said  # the face and hands are the clock


def test_clock_at_720p_smaller_face(eyes) -> None:
    said = eyes.describe(camera(draw_clock(2, 50, size=(1280, 720), background="white", radius=200)))
    assert minutes_apart(said.split("a clock showing ")[1], "2:50") <= 2, said


@pytest.mark.parametrize("colour", ["white", "black", "grey", "blue", "pink", "brown"])
def test_a_blank_frame_is_a_plain_background(eyes, colour) -> None:
    assert eyes.describe(camera(Image.new("RGB", (640, 480), colour))) == f"a plain {colour} background"


def test_noise_says_nothing_false(eyes) -> None:
    rng = np.random.default_rng(1)
    for frame in (rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
                  camera(Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)))):
        said = eyes.describe(frame)
        assert said.startswith("a busy scene"), said
        assert not any(w in said.split() for w in SHAPE_WORDS) and "clock" not in said, said


def photo_like(seed: int) -> Image.Image:
    """A stand-in for a webcam frame of a face: smooth shaded blobs on a lit gradient, blurred."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:480, 0:640].astype(np.float32)
    base = np.stack([90 + 0.1 * x, 80 + 0.08 * y, 70 + 0.05 * (x + y)], axis=2)
    face = np.exp(-(((x - 320) / 120) ** 2 + ((y - 230) / 160) ** 2))
    skin = np.array([220, 170, 140], np.float32)
    img = base * (1 - face[..., None]) + skin * face[..., None] * (0.7 + 0.3 * np.cos(x / 40.0))[..., None]
    img += rng.normal(0, 10, img.shape)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(12):  # hair, eyes, shirt folds: dark irregular strokes
        pts = [(float(rng.uniform(100, 540)), float(rng.uniform(50, 470))) for _ in range(4)]
        draw.line(pts, fill=tuple(int(v) for v in rng.integers(20, 90, 3)), width=int(rng.integers(4, 20)))
    return pil.filter(ImageFilter.GaussianBlur(3))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_photo_like_frame_gets_no_invented_shapes(eyes, seed) -> None:
    said = eyes.describe(camera(photo_like(seed)))
    assert not any(w in said.split() for w in SHAPE_WORDS) and "clock" not in said, said


def test_grey_and_rgba_are_accepted(eyes) -> None:
    img = Image.new("RGB", (320, 240), "white")
    draw_shape(ImageDraw.Draw(img), "square", 160, 120, 70, "black")
    rgb = np.asarray(img)
    assert "black square" in eyes.describe(rgb[:, :, 0])
    assert eyes.describe(np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])) == eyes.describe(rgb)


@pytest.mark.parametrize("bad", [np.zeros((48, 64, 3), np.float32), np.zeros((48, 64, 2), np.uint8),
                                 np.zeros((48,), np.uint8), np.zeros((2, 48, 64, 3), np.uint8),
                                 np.zeros((4, 64, 3), np.uint8)])
def test_bad_input_raises_value_error(eyes, bad) -> None:
    with pytest.raises(ValueError):
        eyes.describe(bad)
