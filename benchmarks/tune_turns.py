"""End-of-turn decisions replayed offline on the turn-taking dialogue set: tune the learned
detector on the dev split, report it on the test split, beside the silence timer.

No server and no reply: each instance's input WAV is fed to a detector exactly as a session feeds
it (100 ms pieces; the learned detector's scores come from the real Smart Turn v3.2 model), and
every decision is stamped on the media clock, so a run is deterministic and much faster than real
time. Categories used: ``question``, ``statement`` (a reply is due at the true end), ``pause``,
``hesitation`` (the true end is after an inner pause), ``silence``, ``noise`` (no turn at all).

Per instance:
* **decision latency** (question, statement; also pause/hesitation when not premature): media
  position at which the turn was declared over minus the true end of the user's speech
  (``truth.turns[0].end_ms``), ms;
* **premature**: a turn end declared before the true end minus 100 ms (pause, hesitation;
  question/statement too: a wrong end inside the sentence);
* **missed**: no turn end at all although one was due;
* **false turn**: a turn end on silence / noise (the session would transcribe it; a reply is
  only made when the transcript holds words, so this bounds replies to non-speech from above).

Writes ``benchmarks/results/turn_decisions.json``. Usage::

    .venv/bin/python benchmarks/turns_dataset.py --split dev --per-category 30   # make the data
    .venv/bin/python benchmarks/tune_turns.py --split dev --grid                 # tune
    .venv/bin/python benchmarks/tune_turns.py --split test                       # report
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import common as C

from app.backend.turns.learned import LearnedTurnDetector
from app.backend.turns.silence import SilenceTurnDetector
from app.config import load_deploy_config
from app.constants import INPUT_SAMPLE_RATE_HZ

CATEGORIES = ("question", "statement", "pause", "hesitation", "silence", "noise")
PIECE_MS = 100
PREMATURE_SLACK_MS = 100.0
NO_GATE = ("no far-speech gate", {"far_speech_drop_db": None})
"""The run before the far-speech level gate (:mod:`app.backend.turns.level_gate`), for the comparison row."""

GRID = [
    ("default", {}),
    NO_GATE,
    ("before text model", {"smart_turn_completion_threshold": 0.0, "smart_turn_confident_text": 1.0,
                           "max_unfinished_pause_ms": 2000, "smart_turn_sentence_end_ms": 1100.0}),
    ("no text model", {"smart_turn_completion_threshold": 0.0}),
    ("text model 0.02", {"smart_turn_completion_threshold": 0.02}),
    ("text model 0.07", {"smart_turn_completion_threshold": 0.07}),
    ("text model 0.1", {"smart_turn_completion_threshold": 0.1}),
    ("unfinished cap 2000", {"max_unfinished_pause_ms": 2000}),
    ("unfinished cap 3000", {"max_unfinished_pause_ms": 3000}),
    ("unfinished cap 4000", {"max_unfinished_pause_ms": 4000}),
    ("confident off", {"smart_turn_confident_text": 1.0}),
    ("confident 0.1", {"smart_turn_confident_text": 0.1}),
    ("confident 0.15", {"smart_turn_confident_text": 0.15}),
    ("confident at 400", {"smart_turn_confident_end_ms": 400.0}),
    ("acoustic only", {"smart_turn_text_cues": False}),
    ("sentence end 400", {"smart_turn_sentence_end_ms": 400.0}),
    ("sentence end 1100", {"smart_turn_sentence_end_ms": 1100.0}),
    ("sentence end 1600", {"smart_turn_sentence_end_ms": 1600.0}),
    ("t0.95", {"smart_turn_thresholds": [0.95, 0.85, 0.65, 0.45, 0.25]}),
    ("t0.7", {"smart_turn_thresholds": [0.7, 0.6, 0.5, 0.4, 0.3]}),
]
"""Named overrides of ``turn_policy`` tried with ``--grid``."""

KEY_RUNS = ("silence", f"silence:{NO_GATE[0]}", "smart_turn:default", f"smart_turn:{NO_GATE[0]}",
            "smart_turn:before text model", "smart_turn:given")
"""Runs whose per-instance rows and target metrics are written (the rest: summaries only)."""


def load_instances(split: str, seed: int = 0) -> list[dict[str, Any]]:
    folder = Path(tempfile.gettempdir()) / "omni-bench-turns" / f"v2-{split}-seed{seed}"
    out = []
    for p in sorted(folder.glob("*.json")):
        if p.name.startswith("manifest"):
            continue
        d = json.loads(p.read_text())
        if d.get("category") in CATEGORIES:
            audio, rate = sf.read(str(folder / d["files"]["input"]), dtype="float32")
            assert rate == INPUT_SAMPLE_RATE_HZ
            d["audio"] = audio
            out.append(d)
    if not out:
        raise SystemExit(f"no instances in {folder}: run benchmarks/turns_dataset.py --split {split} first")
    return out


def wilson(k: int, n: int, z: float = 1.959964) -> list[float] | None:
    """Wilson score 95 % interval of a rate k/n."""
    if n == 0:
        return None
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / den
    return [round(max(0.0, mid - half), 4), round(min(1.0, mid + half), 4)]


class CachedScorer:
    """Smart Turn probabilities, cached per (instance, sample) so a grid re-uses them."""

    def __init__(self) -> None:
        from app.backend.models.tiny.smart_turn import SmartTurnModel

        self.model = SmartTurnModel()
        self.cache: dict[tuple[str, int], float] = {}
        self.texts: dict[tuple[str, int, float], str] = {}
        self.text_ends: dict[str, float | None] = {}
        self.asr: Any = None
        self.text_model: Any = None
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, key: str, req: Any) -> tuple[float, str | None, float | None]:
        k = (key, req.at_sample)
        if k not in self.cache:
            t0 = time.perf_counter()
            self.cache[k] = float(self.model.predict([req.audio])[0])
            self.seconds += time.perf_counter() - t0
            self.calls += 1
        text = None
        if req.utterance is not None:
            tk = (key, req.utterance.size, float(req.utterance[-200:].sum()))
            if tk not in self.texts:
                if self.asr is None:
                    from app.backend.models.tiny.asr import WhisperAsr

                    self.asr = WhisperAsr()
                self.texts[tk] = self.asr.transcribe(req.utterance).strip()
            text = self.texts[tk]
        text_end = None
        if text and any(c.isalnum() for c in text):
            if text not in self.text_ends:
                if self.text_model is None:
                    from app.backend.models.tiny.text_turn import GemmaTextEndModel

                    self.text_model = GemmaTextEndModel()
                self.text_ends[text] = self.text_model.end_probability(text)
            text_end = self.text_ends[text]
        return self.cache[k], text, text_end


def decisions(det: Any, audio: np.ndarray, score: Any) -> list[float]:
    """Media positions (ms) at which ``det`` declared a turn over."""
    step = INPUT_SAMPLE_RATE_HZ * PIECE_MS // 1000
    fed = 0
    out: list[float] = []
    for i in range(0, audio.size, step):
        piece = audio[i : i + step]
        while True:
            sigs = det.feed(piece)
            fed += piece.size - det.held_back
            out += [fed * 1000.0 / INPUT_SAMPLE_RATE_HZ for s in sigs if s.kind == "end_of_turn"]
            if det.awaiting is None:
                break
            piece = piece[piece.size - det.held_back:]
            sigs = det.resolve(*score(det.awaiting))
            out += [fed * 1000.0 / INPUT_SAMPLE_RATE_HZ for s in sigs if s.kind == "end_of_turn"]
    return out


def evaluate(instances: list[dict[str, Any]], make: Any, scorer: CachedScorer | None) -> dict[str, Any]:
    from app.backend.models.tiny.vad import SileroVad

    rows = []
    for d in instances:
        det = make(SileroVad())
        ends = decisions(det, d["audio"], (lambda req, k=d["id"]: scorer(k, req)) if scorer else None)
        truth = d["truth"]
        row: dict[str, Any] = {"id": d["id"], "category": d["category"], "voice": d["voice"],
                               "noise": d.get("noise"), "decisions_ms": [round(x, 1) for x in ends]}
        if d["category"] in ("silence", "noise"):
            row["false_turn"] = bool(ends)
        else:
            end = truth["turns"][0]["end_ms"]
            early = [x for x in ends if x < end - PREMATURE_SLACK_MS]
            late = [x for x in ends if x >= end - PREMATURE_SLACK_MS]
            row["premature"] = bool(early)
            row["missed"] = not late
            row["latency_ms"] = round(late[0] - end, 1) if late and not early else None
        rows.append(row)
    return {"rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["category"], []).append(r)
        groups.setdefault("voice:" + ("piper" if str(r["voice"]).startswith("piper") else "espeak" if r["voice"] else "none")
                          + ":" + r["category"], []).append(r)
    for name, rs in sorted(groups.items()):
        s: dict[str, Any] = {"n": len(rs)}
        if "false_turn" in rs[0]:
            k = sum(r["false_turn"] for r in rs)
            s["false_turns"] = {"k": k, "rate": k / len(rs), "ci95": wilson(k, len(rs))}
        else:
            for key in ("premature", "missed"):
                k = sum(r[key] for r in rs)
                s[key] = {"k": k, "rate": k / len(rs), "ci95": wilson(k, len(rs))}
            s["latency_ms"] = C.summarize(r["latency_ms"] for r in rs)
        out[name] = s
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="dev", choices=("dev", "test"))
    p.add_argument("--grid", action="store_true", help="also try the threshold sets of GRID")
    p.add_argument("--thresholds", default=None, help="comma list replacing smart_turn_thresholds")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    cfg = load_deploy_config().turn_policy
    instances = load_instances(args.split)
    scorer = CachedScorer()
    result = C.base_result("turn_decisions", "End-of-turn decisions replayed offline (media clock)", "turn-taking",
                           quick=False)
    result["reproduce"] = f".venv/bin/python benchmarks/tune_turns.py --split {args.split}" + \
        (" --grid" if args.grid else "")
    result["inputs"] = {"split": args.split, "instances": len(instances), "piece_ms": PIECE_MS,
                        "premature_slack_ms": PREMATURE_SLACK_MS,
                        "dataset": "benchmarks/turns_dataset.py (generated, not committed)"}
    runs: dict[str, Any] = {}
    runs["silence"] = {"config": {"end_of_turn_silence_ms": cfg.end_of_turn_silence_ms},
                       **evaluate(instances, lambda vad: SilenceTurnDetector(vad, cfg), None)}
    ungated = cfg.model_copy(update=NO_GATE[1])
    runs[f"silence:{NO_GATE[0]}"] = {"config": {"end_of_turn_silence_ms": cfg.end_of_turn_silence_ms, **NO_GATE[1]},
                                     **evaluate(instances, lambda vad: SilenceTurnDetector(vad, ungated), None)}
    grid = GRID if args.grid else [("default", {}), NO_GATE]
    if args.thresholds:
        grid = [("given", {"smart_turn_thresholds": [float(x) for x in args.thresholds.split(",")]})]
    for name, update in grid:
        tcfg = cfg.model_copy(update=update)
        runs[f"smart_turn:{name}"] = {
            "config": {k: getattr(tcfg, k) for k in ("smart_turn_checks_ms", "smart_turn_thresholds",
                                                     "smart_turn_text_cues", "smart_turn_sentence_threshold",
                                                     "smart_turn_sentence_end_ms",
                                                     "smart_turn_completion_threshold",
                                                     "smart_turn_confident_text", "smart_turn_confident_end_ms",
                                                     "max_pause_ms", "max_unfinished_pause_ms",
                                                     "far_speech_drop_db")},
            **evaluate(instances, lambda vad, c=tcfg: LearnedTurnDetector(vad, c), scorer)}
    # per-instance rows and summary-table metrics for the headline runs only; the grid's other
    # runs keep their config and per-category summary (the printed table shows them all)
    result["runs"] = {name: run if name in KEY_RUNS else {k: v for k, v in run.items() if k != "rows"}
                      for name, run in runs.items()}
    metrics = []
    for name, run in runs.items():
        if name not in KEY_RUNS:
            continue
        sm = run["summary"]
        for cat in ("pause", "hesitation"):
            pr = sm[cat]["premature"]
            metrics.append(C.metric(f"{name}:{cat}:premature", f"{name}: premature turn ends, {cat} ({args.split})",
                                    round(pr["rate"], 3), "", "<=", 0.05, n=sm[cat]["n"],
                                    detail=f"{pr['k']}/{sm[cat]['n']}, 95 % CI {pr['ci95']}"))
        lat = C.summarize(r["latency_ms"] for r in run["rows"] if r["category"] in ("question", "statement"))
        metrics.append(C.metric(f"{name}:complete:latency_p95", f"{name}: speech end -> turn end, complete "
                                f"questions and statements, p95 ({args.split})", lat["p95"], "ms", "<=", 1000.0,
                                n=lat["n"], detail=f"p50 {C.fmt_s(lat['p50'], 'ms', 0)}"))
        ft = sum(r.get("false_turn", False) for r in run["rows"])
        nn = sum(1 for r in run["rows"] if "false_turn" in r)
        metrics.append(C.metric(f"{name}:nonspeech:false_turns", f"{name}: turn ends on silence / noise "
                                f"({args.split}; a reply needs words in the transcript too)", ft, "", "<=", 0, n=nn,
                                detail=f"{ft}/{nn}, 95 % CI {wilson(ft, nn)}"))
    result["metrics"] = metrics
    result["scorer"] = {"calls": scorer.calls, "mean_ms": 1000 * scorer.seconds / max(scorer.calls, 1)}
    result["wall_s"] = time.monotonic() - t0
    print(f"{'run':30} {'premature pause':>16} {'premature hes.':>15} {'q/s lat p50':>12} {'p95':>6} "
          f"{'missed':>7} {'false':>6}")
    for name, run in runs.items():
        s = run["summary"]
        lat = [r["latency_ms"] for r in run["rows"] if r["category"] in ("question", "statement")]
        lat_s = C.summarize(lat)
        missed = sum(r.get("missed", False) for r in run["rows"])
        false = sum(r.get("false_turn", False) for r in run["rows"])
        print(f"{name:30} {s['pause']['premature']['k']:>3}/{s['pause']['n']:<12} "
              f"{s['hesitation']['premature']['k']:>3}/{s['hesitation']['n']:<11} "
              f"{C.fmt_s(lat_s['p50'], '', 0):>12} {C.fmt_s(lat_s['p95'], '', 0):>6} {missed:>7} {false:>6}")
    C.write_result(f"turn_decisions_{args.split}", C.round_floats(
        {k: v for k, v in result.items()}, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
