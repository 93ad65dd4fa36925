"""``tiny`` eyes: time to describe one camera frame (app/backend/models/tiny/vision.py), 1 thread.

Frames are drawn here with Pillow (a few solid shapes of random colours, sizes and places, some
with a written word or an analogue clock face), plus a blank frame and a smooth photo-like frame,
each JPEG-compressed (quality 70) as a camera's would be, at 640x480 and 1280x720. For each frame:

* ``describe_ms``: :meth:`SceneDescriber.describe` without OCR (colours, shapes, clock);
* ``read_ms``: the same with the single-threaded RapidOCR the background camera reader uses
  (:class:`~app.backend.models.tiny.vision.BackgroundCamera`): the time of one camera read.

OpenCV and ONNX Runtime are held to 1 thread (``cv2.setNumThreads(1)``, ``RapidOcr(threads=1)``),
as in the background reader. Each frame is described ``--repeats`` times after one warm-up call.

Staleness: a question's reply uses the newest frame read by the end of the turn. While the user
speaks, each new frame is read as soon as the read before it is done (app/backend/duplex/camera.py),
so the description is at most one frame interval (1 s at the page's 1 fps) plus two reads old
(the read in flight, then the newest frame's): ``stale_bound_ms`` = 1000 + 2 * p95(read_ms), on an
otherwise idle machine (reads run at the lowest OS priority and wait for any other work).

Run on an idle machine: ``flock -x /tmp/team/cpu.lock .venv/bin/python benchmarks/bench_vision.py``
(~1 min). Writes ``benchmarks/results/vision.json``.
"""

from __future__ import annotations

import argparse
import io
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    base_result,
    info_metric,
    metric,
    print_metrics,
    summarize,
    write_result,
)

NAME = "vision"
TITLE = "tiny eyes: describe one camera frame (colours, shapes, clock; + OCR), 1 thread"
SIZES = ((640, 480), (1280, 720))
COLOURS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "grey")
WORDS = ("HELLO", "EXIT", "Coffee", "OPEN", "banana", "STOP")
FRAME_INTERVAL_MS = 1000.0
"""The page sends the Thinker one frame a second (issue #25 section 3)."""


def _frame(kind: str, size: tuple[int, int], rng: random.Random) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    w, h = size
    if kind == "photo":
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        a = np.stack([90 + 100 * x / w, 80 + 90 * y / h, 60 + 60 * np.sin(x / 50.0)], axis=2)
        a += np.random.default_rng(rng.randrange(1 << 30)).normal(0, 12, a.shape)
        img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(2))
    else:
        img = Image.new("RGB", size, rng.choice(("white", "white", "black", "lightblue", "yellow")))
    draw = ImageDraw.Draw(img)
    if kind == "shapes":
        for _ in range(rng.randint(1, 6)):
            r = rng.uniform(0.05, 0.15) * h
            cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
            colour, shape = rng.choice(COLOURS), rng.choice(("circle", "square", "triangle", "star"))
            if shape == "circle":
                draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
            elif shape == "square":
                draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=colour)
            elif shape == "triangle":
                draw.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=colour)
            else:
                draw.polygon([(cx + (r if i % 2 == 0 else 0.4 * r) * math.sin(math.pi * i / 5),
                               cy - (r if i % 2 == 0 else 0.4 * r) * math.cos(math.pi * i / 5)) for i in range(10)],
                             fill=colour)
        if rng.random() < 0.5:
            draw.text((0.05 * w, 0.05 * h), rng.choice(WORDS), fill="grey",
                      font=ImageFont.load_default(size=int(0.1 * h)))
    elif kind == "clock":
        cx, cy, r = w / 2, h / 2, 0.38 * h
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill="white", outline="black", width=max(2, int(h / 80)))
        for deg, length, width in ((rng.uniform(0, 360), 0.5, h / 48), (rng.uniform(0, 360), 0.8, h / 80)):
            t = math.radians(deg)
            draw.line([cx, cy, cx + length * r * math.sin(t), cy - length * r * math.cos(t)], fill="black",
                      width=max(2, int(width)))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=70)
    return np.asarray(Image.open(buf).convert("RGB"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=12, help="drawn frames per size (plus a blank and a photo)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="4 frames, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.frames, args.repeats = 4, 1

    import cv2

    from app.backend.models.tiny.ocr import RapidOcr
    from app.backend.models.tiny.vision import SceneDescriber

    cv2.setNumThreads(1)
    plain = SceneDescriber(None)
    with_ocr = SceneDescriber(RapidOcr(threads=1, hold_cores=False))
    rng = random.Random(25)
    result = base_result(NAME, TITLE, "#25", quick=args.quick)
    result["threads"] = 1
    per_size = {}
    metrics = []
    for size in SIZES:
        kinds = ["shapes", "clock"] * (args.frames // 2) + ["blank", "photo"]
        frames = [(k, _frame(k, size, rng)) for k in kinds]
        describe_ms, read_ms, samples = [], [], []
        for kind, f in frames:
            plain.describe(f)
            with_ocr.describe(f)
            for _ in range(args.repeats):
                t = time.perf_counter()
                plain.describe(f)
                describe_ms.append((time.perf_counter() - t) * 1e3)
                t = time.perf_counter()
                said = with_ocr.describe(f)
                read_ms.append((time.perf_counter() - t) * 1e3)
            samples.append({"kind": kind, "said": said})
        label = f"{size[0]}x{size[1]}"
        d, r = summarize(describe_ms), summarize(read_ms)
        per_size[label] = {"describe_ms": d, "read_ms": r, "examples": samples[:6]}
        metrics.append(metric(f"describe_p50_{label}", f"describe, no OCR, p50 ({label})", d["p50"], "ms", "<=", 200,
                              n=d["n"]))
        metrics.append(info_metric(f"describe_p95_{label}", f"describe, no OCR, p95 ({label})", d["p95"], "ms",
                                   n=d["n"]))
        metrics.append(metric(f"read_p50_{label}", f"camera read with OCR, p50 ({label})", r["p50"], "ms", "<=", 1000,
                              n=r["n"]))
        metrics.append(info_metric(f"read_p95_{label}", f"camera read with OCR, p95 ({label})", r["p95"], "ms",
                                   n=r["n"]))
        metrics.append(info_metric(f"stale_bound_{label}", f"description age bound at turn end ({label})",
                                   FRAME_INTERVAL_MS + 2 * r["p95"], "ms",
                                   detail="one frame interval (1 s) + two reads (p95), idle machine"))
    result["sizes"] = per_size
    result["metrics"] = metrics
    print_metrics(metrics)
    print(f"wrote {write_result(NAME, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
