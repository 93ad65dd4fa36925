"""What a suspect short-window Whisper decode costs, redone on the 30 s path or in a longer window.

The ``tiny`` ASR encodes a short utterance in a window of the utterance plus silence
(:mod:`app.backend.models.tiny.asr`). A decode that looks repeated ("Stop. Stop.") or runs past
its token limit is suspect. It used to be redone on faster-whisper's 30 s path (~1 s on 2 cores);
it is now decoded again in a window ``RETRY_EXTRA_SILENCE_S`` longer, and only a second decode that
still runs past the limit, or repeats words the first did not, goes to the 30 s path.

The clips are the ones a live session transcribes in ``bench_turns``' overlap dialogues
(:mod:`turns_dataset`, categories ``backchannel`` and ``barge_in``): the words said over a reply
as the session reads them while they go on (100 ms before the onset to 320, 480, 640 and 800 ms
after it), the whole of them, and the question before the reply. Every clip runs through both
policies in one process (nothing else running); for the clips whose first decode is suspect the
table gives each policy's time and whether the two agree on the words (lower case, punctuation
dropped). The 30 s path is the old policy's answer, not ground truth.

Run: ``.venv/bin/python benchmarks/bench_asr_retry.py`` (~6 min for both splits; ``--quick``: 5
dialogues per category).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
import turns_dataset as D

NAME = "asr_retry"
READ_MS = (320, 480, 640, 800)
LEAD_MS = 100


def clips(split: str, per_category: int) -> list[tuple[str, np.ndarray]]:
    """``(label, float32 16 kHz audio)`` of the overlap dialogues of ``split``."""
    man = D.build(split, per_category, seed=0, categories=["backchannel", "barge_in"], root=None)
    folder = Path(man["folder"])
    out = []
    rate_ms = D.RATE // 1000
    for inst in man["instances"]:
        b = D.read_wav(folder / inst["files"]["part_b"])
        s0 = int(inst["truth"]["overlap"]["speech_start_ms"] * rate_ms)
        lo = max(0, s0 - LEAD_MS * rate_ms)
        for ms in READ_MS:
            out.append((f"{inst['id']} over the reply, {ms} ms", b[lo:s0 + ms * rate_ms]))
        out.append((f"{inst['id']} over the reply, whole", b[lo:]))
        out.append((f"{inst['id']} question", D.read_wav(folder / inst["files"]["part_a"])))
    return out


def run(split: str, per_category: int) -> dict[str, Any]:
    """Both policies on every clip of ``split``; the rows of the suspect ones and a summary."""
    from app.backend.models.tiny import asr as A
    from app.constants import INPUT_SAMPLE_RATE_HZ

    whisper = A.WhisperAsr()

    def old(x: np.ndarray) -> str:  # the policy before: a suspect short decode redone on the 30 s path
        window_s = A.short_window_s(x.size / INPUT_SAMPLE_RATE_HZ)
        if window_s is not None:
            text, at_limit = whisper._decode_window(x, window_s, "")
            if not at_limit and not A.is_repeated(text):
                return text
        return whisper._transcribe_30s(x)

    def timed(fn, x: np.ndarray) -> tuple[str, float]:
        t0 = time.perf_counter()
        text = fn(x)
        return text, 1000 * (time.perf_counter() - t0)

    rows, all_old, all_new = [], [], []
    went_30s = 0
    real_30s = whisper._transcribe_30s
    calls: list[int] = []

    def counted(a: np.ndarray) -> str:  # the 30 s path, its uses counted
        calls.append(1)
        return real_30s(a)

    for label, x in clips(split, per_category):
        window_s = A.short_window_s(x.size / INPUT_SAMPLE_RATE_HZ)
        if window_s is None or float(np.max(np.abs(x))) < A.SILENCE_PEAK:
            continue  # (the 30 s path in both policies, or silence)
        first, at_limit = whisper._decode_window(x, window_s, "")
        suspect = at_limit or A.is_repeated(first)
        whisper._transcribe_30s = real_30s
        t_old, ms_old = timed(old, x)
        whisper._transcribe_30s = counted
        calls.clear()
        t_new, ms_new = timed(whisper.transcribe, x)
        all_old.append(ms_old)
        all_new.append(ms_new)
        went_30s += bool(calls)
        if suspect:
            rows.append({"clip": label, "first_decode": first, "old": t_old, "new": t_new, "old_ms": ms_old,
                         "new_ms": ms_new, "new_took_30s": bool(calls),
                         "same_words": A._words(t_old) == A._words(t_new)})
    return {"split": split, "clips": len(all_old), "suspect": len(rows), "rows": rows,
            "suspect_old_ms_p50": statistics.median(r["old_ms"] for r in rows) if rows else None,
            "suspect_new_ms_p50": statistics.median(r["new_ms"] for r in rows) if rows else None,
            "same_words": sum(r["same_words"] for r in rows), "new_took_30s": went_30s,
            "all_old_ms_mean": statistics.fmean(all_old), "all_new_ms_mean": statistics.fmean(all_new)}


def render_markdown(result: dict[str, Any]) -> str:
    """The tables of a result of this script (``benchmarks/report.py`` shows them)."""
    lines = [("| split | clips | suspect first decodes | suspect: 30 s redo p50 | suspect: longer window p50 | "
              "same words | still to 30 s | mean per clip, before -> now |"), "|---|---|---|---|---|---|---|---|"]
    for s in result.get("splits", []):
        lines.append(f"| {s['split']} | {s['clips']} | {s['suspect']} | {s['suspect_old_ms_p50']:.0f} ms | "
                     f"{s['suspect_new_ms_p50']:.0f} ms | {s['same_words']}/{s['suspect']} | {s['new_took_30s']} | "
                     f"{s['all_old_ms_mean']:.0f} -> {s['all_new_ms_mean']:.0f} ms |")
    diff = [r for s in result.get("splits", []) for r in s["rows"] if not r["same_words"]]
    if diff:
        lines += ["", "Where the two disagree (first decode -> 30 s redo / longer window):", ""]
        lines += [f"- {r['clip']}: \"{r['first_decode']}\" -> \"{r['old']}\" / \"{r['new']}\"" for r in diff]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="5 dialogues per category instead of 30")
    p.add_argument("--splits", default="dev,test")
    p.add_argument("--result-name", default=NAME)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    result = C.base_result(NAME, "Suspect short-window Whisper decodes: 30 s redo vs a longer window", "#27",
                           quick=args.quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_asr_retry.py"
    per_cat = 5 if args.quick else 30
    result["splits"] = [run(s.strip(), per_cat) for s in args.splits.split(",") if s.strip()]
    rows = [r for s in result["splits"] for r in s["rows"]]
    result["metrics"] = [
        C.info_metric("suspect_old_p50", "Suspect decode, redone on the 30 s path (before), p50",
                      statistics.median(r["old_ms"] for r in rows) if rows else None, "ms", n=len(rows)),
        C.info_metric("suspect_new_p50", "Suspect decode, decoded again in a longer window (now), p50",
                      statistics.median(r["new_ms"] for r in rows) if rows else None, "ms", n=len(rows)),
        C.info_metric("same_words", "Suspect decodes: the longer window gives the 30 s path's words",
                      sum(r["same_words"] for r in rows) / len(rows) if rows else None, "", n=len(rows)),
    ]
    result["wall_s"] = time.monotonic() - t0
    result["finished_at"] = C.now_iso()
    path = C.write_result(args.result_name, C.round_floats(result))
    print(render_markdown(result))
    print(f"[asr_retry] wrote {path.relative_to(C.ROOT)} in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
