"""Full-duplex benchmark: response latency per unit length, concurrent sessions, barge-in.

All traffic goes through our :class:`app.client.duplex.DuplexClient` over
``WS /v1/realtime?duplex=1`` on 127.0.0.1, with input audio appended in 100 ms slices paced
like a microphone (slice ``[a, b)`` ms is sent at ``t0 + b/1000`` s). No commits: turn-taking
is the server's (VAD turn policy, unit clock). Times are client ``time.monotonic()`` instants;
the *media clock* is cumulative input audio (``audio_end_ms`` of appends).

(a) ``latency``: per sample, a fresh session streams 0.5 s silence + a spoken question
    (espeak-ng) + 3 s silence. ``speech_end_ms`` is the question's last speech sample on the
    media clock (energy detector :func:`app.client.latency.detect_speech_end_ms` on the WAV);
    the origin is the send time of the first append whose ``audio_end_ms`` reaches it (so the
    origin is up to one 100 ms append after the true speech end: that slack is recorded per
    sample as ``append_slack_ms``); latency = receive time of the first
    ``response.output_audio.delta`` after the origin minus the origin
    (:func:`app.client.latency.speech_end_latency` ``stream_ttfp_ms``). Streaming stops once
    that delta has arrived (the rest of the silence cannot change the figure); if it never
    does, the sample waits 3 s after the end of the input and counts as missing. N=8 per unit
    length; ``chunk_period_ms`` 1000 (default ``configs/tiny.yaml``, target p50 <= 1.2 s) and
    500 (temp YAML ``base_config: configs/tiny.yaml`` + ``duplex_session.chunk_period_ms:
    500``, target p50 <= 0.9 s). Server floor: the VAD declares the end of the turn after
    ``turn_policy.end_of_turn_silence_ms`` (500 ms) of silence, and a response is only created
    at a unit boundary; then ASR + LLM + Talker + Code2Wav of the first segment.
(b) ``concurrency``: K sessions at once (one server with ``duplex_session.max_sessions: 6``
    and stage ``max_num_seqs: 6``, unit 1000 ms), each streaming 60 s of audio: a question
    every 8 s, session i's schedule shifted by ``i * 8 / K`` s so the sessions do not speak in
    lockstep. Unit ``k`` is closed by the first append whose ``audio_end_ms`` reaches
    ``first_chunk_ms + k * unit_ms``; the server emits ``session.unit_metrics`` once per unit
    (after that unit's ``response.listen`` / speak events). A session *stays real time* when
    every unit's ``unit_metrics`` arrives (none missing), each arrives before the append that
    closes the next unit has been sent (lag < 1 unit), and the lag does not grow
    (median of the last 10 lags - median of the first 10 < 1/4 unit). K runs from 4 upwards
    (4, 6) while all sessions pass, else downwards (2, 1); ``--all-k`` runs 1, 2, 4, 6.
    Reported: the largest passing K (target >= 4). Also reported, not judged: per-question
    response latency under load (same definition as (a)) and questions left unanswered.
(c) ``barge_in``: a fresh session (default config, 1000 ms units) streams a question, then
    silence; ``BARGE_DELAYS_MS[i % 5]`` (0, 200, ..., 800 ms of media time) after the first
    ``response.output_audio.delta`` arrives the client streams a second ~3 s utterance (then
    silence). The delays spread the onset over the unit: replies open when the user's turn
    ends (``turn_policy.reply_at: end_of_turn``), mid-unit, so a fixed delay would tie each
    question to one phase. Origin: send time of the append that carries the
    second utterance's first speech sample (energy detector). End: receive time of the
    interrupted response's ``response.done`` or of a ``response.listen`` carrying its
    ``response_id``, whichever comes first. N=10, target p50 <= 1000 ms (one unit). Server-side
    budget: with ``overlap_policy: listen_only`` (the default) the server ends a response only
    at a unit boundary at which the user has spoken over it for ``turn_policy.barge_in_ms``
    (300 ms), so the expected figure is barge_in_ms + the wait for the next boundary (0..1
    unit) + processing, i.e. 300..1300 ms for 1000 ms units (p50 ~800 ms at a uniform phase). Per sample we split the figure
    into ``policy_wait_ms`` (onset -> deciding boundary, media clock) and ``decision_lag_ms``
    (send time of the append closing that unit -> end event). Samples whose response ended on
    its own before the barge-in took effect are kept in the JSON and left out of the summary.
    ``--barge-hard`` repeats (c) with the session's ``overlap_policy: barge_in_on_speech``
    (hard cancel as soon as the VAD reports speech; opt-in per session), reported separately.

Writes ``benchmarks/results/duplex.json``. Usage::

    .venv/bin/python benchmarks/bench_duplex.py              # full run (~5 min on 2 cores)
    .venv/bin/python benchmarks/bench_duplex.py --quick      # sanity run (~80 s)
    .venv/bin/python benchmarks/bench_duplex.py --parts a    # only part (a); also b, c, "a,c"
    .venv/bin/python benchmarks/bench_duplex.py --parts c --barge-hard   # (c) with both overlap policies
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C

from app.client.collector import RECEIVED_AT_KEY
from app.client.duplex import AppendRecord, DuplexClient, SessionConfig
from app.client.latency import detect_speech_end_ms, speech_end_latency
from app.client.protocol import AUDIO_DELTA, event_response_id, event_type

TARGET_LATENCY_P50_MS = {1000: 1200.0, 500: 900.0}
TARGET_MIN_K = 4
TARGET_P95_RATIO = {4: 2.0, 6: 3.0}
"""First-audio p95 at K concurrent sessions over the single session's, at most (issue #27)."""
TARGET_BARGE_IN_MS = 1000.0

