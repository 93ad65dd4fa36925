"""Colours and solid shapes of a camera frame, for :mod:`app.backend.models.tiny.vision`.

Pure OpenCV/numpy, no model: every pixel gets a name from a small fixed palette
(:data:`PALETTE`) by hue, saturation and value; the background is the colour of most of the
frame's border; each other colour's connected regions are kept as objects only when they are
clean: a solid single colour (:data:`MIN_FILL`, :data:`MAX_COLOUR_STD`), a sensible size
(:data:`MIN_AREA_FRACTION`..:data:`MAX_AREA_FRACTION` of the frame), not cut by the frame edge, and
a good fit to one of :data:`SHAPES`. A webcam frame of a face has soft, shaded regions that fail
these tests, so it yields few or no shapes rather than invented ones.

Thresholds are our own, tuned on frames drawn with Pillow (``ImageDraw`` ellipses, rectangles,
polygons, lines), JPEG-compressed (quality 50) and with Gaussian noise (sigma 8), at 320 px.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import cv2
import numpy as np

PALETTE: Final[tuple[str, ...]] = (
    "red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "grey",
)
"""Colour names, in label order (:func:`colour_labels` returns indices into this)."""

SHAPES: Final[tuple[str, ...]] = (
    "circle", "oval", "square", "rectangle", "triangle", "star", "line", "pentagon", "hexagon",
)
"""Shape names :func:`find_objects` gives."""

MIN_AREA_FRACTION: Final[float] = 0.002
"""Smallest object, as a fraction of the frame's area (at 320x240: ~150 px, a 12x12 square)."""

MIN_AREA_FRACTION_BUSY: Final[float] = 0.01
"""Smallest object in a frame with no plain background (a photo, noise): 1 % of the frame."""

MAX_AREA_FRACTION: Final[float] = 0.8
"""Largest object, as a fraction of the frame's area (beyond: a second background)."""

MIN_FILL: Final[float] = 0.85
"""Fraction of an object's contour area that must carry its colour label (solid, not a ring)."""

MAX_COLOUR_STD: Final[float] = 22.0
"""Largest mean per-channel standard deviation of RGB inside an object, its 2-px rim left out
(solid colour)."""

MIN_BACKGROUND_SHARE: Final[float] = 0.5
"""A colour is the background when it labels at least this fraction of the border pixels..."""

MAX_BACKGROUND_STD: Final[float] = 20.0
"""... and those pixels' mean per-channel RGB standard deviation is below this (else: texture,
e.g. noise or a photo, whose average colour happens to be one name)."""

_BORDER: Final[float] = 0.04
"""Width of the border ring read for the background, as a fraction of the smaller side."""


def colour_labels(rgb: np.ndarray) -> np.ndarray:
    """Name every pixel with the nearest :data:`PALETTE` colour.

    Rules (OpenCV HSV: hue 0-179 in 2-degree steps, saturation and value 0-255): value < 60 is
    black; saturation < 50 is white (value > 190), grey otherwise; else the hue band names it
    (red < 8 or >= 165, orange < 22, yellow < 34, green < 85, blue < 130, purple < 158, pink),
    with dark reds/oranges (value < 180) brown and pale reds (saturation < 160) pink. Pillow's
    named colours of these names all map to themselves (``"green"`` is (0, 128, 0), ``"brown"``
    (165, 42, 42), ``"pink"`` (255, 192, 203), ``"purple"`` (128, 0, 128)).

    Args:
        rgb: uint8 RGB ``(h, w, 3)``.

    Returns:
        uint8 ``(h, w)`` indices into :data:`PALETTE`.
    """
    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)
    h, s, v = (hsv[:, :, i].astype(np.int16) for i in range(3))
    idx = PALETTE.index
    out = np.full(h.shape, idx("purple"), np.uint8)
    red_hue = (h < 8) | (h >= 165)
    out[(h >= 158) & (h < 165)] = idx("pink")
    out[red_hue] = idx("red")
    out[(h >= 8) & (h < 22)] = idx("orange")
    out[(h >= 22) & (h < 34)] = idx("yellow")
    out[(h >= 34) & (h < 85)] = idx("green")
    out[(h >= 85) & (h < 130)] = idx("blue")
    out[red_hue & (s < 160) & (v >= 180)] = idx("pink")
    out[(red_hue | ((h >= 8) & (h < 22))) & (v < 180) & (s >= 100)] = idx("brown")
    grey = s < 50
    out[grey] = idx("grey")
    out[grey & (v > 190)] = idx("white")
    out[v < 60] = idx("black")
    return out


