"""``tiny`` eyes: one short English description of a camera frame or chat image.

No captioner or vision-language model ships inside a package this project can install, so the
``tiny`` Thinker's eyes are made of parts a 270M base LM can answer from::

    a white background with three red circles and one blue square on the right;
    the text: OPEN 24 HOURS; a clock showing 3:40

* background colour and solid shapes with their colours, counts and places
  (:mod:`.shapes`: OpenCV contours, a fixed palette of eleven colour names);
* the words written in the frame (:class:`~app.backend.models.tiny.ocr.RapidOcr`); lines with
  fewer than two letters are left out (a clock overlay such as Chromium's fake camera draws,
  "0:00:17:250 345", is not something the user shows);
* an analogue clock's time (:mod:`.clock`: a radial darkness profile of a light disc);
* for a frame with no clear background (a photo, a webcam view of a face): its main colours
  ("a busy scene, mostly brown and black"), never guessed shapes; for that and for a frame that
  is not plain (:data:`PLAIN_SHARE`) and holds no shape or clock, an ImageNet label when the classifier
  (:mod:`.classifier`, EfficientNet-Lite0) is at least :data:`MIN_LABEL_PROB` sure
  ("it looks like a cheetah"). ImageNet has no "person" class: a face gets no label, or a wrong
  one only above that bar.

The frame is shrunk to :data:`WORK_SIDE` px on its longer side first (OCR reads the frame as
given). Measured by ``benchmarks/bench_vision.py`` (``benchmarks/results/vision.json``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final

import cv2
import numpy as np

from app.backend.models.tiny.classifier import ImageNetClassifier
from app.backend.models.tiny.clock import ClockReading, read_clock
from app.backend.models.tiny.ocr import DEFAULT_MIN_SCORE, RapidOcr
from app.backend.models.tiny.shapes import (
    PALETTE,
    Shape,
    background,
    colour_labels,
    find_objects,
)

log = logging.getLogger(__name__)

WORK_SIDE: Final[int] = 320
"""Longer side, px, of the copy the colours, shapes and clock are read from."""

MIN_SIDE: Final[int] = 8
"""Smallest image side accepted, px."""

MAX_GROUPS: Final[int] = 4
"""At most this many (colour, shape) groups are named; the rest are counted as "other shapes"."""

BIG_AREA: Final[float] = 0.12
"""A single object covering at least this fraction of the frame is called "big"."""

MAIN_COLOUR_SHARE: Final[float] = 0.2
"""A colour covering at least this fraction of a busy frame is one of its main colours."""

MIN_LABEL_PROB: Final[float] = 0.5
"""A busy frame's top ImageNet class is reported when its probability is at least this (ours: the
gradio sample photos of a cheetah and a lion score 0.94 / 0.88, a screenshot's "website" 0.49)."""

PLAIN_SHARE: Final[float] = 0.97
"""A background is "plain" when its colour covers at least this fraction of the frame."""

MIN_TEXT_LETTERS: Final[int] = 2
"""Text lines with fewer letters than this are not reported (overlay digits, stray marks)."""

NUMBER_WORDS: Final[tuple[str, ...]] = (
    "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
)
"""Count words of the description, index = value (read back by :mod:`.scene_answers`)."""

PLURALS: Final[dict[str, str]] = {"circle": "circles", "oval": "ovals", "square": "squares",
                                  "rectangle": "rectangles", "triangle": "triangles", "star": "stars",
                                  "line": "lines", "pentagon": "pentagons", "hexagon": "hexagons"}
"""Plural of each shape name of :data:`~app.backend.models.tiny.shapes.SHAPES`."""