CHUNK_MS = 100
LEAD_S = 0.5
TAIL_S = 3.0
SLOT_S = 8.0
VAD_WINDOW_S = 0.032
"""The tiny family's Silero VAD window, 512 samples at 16 kHz (``app/backend/models/tiny/vad.py``)."""

STRANDED_QUESTIONS = [
    ("from", "Where are you from?"),
    ("like", "What is the weather like?"),
    ("with", "Who did you go with?"),
    ("of", "What is it made of?"),
]
"""``--question-set stranded``: questions that end on a preposition (the word list alone held them open
to ``max_unfinished_pause_ms`` before 2026-12-07)."""

QUESTIONS = [
    ("capital", "What is the capital of France?"),
    ("planets", "How many planets are there in our solar system?"),
    ("weather", "What is the weather usually like in London?"),
    ("egg", "How long should I boil an egg?"),
]
"""Spoken questions of (a) and (b)."""

LONG_QUESTIONS = [
    ("engine", "Can you explain how a car engine works, step by step?"),
    ("holiday", "Describe your perfect summer holiday in a few sentences."),
    ("newyork", "What can you tell me about the city of New York?"),
]
"""Questions of (c): prompts that invite a reply long enough to talk over."""

INTERRUPTION = ("stop", "Wait, wait, stop please, I want to ask you something else instead.")
"""The second utterance of (c): ~3 s of continuous speech."""

BARGE_DELAYS_MS = (0, 200, 400, 600, 800)
"""(c): media time from the first audio delta to the start of the interruption, per sample (cycled)."""


# --------------------------------------------------------------------------- helpers
def speech_input(key: str, text: str, *, lead_s: float = 0.0, tail_s: float = 0.0) -> dict[str, Any]:
    wav = C.espeak_wav(text, f"duplex-{key}", lead_s=lead_s, tail_s=tail_s)
    pcm = C.wav_pcm16(wav)
    return {
        "key": key,
        "text": text,
        "wav": str(wav),
        "pcm": pcm,
        "audio_s": C.pcm16_seconds(pcm),
        "speech_start_ms": C.detect_speech_start_ms(pcm),
        "speech_end_ms": detect_speech_end_ms(pcm),
    }


def public(inp: dict[str, Any]) -> dict[str, Any]:
    """An input description without its PCM."""
    return {k: v for k, v in inp.items() if k != "pcm"}


def append_reaching(appends: list[AppendRecord], media_ms: float) -> AppendRecord | None:
    """First append whose cumulative ``audio_end_ms`` is at or past ``media_ms``."""
    return next((a for a in appends if a.audio_end_ms >= media_ms - 1e-6), None)


def append_carrying(appends: list[AppendRecord], media_ms: float) -> AppendRecord | None:
    """The append whose ``[audio_start_ms, audio_end_ms)`` contains ``media_ms``."""
    return next((a for a in appends if a.audio_start_ms <= media_ms < a.audio_end_ms), None)


def first_event(events: list[dict[str, Any]], kind: str, after_s: float = float("-inf"),
                response_id: str | None = None) -> dict[str, Any] | None:
    for ev in events:
        if ev[RECEIVED_AT_KEY] < after_s or event_type(ev) != kind:
            continue
        if response_id is not None and event_response_id(ev) != response_id:
            continue
        if kind == AUDIO_DELTA and not ev.get("delta"):
            continue
        return ev
    return None


def rel_ms(ev: dict[str, Any] | None, origin: float) -> float | None:
    return None if ev is None else (ev[RECEIVED_AT_KEY] - origin) * 1000.0


TURN_POLICY: dict[str, Any] = {}
"""``turn_policy`` overrides for every server of this tree (``--detector``); empty = configs/tiny.yaml's."""


def server_config(chunk_ms: int, max_sessions: int | None = None) -> tuple[Path | None, dict[str, Any]]:
    """Deploy YAML for a server: ``None`` (default configs/tiny.yaml) or a temp overlay."""
    overrides: dict[str, Any] = {}
    if TURN_POLICY:
        overrides["turn_policy"] = dict(TURN_POLICY)
    if chunk_ms != 1000:
        overrides.setdefault("duplex_session", {})["chunk_period_ms"] = chunk_ms
    if max_sessions is not None:
        overrides.setdefault("duplex_session", {})["max_sessions"] = max_sessions
        overrides["active_stream_window"] = max_sessions
        overrides["stages"] = [{"stage_id": i, "max_num_seqs": max_sessions} for i in range(3)]
    if not overrides:
        return None, {}
    return C.write_deploy_yaml(overrides), overrides