def _ring(a: np.ndarray, b: int) -> np.ndarray:
    """The pixels of a border ``b`` wide, flattened over the first two axes."""
    return np.concatenate([a[:b].reshape(-1, *a.shape[2:]), a[-b:].reshape(-1, *a.shape[2:]),
                           a[:, :b].reshape(-1, *a.shape[2:]), a[:, -b:].reshape(-1, *a.shape[2:])])


def background(labels: np.ndarray, rgb: np.ndarray) -> tuple[int | None, float]:
    """The border's most common colour label and its share of the border pixels.

    Args:
        labels: ``(h, w)`` from :func:`colour_labels`.
        rgb: uint8 RGB ``(h, w, 3)``, unsmoothed (its texture decides :data:`MAX_BACKGROUND_STD`).

    Returns:
        ``(label, share)``; ``label`` is ``None`` when no colour reaches :data:`MIN_BACKGROUND_SHARE`
        or the border is textured.
    """
    h, w = labels.shape
    b = max(1, round(_BORDER * min(h, w)))
    ring = _ring(labels, b)
    counts = np.bincount(ring, minlength=len(PALETTE))
    best = int(counts.argmax())
    share = float(counts[best]) / max(1, ring.size)
    if share < MIN_BACKGROUND_SHARE:
        return None, share
    texture = float(_ring(rgb, b)[ring == best].std(axis=0).mean())
    return (best if texture < MAX_BACKGROUND_STD else None), share


@dataclass(frozen=True)
class Shape:
    """One solid object: ``colour`` (a :data:`PALETTE` name), ``shape`` (a :data:`SHAPES` name),
    centre ``(x, y)`` and ``area`` as fractions of the frame's width, height and area, and its
    bounding box ``(x, y, w, h)`` in pixels of the frame it was found in."""

    colour: str
    shape: str
    x: float
    y: float
    area: float
    box: tuple[int, int, int, int]


def _star_like(points: np.ndarray) -> bool:
    """Ten corners alternating between two radii (points, then dents), each nearly equal."""
    d = np.hypot(*(points - points.mean(axis=0)).T)
    a, b = d[0::2], d[1::2]
    outer, inner = (a, b) if a.mean() > b.mean() else (b, a)
    return bool(outer.max() <= 1.25 * outer.min() and inner.max() <= 1.35 * inner.min()
                and inner.mean() <= 0.75 * outer.mean())