@dataclass
class Scene:
    """What :meth:`SceneDescriber.scene` found in one frame.

    Attributes:
        background: palette name of the background, ``None`` for a busy frame.
        main_colours: palette names covering >= :data:`MAIN_COLOUR_SHARE` of a busy frame.
        objects: solid shapes, largest first (positions as fractions of the frame).
        text: written lines (reading order) with >= :data:`MIN_TEXT_LETTERS` letters.
        clock: the analogue clock's reading, if one was found.
        label: the ImageNet class of a busy frame, if the classifier was sure enough.
        plain: the background colour covers >= :data:`PLAIN_SHARE` of the frame.
    """

    background: str | None = None
    main_colours: list[str] = field(default_factory=list)
    objects: list[Shape] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    clock: ClockReading | None = None
    label: str | None = None
    plain: bool = False

    def sentence(self) -> str:
        """The scene in one line (see the module docstring); ``""`` for nothing at all."""
        parts = []
        things = _objects_phrase(self.objects)
        if self.background is not None:
            if things:
                parts.append(f"a {self.background} background with {things}")
            else:
                plain = "plain " if self.plain and self.clock is None and not self.text and not self.label else ""
                parts.append(f"a {plain}{self.background} background")
        elif things:
            parts.append(things)
        elif self.main_colours:
            parts.append(f"a busy scene, mostly {_join(self.main_colours)}")
        else:
            parts.append("a busy scene of many colours")
        if self.text:
            parts.append(f"the text: {', '.join(self.text)}")
        if self.clock is not None:
            parts.append(f"a clock showing {self.clock.text}")
        if self.label is not None:
            parts.append(f"it looks like {'an' if self.label[0] in 'aeiouAEIOU' else 'a'} {self.label}")
        return "; ".join(parts)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _place(x: float, y: float) -> str:
    """``"in the centre"``, ``"on the left"``, ``"at the top right"``... from fractions of the frame."""
    col = "left" if x < 0.38 else "right" if x > 0.62 else ""
    row = "top" if y < 0.38 else "bottom" if y > 0.62 else ""
    if not col and not row:
        return "in the centre"
    if row and col:
        return f"at the {row} {col}"
    return f"on the {col}" if col else f"at the {row}"


def _objects_phrase(objects: list[Shape]) -> str:
    groups: dict[tuple[str, str], list[Shape]] = {}
    for obj in objects:
        groups.setdefault((obj.colour, obj.shape), []).append(obj)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), -kv[1][0].area))
    several = len(objects) > 1
    phrases = []
    for (colour, shape), members in ordered[:MAX_GROUPS]:
        n = len(members)
        if n == 1:
            size = "big " if members[0].area >= BIG_AREA else ""
            place = f" {_place(members[0].x, members[0].y)}" if several or members[0].area < BIG_AREA else ""
            phrases.append(f"{'one' if several else 'a'} {size}{colour} {shape}{place}")
        else:
            places = {_place(m.x, m.y) for m in members}
            where = f" {places.pop()}" if len(places) == 1 else ""
            phrases.append(f"{NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else n} {colour} {PLURALS[shape]}{where}")
    rest = sum(len(m) for _, m in ordered[MAX_GROUPS:])
    if rest:
        phrases.append(f"{NUMBER_WORDS[rest] if rest < len(NUMBER_WORDS) else rest} other shapes")
    return _join(phrases) if phrases else ""


def as_rgb(image: np.ndarray) -> np.ndarray:
    """Check an image and return it as uint8 RGB ``(h, w, 3)``.

    Args:
        image: uint8 RGB ``(h, w, 3)``; also accepted: grey ``(h, w)``, RGBA ``(h, w, 4)``.

    Raises:
        ValueError: not uint8, another shape, or a side under :data:`MIN_SIDE` px.
    """
    img = np.asarray(image)
    if img.dtype != np.uint8:
        raise ValueError(f"image must be uint8, got {img.dtype}")
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] not in (3, 4):
        raise ValueError(f"image must be (h, w, 3) RGB, got shape {img.shape}")
    if min(img.shape[:2]) < MIN_SIDE:
        raise ValueError(f"image sides must be >= {MIN_SIDE} px, got shape {img.shape}")
    return np.ascontiguousarray(img[:, :, :3])


def _has_letters(line: str) -> bool:
    return sum(ch.isalpha() for ch in line) >= MIN_TEXT_LETTERS


def _is_writing(line: str) -> bool:
    """Whether an OCR line is writing whose box no shape is read from: two or more letters or digits.
    A lone glyph is not: RapidOCR reads solid shapes as symbols ("★", "■", "▼", "O" for a circle;
    dev split of ``benchmarks/answers_items.py``), and skipping their boxes lost the shapes."""
    return sum(ch.isalnum() for ch in line) >= 2


