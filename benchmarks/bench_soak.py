"""Soak run (issue 11 part 6): 4 duplex sessions for N minutes at real time, a question every ~20 s.

A server subprocess (``python -m app serve --no-ui``, default ``configs/tiny.yaml``: 4 slots, the
learned turn detector) and 4 :class:`~app.client.duplex.DuplexClient` sessions on 127.0.0.1. Each
session streams 100 ms appends paced like a microphone: 20 s slots of 0.5 s silence + a spoken
question (espeak-ng, the questions of ``bench_duplex.py``, cycled) + silence; session i starts
``i * 5`` s late so the four do not speak in lockstep. No commits: turn-taking is the server's.

Measured:

* RSS of the server process tree every ``--rss-interval-s`` (psutil when installed, else
  ``/proc/<pid>/status``). *Warm* = median RSS over the minute after ``--warmup-min``; *end* =
  median over the last minute. Targets: ``|end / warm - 1| <= 5 %`` and every sample after the
  warm-up ``<= warm * 1.15`` (the peak is reported).
* unit lag: per unit k, receive time of ``session.unit_metrics`` k minus the send time of the
  append that closed unit k. *Drift* = median lag of the last 60 units minus median lag of the 60
  units after the warm-up, per session; target < 1/4 unit (250 ms) for every session.
* every question answered: a ``response.output_audio.delta`` after the question's speech end and
  before the next question's; 0 ``error`` events; no session ends early.

Writes ``benchmarks/results/soak.json`` (``--out-name`` to change). Usage::

    .venv/bin/python benchmarks/bench_soak.py                 # 60 minutes (the issue's run)
    .venv/bin/python benchmarks/bench_soak.py --minutes 3     # smoke: warm-up 1 min, same checks
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_duplex as D
import common as C

from app.client.collector import RECEIVED_AT_KEY
from app.client.duplex import DuplexClient
from app.client.protocol import AUDIO_DELTA, event_type

SESSIONS = 4
SLOT_S = 20.0
CHUNK_MS = 100
DRIFT_UNITS = 60
TARGET_RSS_END_PCT = 5.0
TARGET_RSS_PEAK_PCT = 15.0


def slot_audio(inp: dict[str, Any]) -> bytes:
    """One 20 s slot: 0.5 s silence, the question, silence."""
    pcm = C.silence_pcm16(D.LEAD_S) + inp["pcm"]
    return pcm + C.silence_pcm16(max(0.0, SLOT_S - C.pcm16_seconds(pcm)))


async def soak_session(url: str, idx: int, seconds: float, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run one session for ``seconds`` of media time; returns its per-unit and per-question record."""
    out: dict[str, Any] = {"session": idx, "error": None}
    questions: list[dict[str, Any]] = []
    try:
        async with DuplexClient(url, handshake_timeout_s=60) as c:
            unit_ms = c.unit_ms
            first_ms = int(c.capabilities.get("first_chunk_ms") or (unit_ms + 30))
            t0 = time.monotonic()
            offset = idx * SLOT_S / SESSIONS
            await c.stream_pcm(C.silence_pcm16(offset), chunk_ms=CHUNK_MS, realtime=True)
            q = idx
            while c.audio_end_ms / 1000.0 + SLOT_S <= seconds:
                inp = inputs[q % len(inputs)]
                start_ms = c.audio_end_ms
                questions.append({"question": inp["key"], "start_ms": start_ms,
                                  "speech_end_ms": start_ms + D.LEAD_S * 1000 + inp["speech_end_ms"]})
                await c.stream_pcm(slot_audio(inp), chunk_ms=CHUNK_MS, realtime=True)
                q += 1
            await asyncio.sleep(2.0)  # the last units' decisions
            events = list(c.collector.events)
            appends = list(c.appends)
            wall_s = time.monotonic() - t0
    except Exception as exc:  # noqa: BLE001 - recorded; the session then fails the checks
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    total_ms = appends[-1].audio_end_ms if appends else 0.0
    got: dict[int, dict] = {}
    for ev in events:
        if event_type(ev) == "session.unit_metrics" and isinstance(ev.get("unit_index"), int):
            got.setdefault(ev["unit_index"], ev)
    expected = [k for k in range(100_000) if first_ms + k * unit_ms <= total_ms + 1e-6]
    lags: list[tuple[float, float | None]] = []  # (media s of the unit's end, lag ms)
    for k in expected:
        close = D.append_reaching(appends, first_ms + k * unit_ms)
        ev = got.get(k)
        lag = (ev[RECEIVED_AT_KEY] - close.sent_at_s) * 1000.0 if ev is not None and close is not None else None
        lags.append(((first_ms + k * unit_ms) / 1000.0, lag))
    replies = []
    for qi, qq in enumerate(questions):
        a = D.append_reaching(appends, qq["speech_end_ms"])
        nxt = D.append_reaching(appends, questions[qi + 1]["speech_end_ms"]) if qi + 1 < len(questions) else None
        limit = nxt.sent_at_s if nxt is not None else float("inf")
        d = D.first_event(events, AUDIO_DELTA, after_s=a.sent_at_s) if a is not None else None
        lat = D.rel_ms(d, a.sent_at_s) if d is not None and d[RECEIVED_AT_KEY] < limit else None
        replies.append({**qq, "latency_ms": lat})
    errors = [(e.get("error") or {}).get("code") or e.get("code") for e in events if event_type(e) == "error"]
    out.update({
        "unit_ms": unit_ms, "media_s": total_ms / 1000.0, "wall_s": wall_s,
        "units_expected": len(expected), "units_missing": sum(1 for _, lag in lags if lag is None),
        "lags": lags, "replies": replies, "errors": errors,
        "ended_early": any(event_type(e) in ("session.expired", "session.closed") for e in events),
    })
    return out