def _classify(contour: np.ndarray, area: float) -> str | None:
    """Shape name of a filled contour, or ``None`` when it fits none well."""
    perimeter = cv2.arcLength(contour, True)
    if perimeter <= 0:
        return None
    hull = cv2.convexHull(contour)
    hull_area = cv2.contourArea(hull)
    solidity = area / hull_area if hull_area > 0 else 0.0
    (_cx, _cy), (rw, rh), _angle = cv2.minAreaRect(contour)
    long_side, short_side = max(rw, rh), max(min(rw, rh), 1e-6)
    rect_fill = area / max(rw * rh, 1e-6)
    if long_side / short_side >= 5.0 and rect_fill > 0.75:
        return "line"
    approx = cv2.approxPolyDP(contour, 0.03 * perimeter, True)
    corners = len(approx)
    if solidity < 0.8:
        # a five-pointed star: ten corners, its area ~half its hull's (0.38-0.7 for usual inner radii)
        star = cv2.approxPolyDP(contour, 0.02 * perimeter, True)
        if len(star) == 10 and 0.35 <= solidity <= 0.75 and _star_like(star.reshape(-1, 2).astype(np.float64)):
            return "star"
        return None
    if solidity < 0.93:
        return None
    # convex from here on: measure the hull, whose outline is not frayed by noisy edge pixels
    hull_perimeter = cv2.arcLength(hull, True)
    circularity = 4.0 * math.pi * area / max(hull_perimeter * hull_perimeter, 1e-6)
    approx = cv2.approxPolyDP(hull, 0.03 * hull_perimeter, True)
    corners = len(approx)
    (_ex, _ey), radius = cv2.minEnclosingCircle(contour)
    circle_fill = area / max(math.pi * radius * radius, 1e-6)
    if corners == 3 or (corners == 4 and rect_fill < 0.7):
        _ok, tri = cv2.minEnclosingTriangle(contour)
        tri_area = abs(cv2.contourArea(tri)) if tri is not None else 0.0
        if tri_area > 0 and area / tri_area > 0.85:
            return "triangle"
    if corners == 4 and rect_fill > 0.9:
        return "square" if long_side / short_side < 1.2 else "rectangle"
    if circularity > 0.85 and circle_fill > 0.82 and corners >= 6:
        return "circle"
    if circularity > 0.6 and corners >= 6 and len(contour) >= 5:
        (_ex, _ey), (ea, eb), _a = cv2.fitEllipse(contour)
        ellipse_area = math.pi * ea * eb / 4.0
        if ellipse_area > 0 and 0.9 < area / ellipse_area < 1.08 and max(ea, eb) / max(min(ea, eb), 1e-6) >= 1.25:
            return "oval"
    if corners == 5 and circularity > 0.75:
        return "pentagon"
    if corners == 6 and circularity > 0.8:
        return "hexagon"
    return None


def find_objects(rgb: np.ndarray, labels: np.ndarray, background_label: int | None,
                 exclude: list[tuple[int, int, int, int]] | None = None) -> list[Shape]:
    """Solid, well-shaped single-colour regions (see the module docstring for the tests).

    Args:
        rgb: uint8 RGB ``(h, w, 3)`` (the frame the labels were taken from).
        labels: ``(h, w)`` from :func:`colour_labels`.
        background_label: from :func:`background` (its colour is never an object).
        exclude: boxes ``(x, y, w, h)`` (e.g. written text, a clock face): regions whose centre
            lies in one are skipped.

    Returns:
        The objects, largest first.
    """
    h, w = labels.shape
    frame_area = float(h * w)
    kernel = np.ones((3, 3), np.uint8)
    min_area = (MIN_AREA_FRACTION if background_label is not None else MIN_AREA_FRACTION_BUSY) * frame_area
    found: list[Shape] = []
    for label in np.unique(labels):
        if label == background_label:
            continue
        mask = cv2.morphologyEx((labels == label).astype(np.uint8), cv2.MORPH_OPEN, kernel)
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        for contour in contours:
            area = cv2.contourArea(contour)
            if not min_area <= area <= MAX_AREA_FRACTION * frame_area:
                continue
            x, y, bw, bh = cv2.boundingRect(contour)
            if x <= 0 or y <= 0 or x + bw >= w or y + bh >= h:
                continue  # cut by the frame edge: not a whole object
            cx, cy = x + bw / 2.0, y + bh / 2.0
            if any(ex <= cx <= ex + ew and ey <= cy <= ey + eh for ex, ey, ew, eh in exclude or ()):
                continue
            region = np.zeros((h, w), np.uint8)
            cv2.drawContours(region, [contour], -1, 1, thickness=cv2.FILLED)
            inside = region.astype(bool)
            if float(mask[inside].mean()) < MIN_FILL:
                continue
            core = cv2.erode(region, kernel, iterations=2).astype(bool)  # (without the blended rim)
            if core.any() and float(rgb[core].std(axis=0).mean()) > MAX_COLOUR_STD:
                continue
            shape = _classify(contour, area)
            if shape is None:
                continue
            m = cv2.moments(contour)
            mx, my = (m["m10"] / m["m00"], m["m01"] / m["m00"]) if m["m00"] else (cx, cy)
            found.append(Shape(PALETTE[int(label)], shape, mx / w, my / h, area / frame_area, (x, y, bw, bh)))
    found.sort(key=lambda s: -s.area)
    return found