class SceneDescriber:
    """Frame -> one short description (:class:`Scene`, :meth:`describe`).

    Args:
        ocr: reads the written words; ``None``: no text is read.
        classifier: labels busy frames; ``None``: no labels.

    Not thread-safe per instance beyond what ``ocr`` allows (RapidOcr locks itself; ONNX Runtime
    sessions may be run from several threads).
    """

    def __init__(self, ocr: RapidOcr | None, classifier: ImageNetClassifier | None = None) -> None:
        self.ocr = ocr
        self.classifier = classifier

    def scene(self, image: np.ndarray) -> Scene:
        """Everything read from one frame.

        Args:
            image: see :func:`as_rgb`.

        Returns:
            The :class:`Scene`.

        Raises:
            ValueError: see :func:`as_rgb`.
        """
        rgb = as_rgb(image)
        h, w = rgb.shape[:2]
        scale = min(1.0, WORK_SIDE / max(h, w))
        small = cv2.resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))),
                           interpolation=cv2.INTER_AREA) if scale < 1.0 else rgb
        raw, small = small, cv2.medianBlur(small, 3)
        out = Scene()
        exclude: list[tuple[int, int, int, int]] = []
        if self.ocr is not None:
            for text, _score, box in self.ocr.read_boxes(rgb):
                x0, y0, x1, y1 = (round(v * scale) for v in box)
                if _is_writing(text):
                    exclude.append((x0, y0, x1 - x0, y1 - y0))
                if _has_letters(text):
                    out.text.append(text)
        labels = colour_labels(small)
        bg, _share = background(labels, raw)
        out.background = PALETTE[bg] if bg is not None else None
        out.clock = read_clock(cv2.cvtColor(small, cv2.COLOR_RGB2GRAY))
        if out.clock is not None:
            exclude.append(out.clock.box)
        out.objects = find_objects(small, labels, bg, exclude)
        if out.clock is not None:  # the face itself is the clock, not "a white circle"
            cx, cy = out.clock.x / labels.shape[1], out.clock.y / labels.shape[0]
            out.objects = [o for o in out.objects if abs(o.x - cx) > 0.03 or abs(o.y - cy) > 0.03]
        covered = float(np.mean(labels == bg)) if bg is not None else 0.0
        out.plain = covered >= PLAIN_SHARE
        if bg is None:
            counts = Counter(labels.ravel().tolist())
            out.main_colours = [PALETTE[c] for c, n in counts.most_common(2) if n >= MAIN_COLOUR_SHARE * labels.size]
        if self.classifier is not None and not out.objects and out.clock is None and not out.plain:
            name, prob = self.classifier.classify(rgb, top=1)[0]
            if prob >= MIN_LABEL_PROB:
                out.label = name.split(" (")[0]
        return out

    def describe(self, image: np.ndarray) -> str:
        """:meth:`scene` in one line, e.g. ``'a white background with a big red circle'``.

        Raises:
            ValueError: see :func:`as_rgb`.
        """
        return self.scene(image).sentence()


BACKGROUND_NICE: Final[int] = 19
"""OS niceness of the background reader's thread: the lowest priority (Linux sets it per thread)."""


def _lowest_priority() -> None:
    """Give the calling thread the lowest CPU priority (no-op where the OS refuses), and keep
    OpenCV's work on it (``cv2.setNumThreads(1)``: its own worker threads would run at normal
    priority; process-wide, and OpenCV's calls here are a few milliseconds each)."""
    cv2.setNumThreads(1)
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError) as exc:  # (not Linux, or not allowed)
        log.debug("background camera thread keeps its priority: %s", exc)


class BackgroundCamera:
    """Camera reads (:meth:`SceneDescriber.describe`) that never hold up speech work.

    A duplex session reads its camera again every few seconds and at each speech onset
    (:mod:`app.backend.duplex.camera`). Through the Thinker stage and the core lock, one read
    (~0.6 s of OCR on 2 threads, one uninterruptible call) in flight when the user paused delayed
    that user's transcript, end-of-turn score and reply. Here reads run on one thread of their own
    at the lowest OS priority (:data:`BACKGROUND_NICE`), with a single-threaded RapidOCR (no thread
    pool that spins) and outside the core lock, so they use the cores only when speech work
    leaves them idle (a read is slower than a foreground one; on a busy machine, much slower).

    The describer (with a second RapidOCR and classifier) is built on that thread when the reader
    is made.

    Args:
        min_score: see :class:`~app.backend.models.tiny.ocr.RapidOcr`.
    """

    def __init__(self, min_score: float = DEFAULT_MIN_SCORE) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="camera-background",
                                        initializer=_lowest_priority)
        self._describer: Future[SceneDescriber] = self._pool.submit(
            lambda: SceneDescriber(RapidOcr(1, min_score, hold_cores=False), ImageNetClassifier(threads=1)))

    def submit(self, image: np.ndarray) -> Future[str]:
        """Queue a description of uint8 RGB ``image`` ``(h, w, 3)``; the future gives
        :meth:`SceneDescriber.describe`'s result, or its error (``ValueError`` for a bad image,
        the engine's load error)."""
        frame = np.array(image, copy=True)  # (the caller may reuse its buffer; describe checks it)
        return self._pool.submit(lambda: self._describer.result().describe(frame))

    def close(self) -> None:
        """Stop the thread (queued reads are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