def drift_ms(lags: list[tuple[float, float | None]], warmup_s: float) -> dict[str, Any]:
    """Median lag of the last DRIFT_UNITS units minus that of the DRIFT_UNITS after the warm-up."""
    after = [lag for t, lag in lags if t >= warmup_s and lag is not None]
    if len(after) < 2:
        return {"drift_ms": None, "early_ms": None, "late_ms": None}
    n = min(DRIFT_UNITS, len(after) // 2)
    early, late = statistics.median(after[:n]), statistics.median(after[-n:])
    return {"drift_ms": late - early, "early_ms": early, "late_ms": late, "units_each": n}


def rss_summary(samples: list[tuple[float, int]], warmup_s: float, end_s: float) -> dict[str, Any]:
    """Warm (the minute after the warm-up), end (the last minute) and peak RSS, MiB."""
    mib = [(t, b / 2**20) for t, b in samples if b]
    warm = [v for t, v in mib if warmup_s <= t < warmup_s + 60]
    end = [v for t, v in mib if t >= end_s - 60]
    after = [(t, v) for t, v in mib if t >= warmup_s]
    if not warm or not end or not after:
        return {"warm_mib": None}
    w, e = statistics.median(warm), statistics.median(end)
    peak_t, peak = max(after, key=lambda tv: tv[1])
    timeline = [{"t_s": round(t), "rss_mib": round(v, 1)} for t, v in mib[:: max(1, len(mib) // 120)]]
    return {"warm_mib": w, "end_mib": e, "end_vs_warm_pct": (e / w - 1) * 100, "peak_mib": peak,
            "peak_at_s": peak_t, "peak_vs_warm_pct": (peak / w - 1) * 100, "samples": len(mib),
            "timeline": timeline}


async def run(url: str, seconds: float, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return await asyncio.gather(*(soak_session(url, i, seconds, inputs) for i in range(SESSIONS)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--warmup-min", type=float, default=None, help="default: 5 (1 when --minutes < 10)")
    p.add_argument("--rss-interval-s", type=float, default=1.0)
    p.add_argument("--out-name", default="soak")
    args = p.parse_args(argv)
    seconds = args.minutes * 60
    warmup_s = 60.0 * (args.warmup_min if args.warmup_min is not None else (5 if args.minutes >= 10 else 1))
    quick = args.minutes < 30
    result = C.base_result(args.out_name, f"Soak: {SESSIONS} sessions x {args.minutes:g} min at real time",
                           "issue 11 part 6", quick=quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_soak.py --minutes 60"
    result["workload"] = (f"{SESSIONS} sessions, {args.minutes:g} min of real-time input each (100 ms appends), a "
                          f"spoken question every {SLOT_S:g} s (espeak-ng, {len(D.QUESTIONS)} questions cycled), "
                          f"sessions offset by {SLOT_S / SESSIONS:g} s; warm-up {warmup_s / 60:g} min")
    inputs = [D.speech_input(k, t, lead_s=0.0, tail_s=0.0) for k, t in D.QUESTIONS]
    with C.ServerProcess() as srv:
        ws_url = srv.base_url.replace("http://", "ws://")
        with C.RssSampler(srv.pid, interval_s=args.rss_interval_s, max_samples=100_000) as rss:
            t0 = time.monotonic()
            sessions = asyncio.run(run(ws_url, seconds, inputs))
            wall = time.monotonic() - t0
        alive = srv.proc is not None and srv.proc.poll() is None
        result["rss_source"] = rss.source
        rss_samples = list(rss.samples)
    mem = rss_summary(rss_samples, warmup_s, rss_samples[-1][0] if rss_samples else 0.0)
    per = []
    for s in sessions:
        d = drift_ms(s.get("lags") or [], warmup_s)
        lags = [lag for _, lag in s.get("lags") or [] if lag is not None]
        replies = s.get("replies") or []
        per.append({"session": s["session"], "error": s.get("error"), "media_s": s.get("media_s"),
                    "units_expected": s.get("units_expected"), "units_missing": s.get("units_missing"),
                    "lag_ms": C.summarize(lags), **d, "questions": len(replies),
                    "unanswered": sum(1 for r in replies if r["latency_ms"] is None),
                    "reply_latency_ms": C.summarize(r["latency_ms"] for r in replies),
                    "errors": s.get("errors"), "ended_early": s.get("ended_early"),
                    "unanswered_at_media_s": [round(r["start_ms"] / 1000) for r in replies
                                              if r["latency_ms"] is None]})
    questions = sum(x["questions"] for x in per)
    unanswered = sum(x["unanswered"] for x in per)
    n_errors = sum(len(x["errors"] or []) for x in per) + sum(1 for x in per if x["error"] or x["ended_early"])
    drifts = [x["drift_ms"] for x in per if x.get("drift_ms") is not None]
    max_drift = max(drifts) if len(drifts) == SESSIONS else None
    result.update({"minutes": args.minutes, "warmup_s": warmup_s, "wall_s": wall, "server_alive_at_end": alive,
                   "rss": mem, "sessions": per,
                   "all_reply_latency_ms": C.summarize(r["latency_ms"] for s in sessions
                                                       for r in s.get("replies") or [])})
    result["metrics"] = [
        C.metric("rss_end", "steady-state RSS at the end vs after warm-up", mem.get("end_vs_warm_pct"), "%", "<=",
                 TARGET_RSS_END_PCT, detail=f"warm {C.fmt_s(mem.get('warm_mib'), 'MiB', 1)}, "
                                            f"end {C.fmt_s(mem.get('end_mib'), 'MiB', 1)} (|change| judged)"),
        C.metric("rss_peak", "transient RSS peak vs after warm-up", mem.get("peak_vs_warm_pct"), "%", "<=",
                 TARGET_RSS_PEAK_PCT, detail=f"peak {C.fmt_s(mem.get('peak_mib'), 'MiB', 1)}"),
        C.metric("lag_drift", "unit lag drift (worst session)", max_drift, "ms", "<=", 250.0, n=len(drifts)),
        C.metric("unanswered", "questions unanswered", unanswered, "", "<=", 0, n=questions),
        C.metric("errors", "error events (and sessions ended early)", n_errors, "", "<=", 0),
    ]
    if mem.get("end_vs_warm_pct") is not None:  # the target is on |change|: a shrink counts too
        m = result["metrics"][0]
        m["pass"] = abs(mem["end_vs_warm_pct"]) <= TARGET_RSS_END_PCT
    path = C.write_result(args.out_name, C.round_floats(result))
    C.print_metrics(result["metrics"])
    print(f"wrote {path}")
    return 0 if all(m["pass"] is not False for m in result["metrics"]) else 1


if __name__ == "__main__":
    sys.exit(main())