# --------------------------------------------------------------------------- (a) latency
async def latency_sample(url: str, inp: dict[str, Any], expect_unit_ms: int) -> dict[str, Any]:
    pcm = C.silence_pcm16(LEAD_S) + inp["pcm"] + C.silence_pcm16(TAIL_S)
    speech_end_ms = detect_speech_end_ms(pcm)
    out: dict[str, Any] = {"question": inp["key"], "input_audio_s": C.pcm16_seconds(pcm),
                           "speech_end_ms": speech_end_ms}
    async with DuplexClient(url, handshake_timeout_s=30) as c:
        out["unit_ms"] = c.unit_ms
        if c.unit_ms != expect_unit_ms:
            raise RuntimeError(f"server unit is {c.unit_ms} ms, expected {expect_unit_ms}")

        def after_origin(ev: dict[str, Any]) -> bool:
            if event_type(ev) != AUDIO_DELTA or not ev.get("delta"):
                return False
            a = append_reaching(c.appends, speech_end_ms)
            return a is not None and ev[RECEIVED_AT_KEY] >= a.sent_at_s

        streamer = asyncio.create_task(c.stream_pcm(pcm, chunk_ms=CHUNK_MS, realtime=True))
        waiter = asyncio.create_task(c.wait_for(after_origin, timeout_s=C.pcm16_seconds(pcm) + TAIL_S + 5,
                                                after_index=0))
        await asyncio.wait({streamer, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():  # input ended first: a grace period for a response already on its way
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), TAIL_S)
        out["stopped_early"] = not streamer.done()
        for task in (streamer, waiter):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    lat = speech_end_latency(c.collector, c.appends, speech_end_ms, realtime=True)
    events = list(c.collector.events)
    appends = list(c.appends)
    a = append_reaching(appends, speech_end_ms)
    origin = a.sent_at_s if a else None
    out["latency_ms"] = lat["stream_ttfp_ms"]
    out["ttft_ms"] = lat["stream_ttft_ms"]
    out["append_slack_ms"] = (a.audio_end_ms - speech_end_ms) if a else None
    if origin is not None:
        stopped = first_event(events, "input_audio_buffer.speech_stopped")
        created = first_event(events, "response.created")
        out.update({
            "server_speech_stopped_audio_ms": stopped.get("audio_end_ms") if stopped else None,
            "speech_stopped_rx_ms": rel_ms(stopped, origin),
            "transcript_rx_ms": rel_ms(first_event(events, "conversation.item.input_audio_transcription.completed"),
                                       origin),
            "response_created_rx_ms": rel_ms(created, origin),
            "first_audio_rx_ms": rel_ms(first_event(events, AUDIO_DELTA, after_s=origin), origin),
            "responses_before_origin": sum(1 for e in events if event_type(e) == "response.created"
                                           and e[RECEIVED_AT_KEY] < origin),
        })
    tr = first_event(events, "conversation.item.input_audio_transcription.completed")
    out["asr"] = tr.get("transcript") if tr else None
    rid = event_response_id(first_event(events, "response.created") or {})
    out["reply"] = "".join(str(e.get("delta") or "") for e in events
                           if event_type(e) == "response.output_audio_transcript.delta"
                           and event_response_id(e) == rid) if rid else None
    out["errors"] = [e for e in events if event_type(e) == "error"]
    return out


async def run_latency(url: str, unit_ms: int, n: int, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    samples = []
    for i in range(n):
        t0 = time.monotonic()
        s = await latency_sample(url, inputs[i % len(inputs)], unit_ms)
        s["i"] = i
        s["sample_wall_s"] = time.monotonic() - t0
        samples.append(s)
        print(f"[duplex] (a) unit {unit_ms} ms {i + 1}/{n} {s['question']}: latency "
              f"{C.fmt_s(s['latency_ms'], 'ms', 0)} (VAD end +{C.fmt_s(s.get('speech_stopped_rx_ms'), 'ms', 0)}, "
              f"created +{C.fmt_s(s.get('response_created_rx_ms'), 'ms', 0)}) reply {s['reply']!r}", flush=True)
        await asyncio.sleep(0.3)
    return samples


async def run_latency_pair(url: str, baseline_url: str, n: int,
                           inputs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Part (a) at 1000 ms against two servers, sample by sample: ``n`` samples each, the same input
    for both members of a pair, the order inside a pair swapped every pair."""
    ours: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    for i in range(n):
        order = [(url, ours, "current"), (baseline_url, base, "baseline")]
        for u, out, tag in order if i % 2 == 0 else order[::-1]:
            t0 = time.monotonic()
            s = await latency_sample(u, inputs[i % len(inputs)], 1000)
            s["i"] = i
            s["sample_wall_s"] = time.monotonic() - t0
            out.append(s)
            print(f"[duplex] (a) {tag} {i + 1}/{n} {s['question']}: latency {C.fmt_s(s['latency_ms'], 'ms', 0)} "
                  f"reply {s['reply']!r}", flush=True)
            await asyncio.sleep(0.3)
    return ours, base


# --------------------------------------------------------------------------- (b) concurrency
LOCKSTEP = False
"""``--lockstep``: every session's schedule starts at 0 (they ask at the same moments, each its own
question): the worst case of K people on one machine, where turns overlap and the cross-session
batches (Thinker, ASR) have most to gather."""


def build_session_audio(inputs: list[dict[str, Any]], index: int, k: int, seconds: float) -> tuple[bytes, list[dict]]:
    """``seconds`` of audio: a question every SLOT_S s, shifted by ``index * SLOT_S / k`` s (0 with
    :data:`LOCKSTEP`) rounded down
    to whole VAD windows (:data:`VAD_WINDOW_S`), so each session's speech meets the VAD's windows as the
    single session's does and the levels differ by load only. (Unrounded, "How long should I boil an
    egg?" was heard as "... boil them in?" at some offsets and waited for the 2.5 s cap, alone as
    under load: 2026-12-07, ``duplex_k_probe``.)"""
    offset_s = 0.0 if LOCKSTEP else int(index * SLOT_S / k / VAD_WINDOW_S) * VAD_WINDOW_S
    pcm = bytearray(C.silence_pcm16(offset_s))
    questions = []
    q = index
    while C.pcm16_seconds(bytes(pcm)) + LEAD_S + 4.0 <= seconds:
        inp = inputs[q % len(inputs)]
        start_s = C.pcm16_seconds(bytes(pcm))
        slot = C.silence_pcm16(LEAD_S) + inp["pcm"]
        slot += C.silence_pcm16(max(0.0, SLOT_S - C.pcm16_seconds(slot)))
        pcm += slot
        questions.append({"question": inp["key"], "start_ms": start_s * 1000,
                          "speech_end_ms": start_s * 1000 + LEAD_S * 1000 + inp["speech_end_ms"]})
        q += 1
    total = round(seconds * 16_000) * 2
    pcm = pcm[:total] + C.silence_pcm16(max(0.0, (total - len(pcm)) / 32_000))
    return bytes(pcm), questions


async def concurrency_session(url: str, pcm: bytes, questions: list[dict], idx: int) -> dict[str, Any]:
    out: dict[str, Any] = {"session": idx, "error": None}
    try:
        async with DuplexClient(url, handshake_timeout_s=30) as c:
            unit_ms = c.unit_ms
            first_ms = int(c.capabilities.get("first_chunk_ms") or (unit_ms + 30))
            await c.stream_pcm(pcm, chunk_ms=CHUNK_MS, realtime=True)
            await asyncio.sleep(2.0)  # the last units' decisions and replies
            events = list(c.collector.events)
            appends = list(c.appends)
    except Exception as exc:  # noqa: BLE001 - recorded; the session then fails the check
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    total_ms = appends[-1].audio_end_ms if appends else 0.0
    expected = [k for k in range(10_000) if first_ms + k * unit_ms <= total_ms + 1e-6]
    got: dict[int, dict] = {}
    for ev in events:
        if event_type(ev) == "session.unit_metrics" and isinstance(ev.get("unit_index"), int):
            got.setdefault(ev["unit_index"], ev)
    units = []
    for k in expected:
        close = append_reaching(appends, first_ms + k * unit_ms)
        nxt = append_reaching(appends, first_ms + (k + 1) * unit_ms)
        ev = got.get(k)
        if ev is None or close is None:
            units.append({"k": k, "lag_ms": None, "on_time": False})
            continue
        lag = (ev[RECEIVED_AT_KEY] - close.sent_at_s) * 1000.0
        on_time = ev[RECEIVED_AT_KEY] < nxt.sent_at_s if nxt is not None else lag < unit_ms
        units.append({"k": k, "lag_ms": lag, "on_time": on_time, "decision": ev.get("decision"),
                      "server_unit_interval_ms": ev.get("compute_ms")})
    lags = [u["lag_ms"] for u in units if u["lag_ms"] is not None]
    head, tail = lags[:10], lags[-10:]
    drift = statistics.median(tail) - statistics.median(head) if head and tail else None
    missing = sum(1 for u in units if u["lag_ms"] is None)
    late = sum(1 for u in units if u["lag_ms"] is not None and not u["on_time"])
    errors = [e for e in events if event_type(e) == "error"]
    closed_early = any(event_type(e) in ("session.expired",) for e in events)
    ok = bool(units) and missing == 0 and late == 0 and drift is not None and drift < unit_ms / 4 \
        and not errors and not closed_early
    # replies under load (reported, not judged)
    replies = []
    for qi, q in enumerate(questions):
        a = append_reaching(appends, q["speech_end_ms"])
        if a is None:
            continue
        nxt_a = append_reaching(appends, questions[qi + 1]["speech_end_ms"]) if qi + 1 < len(questions) else None
        limit = nxt_a.sent_at_s if nxt_a else float("inf")
        d = first_event(events, AUDIO_DELTA, after_s=a.sent_at_s)
        lat = rel_ms(d, a.sent_at_s) if d is not None and d[RECEIVED_AT_KEY] < limit else None
        replies.append({"question": q["question"], "speech_end_ms": q["speech_end_ms"], "latency_ms": lat})
    out.update({
        "unit_ms": unit_ms,
        "first_chunk_ms": first_ms,
        "audio_s": total_ms / 1000.0,
        "units_expected": len(expected),
        "units_missing": missing,
        "units_late": late,
        "lag_ms": C.summarize(lags),
        "lag_drift_ms": drift,
        "errors": [e.get("code") or (e.get("error") or {}).get("code") for e in errors],
        "stays_real_time": ok,
        "units": units,
        "replies": replies,
        "reply_latency_ms": C.summarize(r["latency_ms"] for r in replies),
        "unanswered": sum(1 for r in replies if r["latency_ms"] is None),
    })
    return out


async def run_concurrency_level(url: str, k: int, seconds: float, inputs: list[dict[str, Any]],
                                label: str = "") -> dict[str, Any]:
    plans = [build_session_audio(inputs, i, k, seconds) for i in range(k)]
    before = await asyncio.to_thread(C.scrape_metrics, url)
    t0 = time.monotonic()
    sessions = await asyncio.gather(*(concurrency_session(url, pcm, qs, i) for i, (pcm, qs) in enumerate(plans)))
    wall = time.monotonic() - t0
    after = await asyncio.to_thread(C.scrape_metrics, url)
    cores = C.core_use_delta(before, after)
    batching = {name.removeprefix("omni_thinker_batch_") + "".join(f"{{{k}={v}}}" for k, v in labels):
                value - before.get((name, labels), 0.0) for (name, labels), value in after.items()
                if name.startswith("omni_thinker_batch_") and "max_size" not in name}
    asr = {key: after.get(("omni_stage_batch_size_" + key, (("stage", "asr"),)), 0.0)
           - before.get(("omni_stage_batch_size_" + key, (("stage", "asr"),)), 0.0) for key in ("count", "sum")}
    asr_wait = {key: after.get(("omni_stage_queue_wait_seconds_" + key, (("stage", "asr"),)), 0.0)
                - before.get(("omni_stage_queue_wait_seconds_" + key, (("stage", "asr"),)), 0.0) for key in ("count", "sum")}
    asr_batching = {"calls": asr["count"], "transcripts": asr["sum"],
                    "mean_batch": asr["sum"] / asr["count"] if asr["count"] else None,
                    "mean_wait_ms": 1000 * asr_wait["sum"] / asr_wait["count"] if asr_wait["count"] else None}
    ok = all(s.get("stays_real_time") for s in sessions)
    lags = [u["lag_ms"] for s in sessions for u in s.get("units", []) if u["lag_ms"] is not None]
    reply = [r["latency_ms"] for s in sessions for r in s.get("replies", [])]
    level = {
        "k": k,
        "all_real_time": ok,
        "wall_s": wall,
        "lag_ms": C.summarize(lags),
        "max_drift_ms": max((s["lag_drift_ms"] for s in sessions if s.get("lag_drift_ms") is not None),
                            default=None),
        "reply_latency_ms": C.summarize(reply),
        "questions": len(reply),
        "unanswered": sum(1 for r in reply if r is None),
        "cores": cores,
        "thinker_batching": batching,
        "asr_batching": asr_batching,
        "sessions": sessions,
    }
    print(f"[duplex] (b){label} K={k}: {'all real time' if ok else 'NOT real time'}; unit_metrics lag p50 "
          f"{C.fmt_s(level['lag_ms']['p50'], 'ms', 0)} max {C.fmt_s(level['lag_ms']['max'], 'ms', 0)}; "
          f"reply latency p50 {C.fmt_s(level['reply_latency_ms']['p50'], 'ms', 0)} "
          f"p95 {C.fmt_s(level['reply_latency_ms']['p95'], 'ms', 0)}, "
          f"{level['unanswered']}/{len(reply)} unanswered; ASR stage: {asr_batching['transcripts']:.0f} transcripts "
          f"in {asr_batching['calls']:.0f} calls", flush=True)
    for row in cores[:6]:
        print(f"    cores {row['priority']}/{row['work']}: {row.get('calls', 0):.0f} calls, wait "
              f"{row.get('wait_s', 0):.2f} s (mean {C.fmt_s(row['wait_ms_mean'], 'ms', 1)}), hold "
              f"{row.get('hold_s', 0):.2f} s", flush=True)
    return level


async def run_concurrency_pair(url: str, baseline_url: str, ks: list[int], seconds: float,
                               inputs: list[dict[str, Any]]) -> tuple[dict, dict]:
    """Each K on both servers, one after the other (which goes first alternates with K)."""
    levels: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    for i, k in enumerate(ks):
        order = [("this", url), ("baseline", baseline_url)]
        for name, u in order if i % 2 == 0 else order[::-1]:
            levels[name].append(await run_concurrency_level(u, k, seconds, inputs, label=f" [{name}]"))
            await asyncio.sleep(1.0)

    def wrap(lv: list[dict[str, Any]]) -> dict[str, Any]:
        passing = [x["k"] for x in lv if x["all_real_time"]]
        return {"order": "as listed, alternating which server goes first", "max_k": max(passing) if passing else 0,
                "levels": sorted(lv, key=lambda x: x["k"])}

    return wrap(levels["this"]), wrap(levels["baseline"])


async def run_concurrency(url: str, ks: list[int] | None, seconds: float, inputs: list[dict[str, Any]]) -> dict:
    levels: dict[int, dict[str, Any]] = {}
    if ks is not None:
        for k in ks:
            levels[k] = await run_concurrency_level(url, k, seconds, inputs)
            await asyncio.sleep(1.0)
        order = "as listed"
    else:  # 4 upwards while passing, else downwards (assumes passing is monotone in K)
        order = "search: 4, then 6 if 4 passes, else 2 then 1"
        for k in (4, 6):
            levels[k] = await run_concurrency_level(url, k, seconds, inputs)
            await asyncio.sleep(1.0)
            if not levels[k]["all_real_time"]:
                break
        if not levels[4]["all_real_time"]:
            for k in (2, 1):
                levels[k] = await run_concurrency_level(url, k, seconds, inputs)
                await asyncio.sleep(1.0)
                if levels[k]["all_real_time"]:
                    break
    passing = [k for k, lv in levels.items() if lv["all_real_time"]]
    return {"order": order, "max_k": max(passing) if passing else 0,
            "levels": [levels[k] for k in sorted(levels)]}


# --------------------------------------------------------------------------- (c) barge-in
async def barge_in_sample(url: str, question: dict[str, Any], interruption: dict[str, Any],
                          overlap_policy: str | None = None, delay_ms: float = 0.0) -> dict[str, Any]:
    out: dict[str, Any] = {"question": question["key"], "interrupted": False, "delay_ms": delay_ms,
                           "overlap_policy": overlap_policy or "server default (listen_only)"}
    q_pcm = C.silence_pcm16(LEAD_S) + question["pcm"]
    chunk_bytes = CHUNK_MS * 32
    max_ms = 40_000.0
    trigger = asyncio.Event()
    state: dict[str, Any] = {"barge_at_ms": None, "triggered_at_ms": None}

    def slices(pcm: bytes) -> list[bytes]:
        return [pcm[i : i + chunk_bytes] for i in range(0, len(pcm), chunk_bytes)]

    config = SessionConfig(overlap_policy=overlap_policy)
    async with DuplexClient(url, config=config, handshake_timeout_s=30) as c:
        unit_ms = c.unit_ms
        first_ms = int(c.capabilities.get("first_chunk_ms") or (unit_ms + 30))

        async def sender() -> None:
            src: deque[bytes] = deque(slices(q_pcm))
            t0 = time.monotonic()
            while c.audio_end_ms < max_ms:
                if trigger.is_set() and state["triggered_at_ms"] is None:
                    state["triggered_at_ms"] = c.audio_end_ms
                if state["triggered_at_ms"] is not None and state["barge_at_ms"] is None and not src and \
                        c.audio_end_ms >= state["triggered_at_ms"] + delay_ms:
                    state["barge_at_ms"] = c.audio_end_ms
                    src.extend(slices(interruption["pcm"]))
                chunk = src.popleft() if src else C.silence_pcm16(CHUNK_MS / 1000)
                due = t0 + (c.audio_end_ms + len(chunk) / 32.0) / 1000.0
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await c.append_audio(chunk)

        send_task = asyncio.create_task(sender())
        try:
            first = await c.wait_for(lambda e: event_type(e) == AUDIO_DELTA and bool(e.get("delta")),
                                     timeout_s=25, after_index=0)
            rid = event_response_id(first)
            out["response_id"] = rid
            trigger.set()

            def ended(e: dict[str, Any]) -> bool:
                kind = event_type(e)
                return (kind == "response.done" and event_response_id(e) == rid) or \
                       (kind == "response.listen" and e.get("response_id") == rid)

            end = await c.wait_for(ended, timeout_s=15, after_index=0)
        except TimeoutError as exc:
            out["error"] = f"timeout: {exc}"
            end = None
        finally:
            send_task.cancel()
            with contextlib.suppress(BaseException):
                await send_task
    # after session.closed: every event the server sent before closing is in the collector
    events = list(c.collector.events)
    appends = list(c.appends)
    if end is None or state["barge_at_ms"] is None:
        out["latency_ms"] = None
        return out
    onset_media = state["barge_at_ms"] + interruption["speech_start_ms"]
    a = append_carrying(appends, onset_media)
    done = first_event(events, "response.done", response_id=rid)
    listen = next((e for e in events if event_type(e) == "response.listen" and e.get("response_id") == rid), None)
    details = ((done or {}).get("response") or {}).get("status_details") or {}
    out.update({
        "first_audio_media_ms": next((x.audio_end_ms for x in appends if x.sent_at_s >= first[RECEIVED_AT_KEY]),
                                     None),
        "barge_at_media_ms": state["barge_at_ms"],
        "onset_media_ms": onset_media,
        "end_event": event_type(end),
        "done_status": ((done or {}).get("response") or {}).get("status"),
        "done_reason": details.get("reason"),
        "listen_reason": (((listen or {}).get("response") or {}).get("metadata") or {}).get("reason"),
    })
    if a is None:
        out["latency_ms"] = None
        out["error"] = "onset append not found (response ended before the interruption was sent)"
        return out
    out["interrupted"] = out["done_reason"] in ("user_overlap", "barge_in") or out["listen_reason"] == "user_overlap"
    out["latency_ms"] = (end[RECEIVED_AT_KEY] - a.sent_at_s) * 1000.0
    out["onset_append_slack_ms"] = a.audio_end_ms - onset_media  # the origin is this much media time after onset
    if end[RECEIVED_AT_KEY] < a.sent_at_s:
        out["interrupted"] = False
        out["note"] = "the response ended before the interruption started"
    started = next((e for e in events if event_type(e) == "input_audio_buffer.speech_started"
                    and e[RECEIVED_AT_KEY] >= a.sent_at_s - 0.5), None)
    out["server_speech_started_audio_ms"] = started.get("audio_start_ms") if started else None
    unit_index = (((listen or {}).get("response") or {}).get("metadata") or {}).get("unit_index")
    if isinstance(unit_index, int):
        boundary = first_ms + unit_index * unit_ms
        close = append_reaching(appends, boundary)
        out["deciding_unit"] = unit_index
        out["policy_wait_ms"] = boundary - onset_media
        out["decision_lag_ms"] = (end[RECEIVED_AT_KEY] - close.sent_at_s) * 1000.0 if close else None
    if out["first_audio_media_ms"] is not None:
        # where in its unit the first audio arrived (0 = right after a boundary)
        out["first_audio_unit_phase_ms"] = (out["first_audio_media_ms"] - first_ms) % unit_ms
    out["reply"] = (((done or {}).get("response") or {}).get("output") or [{}])[0].get("content", [{}])[0].get(
        "transcript") if done else None
    out["reply_audio_ms_sent"] = ((done or {}).get("response") or {}).get("metadata", {}).get("audio_duration_ms")
    return out


async def run_barge_in(url: str, n: int, questions: list[dict[str, Any]], interruption: dict[str, Any],
                       overlap_policy: str | None = None) -> list[dict]:
    samples = []
    for i in range(n):
        t0 = time.monotonic()
        s = await barge_in_sample(url, questions[i % len(questions)], interruption, overlap_policy,
                                  BARGE_DELAYS_MS[i % len(BARGE_DELAYS_MS)])
        s["i"] = i
        s["sample_wall_s"] = time.monotonic() - t0
        samples.append(s)
        print(f"[duplex] (c) {overlap_policy or 'default'} {i + 1}/{n} {s['question']}: "
              f"{C.fmt_s(s.get('latency_ms'), 'ms', 0)} "
              f"interrupted={s['interrupted']} end={s.get('end_event')} reason={s.get('done_reason')} "
              f"policy_wait={C.fmt_s(s.get('policy_wait_ms'), 'ms', 0)} "
              f"lag={C.fmt_s(s.get('decision_lag_ms'), 'ms', 0)}", flush=True)
        await asyncio.sleep(0.3)
    return samples


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="sanity run: N=2 per unit, K=2 for 16 s, 1 barge-in")
    p.add_argument("--parts", default="a,b,c", help="comma list of parts to run: a (latency), b (concurrency), "
                                                   "c (barge-in)")
    p.add_argument("--n", type=int, default=None, help="(a) samples per unit length (default 8; quick 2)")
    p.add_argument("--session-seconds", type=float, default=None, help="(b) audio per session (default 60; "
                                                                       "quick 16)")
    p.add_argument("--k", default=None, help="(b) comma list of K to run instead of the search, e.g. 1,2,4,6")
    p.add_argument("--all-k", action="store_true", help="(b) run K = 1, 2, 4, 6")
    p.add_argument("--barge-n", type=int, default=None, help="(c) samples (default 10; quick 1)")
    p.add_argument("--baseline-tree", default=None, help="(a) also run part (a) at 1000 ms against the app of "
                   "this checkout (e.g. a git worktree of an older commit), interleaved sample by sample with the "
                   "current tree on two servers up at once; reported side by side. (b) with --k: each K on both "
                   "servers, one after the other")
    p.add_argument("--detector", default=None, help="turn_policy.detector for this tree's servers (silence also "
                   "sets resume_window_ms 0: the old policy); default: configs/tiny.yaml's")
    p.add_argument("--question-set", default="default", choices=("default", "stranded"),
                   help="(a) the questions: default (QUESTIONS) or stranded (STRANDED_QUESTIONS)")
    p.add_argument("--units", default="1000,500", help="(a) unit lengths to run, e.g. 1000")
    p.add_argument("--result-name", default="duplex", help="results/<name>.json (default duplex); e.g. "
                   "duplex_silence for a run with --detector silence beside the default one")
    p.add_argument("--barge-hard", action="store_true", help="(c) also measure with the session's overlap_policy "
                                                            "barge_in_on_speech (hard cancel on speech; reported "
                                                            "separately, not the default behaviour)")
    p.add_argument("--lockstep", action="store_true", help="(b) every session asks at the same moments (no shift "
                                                          "between their schedules): the worst case for one machine")
    args = p.parse_args(argv)
    global LOCKSTEP
    LOCKSTEP = args.lockstep
    if args.detector:
        TURN_POLICY.update({"detector": args.detector, **({"resume_window_ms": 0} if args.detector == "silence" else {})})
    units = {int(x) for x in args.units.split(",") if x.strip()}
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    n = args.n or (2 if args.quick else 8)
    seconds = args.session_seconds or (16.0 if args.quick else 60.0)
    ks = [int(x) for x in args.k.split(",")] if args.k else ([1, 2, 4, 6] if args.all_k else None)
    if args.quick and ks is None:
        ks = [2]
    barge_n = args.barge_n or (1 if args.quick else 10)
    t_bench = time.monotonic()

    result = C.base_result("duplex", "Full duplex: response latency, concurrent sessions, barge-in", "full duplex",
                           quick=args.quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_duplex.py"
    result["parts"] = sorted(parts)
    result["turn_policy_overrides"] = dict(TURN_POLICY)
    metrics: list[dict[str, Any]] = []
    notes: list[str] = []
    inputs = [speech_input(k, t) for k, t in (STRANDED_QUESTIONS if args.question_set == "stranded" else QUESTIONS)]
    long_inputs = [speech_input(k, t) for k, t in LONG_QUESTIONS]
    interruption = speech_input(*INTERRUPTION)
    result["inputs"] = {"questions": [public(x) for x in inputs], "barge_in_questions": [public(x) for x in long_inputs],
                        "interruption": public(interruption),
                        "speech": "espeak-ng voice en, 160 wpm, 16 kHz mono PCM16",
                        "append_ms": CHUNK_MS, "pacing": "real time (slice [a,b) sent at t0 + b/1000 s)",
                        "lead_silence_s": LEAD_S, "tail_silence_s": TAIL_S}

    # ---- (a) + (c): default config (1000 ms); (a) again at 500 ms
    if "a" in parts or "c" in parts:
        cfg1000, _ = server_config(1000)
        srv = C.ServerProcess(deploy_config=cfg1000)
        srv.start()
        try:
            if "a" in parts and 1000 in units and args.baseline_tree:
                base = C.ServerProcess(tree=args.baseline_tree)
                base.start()
                try:
                    s1000, sbase = asyncio.run(run_latency_pair(srv.base_url, base.base_url, n, inputs))
                finally:
                    base.stop()
                result.setdefault("latency", {})["1000"] = {"server": srv.command, "deploy_overrides": {},
                                                             "n": n, "samples": s1000, "git": C._git("rev-parse",
                                                                                                      "--short",
                                                                                                      "HEAD")}
                result["latency"]["1000-baseline"] = {
                    "server": base.command, "deploy_overrides": {}, "n": n, "samples": sbase,
                    "git": C.tree_commit(args.baseline_tree),
                    "pairing": "samples alternate between the two servers (order swapped every pair), same inputs"}
            elif "a" in parts and 1000 in units:
                s1000 = asyncio.run(run_latency(srv.base_url, 1000, n, inputs))
                result.setdefault("latency", {})["1000"] = {"server": srv.command, "deploy_overrides": {},
                                                             "n": n, "samples": s1000}
            if "c" in parts:
                bs = asyncio.run(run_barge_in(srv.base_url, barge_n, long_inputs, interruption))
                result["barge_in"] = {"server": srv.command, "deploy_overrides": {}, "n": barge_n,
                                      "overlap_policy": "listen_only (server default)", "samples": bs}
                if args.barge_hard:
                    bs = asyncio.run(run_barge_in(srv.base_url, barge_n, long_inputs, interruption,
                                                  "barge_in_on_speech"))
                    result["barge_in_hard"] = {"server": srv.command, "deploy_overrides": {}, "n": barge_n,
                                               "overlap_policy": "barge_in_on_speech (session.update)",
                                               "samples": bs}
        finally:
            srv.stop()
    if "a" in parts and 500 in units:
        cfg, overrides = server_config(500)
        srv = C.ServerProcess(deploy_config=cfg)
        srv.start()
        try:
            s500 = asyncio.run(run_latency(srv.base_url, 500, n, inputs))
        finally:
            srv.stop()
        result.setdefault("latency", {})["500"] = {"server": srv.command, "deploy_overrides": overrides, "n": n,
                                                    "samples": s500}
    if "a" in parts:
        for unit in list(result.get("latency", {})):
            block = result["latency"][unit]
            ss = block["samples"]
            block["summary"] = {
                "latency_ms": C.summarize(s["latency_ms"] for s in ss),
                "speech_stopped_rx_ms": C.summarize(s.get("speech_stopped_rx_ms") for s in ss),
                "response_created_rx_ms": C.summarize(s.get("response_created_rx_ms") for s in ss),
                "append_slack_ms": C.summarize(s.get("append_slack_ms") for s in ss),
                "missing": sum(1 for s in ss if s["latency_ms"] is None),
            }
            lat = block["summary"]["latency_ms"]
            unit_ms = int(unit.split("-")[0])
            label = f"{unit_ms} ms units" + (", questions ending on a preposition"
                                              if args.question_set == "stranded" else "") + \
                (f", baseline {block.get('git')}" if "-baseline" in unit else "")
            metrics.append(C.metric(
                f"latency_p50_{unit}", f"Speech end -> first audio delta, {label}, p50",
                lat["p50"], "ms", "<=", TARGET_LATENCY_P50_MS[unit_ms], n=lat["n"],
                detail=f"p95 {C.fmt_s(lat['p95'], 'ms', 0)}; {block['summary']['missing']} of {n} without audio"))
            if block["summary"]["missing"]:
                notes.append(f"(a) {unit} ms: {block['summary']['missing']} of {n} samples got no audio within "
                             f"{TAIL_S:g} s of the end of the input; they are left out of the percentiles.")

    # ---- (b) concurrency
    if "b" in parts:
        cfg, overrides = server_config(1000, max_sessions=6)
        srv = C.ServerProcess(deploy_config=cfg)
        srv.start()
        base = None
        try:
            if args.baseline_tree and ks:
                base = C.ServerProcess(deploy_config=C.write_deploy_yaml(overrides, tree=args.baseline_tree),
                                       tree=args.baseline_tree)
                base.start()
                conc, conc_base = asyncio.run(run_concurrency_pair(srv.base_url, base.base_url, ks, seconds, inputs))
                conc_base.update({"server": base.command, "git": C.tree_commit(args.baseline_tree)})
                result["concurrency_baseline"] = conc_base
            else:
                conc = asyncio.run(run_concurrency(srv.base_url, ks, seconds, inputs))
        finally:
            srv.stop()
            if base is not None:
                base.stop()
        conc.update({"server": srv.command, "deploy_overrides": overrides, "session_seconds": seconds, "lockstep": LOCKSTEP,
                     "question_every_s": SLOT_S,
                     "criterion": "every unit's session.unit_metrics arrives, each before the append closing the "
                                  "next unit is sent, and median(last 10 lags) - median(first 10) < unit/4"})
        result["concurrency"] = conc
        tested = sorted(lv["k"] for lv in conc["levels"])
        metrics.append(C.metric("max_k", "Concurrent sessions that stay real time (max K)", conc["max_k"],
                                "sessions", ">=", TARGET_MIN_K, n=len(tested),
                                detail=f"K tested: {tested}; {seconds:g} s of audio per session"))
        if set(tested) != {1, 2, 4, 6}:
            notes.append(f"(b) K tested: {tested} (search order: {conc['order']}).")
        for label, block in (("", conc), (" (baseline)", result.get("concurrency_baseline"))):
            if not block:
                continue
            by_k = {lv["k"]: lv for lv in block["levels"]}
            alone = (by_k.get(1) or {}).get("reply_latency_ms", {}).get("p95")
            for k, limit in TARGET_P95_RATIO.items():
                p95 = (by_k.get(k) or {}).get("reply_latency_ms", {}).get("p95")
                if alone and p95:
                    metrics.append(C.metric(
                        f"p95_ratio_k{k}{'_baseline' if label else ''}",
                        f"First audio p95 at K={k} / at K=1{label}", p95 / alone, "x", "<=", limit,
                        n=by_k[k]["reply_latency_ms"]["n"],
                        detail=f"{C.fmt_s(p95, 'ms', 0)} vs {C.fmt_s(alone, 'ms', 0)}; p50 "
                               f"{C.fmt_s(by_k[k]['reply_latency_ms']['p50'], 'ms', 0)} vs "
                               f"{C.fmt_s(by_k[1]['reply_latency_ms']['p50'], 'ms', 0)}"
                               + (f"; {block.get('git')}" if label else "")))

    if "c" in parts:
        budgets = {
            "barge_in": "turn_policy.barge_in_ms 300 + wait for the next unit boundary (0..1000 ms) => 300..1300 ms "
                        "before processing (overlap_policy listen_only, the default)",
            "barge_in_hard": "VAD onset (turn_policy.min_speech_ms 250 of speech) then an immediate cancel "
                             "(overlap_policy barge_in_on_speech, opt-in per session)",
        }
        for key, label in (("barge_in", "default policy"), ("barge_in_hard", "overlap_policy barge_in_on_speech")):
            if key not in result:
                continue
            bs = result[key]["samples"]
            used = [s for s in bs if s["interrupted"]]
            result[key]["summary"] = {
                "latency_ms": C.summarize(s["latency_ms"] for s in used),
                "policy_wait_ms": C.summarize(s.get("policy_wait_ms") for s in used),
                "decision_lag_ms": C.summarize(s.get("decision_lag_ms") for s in used),
                "first_audio_unit_phase_ms": C.summarize(s.get("first_audio_unit_phase_ms") for s in used),
                "interrupted": len(used),
                "not_interrupted": len(bs) - len(used),
                "server_budget": budgets[key],
            }
            lat = result[key]["summary"]["latency_ms"]
            metrics.append(C.metric(f"{key}_p50", f"Barge-in ({label}): speech onset -> interrupted response ends, "
                                    "p50", lat["p50"], "ms", "<=", TARGET_BARGE_IN_MS, n=lat["n"],
                                    detail=f"max {C.fmt_s(lat['max'], 'ms', 0)}; "
                                           f"{len(bs) - len(used)} of {len(bs)} samples not interrupted"))
            if len(used) < len(bs):
                notes.append(f"(c) {label}: {len(bs) - len(used)} of {len(bs)} samples: the response ended on its "
                             "own (or there was none) before the interruption took effect; left out of the summary.")

    result["metrics"] = metrics
    result["notes"] = notes
    result["wall_s"] = time.monotonic() - t_bench
    result["finished_at"] = C.now_iso()
    path = C.write_result(args.result_name, C.round_floats(result, 3))
    print(f"[duplex] wrote {path.relative_to(C.ROOT)} in {result['wall_s']:.0f} s", flush=True)
    C.print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
