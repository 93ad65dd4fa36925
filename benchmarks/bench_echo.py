"""Echo gate detection rates over a grid of client leads x echo levels x rooms (issue #10, part 5).

Offline, on the real parts the session uses: the released reply is Piper speech (the ``tiny``
voice, ``en_US-joe-medium``) cut into 1 s deltas and released like the session does (at most
1.5 units ahead of its playback clock, checked after every 100 ms append); a simulated client
(:class:`app.client.echo_path.EchoPath`) plays each delta when it arrives plus its lead and mixes
the room's echo into its microphone; the session's :class:`~app.backend.duplex.echo.EchoGate`
sees the same releases; the input goes through the real Silero VAD (``tiny``) behind
:class:`~app.backend.duplex.echo.GatedVad` into the real
:class:`~app.backend.turns.silence.SilenceTurnDetector` with the default ``turn_policy``.

Per cell, two runs:

* **echo only** (the user is silent): ``echo_detection`` = share of the windows the VAD takes
  for speech that the gate marks echo; ``false_onset`` = a ``speech_started`` while the reply is
  possible (``overlap_policy: barge_in_on_speech`` would cancel it); ``false_soft`` = the user
  "speaking" >= ``barge_in_ms`` at a unit boundary (soft interrupt); ``false_answer`` = an
  ``end_of_turn`` with >= ``overlap_short_ack_ms`` of speech (an answered echo). The same three
  flags without the gate are the ``baseline_*`` columns.
* **barge-in** (a question spoken over the reply 2.5 s after it starts playing): ``user_pass`` =
  share of the user's speech windows (VAD on the user's clean audio) the gate lets through;
  ``onset_ms`` = first ``speech_started`` after the user's onset (hard cancel), ``soft_ms`` =
  first unit boundary at which the user has spoken >= ``barge_in_ms`` (soft interrupt), both from
  the user's first speech sample (None: missed).

Writes ``benchmarks/results/echo.json``. ``--quick`` runs a 2 x 2 x 2 grid.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (
    SPEECH_CACHE,
    base_result,
    espeak_wav,
    round_floats,
    write_result,
)

RATE = 16_000
CHUNK = 1600  # 100 ms appends
SPEAK_AT = 16_000  # the reply's first delta is released 1.0 s into the session
DELTA_S = 1.0
LEADS_MS = (0, 250, 500, 1000, 1500)
LEVELS_DB = (-20, -12, -6)
ROOMS = ("dry", "room", "wet")
REPLY_TEXT = ("Once upon a time there was a little cat who lived in a big house near the river. Every morning "
              "she walked down to the water to look at the fish, and every evening she came home to sleep.")
USER_TEXT = "Wait, stop. What is two plus two?"
BARGE_AFTER_S = 2.5
NOISE_DB = -65.0


def _reply_24k() -> np.ndarray:
    from app.media import resample
    from e2e.media import read_wav, speech_wav

    path = speech_wav(REPLY_TEXT, SPEECH_CACHE / "echo_reply_piper.wav")
    x, rate = read_wav(path)
    return resample(x, rate, 24_000)


def _user_16k() -> np.ndarray:
    import soundfile as sf

    x, _ = sf.read(espeak_wav(USER_TEXT, "echo_user.wav"), dtype="float32")
    return x


def _boundaries(n: int) -> list[int]:
    return [1030 * 16 + k * RATE for k in range(n // RATE + 2)]


def run_cell(reply: np.ndarray, user: np.ndarray | None, *, lead_ms: float, level_db: float, room: str,
             gated: bool, cfg: Any, new_vad: Any) -> dict[str, Any]:
    """One session run; returns its detector events and gate statistics."""
    from app.backend.duplex.echo import EchoGate
    from app.backend.turns.silence import SilenceTurnDetector
    from app.client.echo_path import EchoPath

    gate = EchoGate(enabled=gated)
    verdicts: list[np.ndarray] = []
    mics: list[np.ndarray] = []
    judge = gate.judge

    def recording_judge(x: np.ndarray) -> np.ndarray:
        v = judge(x)
        verdicts.append(v)
        return v

    gate.judge = recording_judge  # type: ignore[method-assign]
    det = SilenceTurnDetector(gate.wrap(new_vad()), cfg)
    path = EchoPath(gain_db=level_db, lead_ms=lead_ms, room=room)
    deltas = [reply[i : i + int(DELTA_S * 24_000)] for i in range(0, reply.size, int(DELTA_S * 24_000))]
    reply_s = reply.size / 24_000
    total = SPEAK_AT + int((reply_s + 4.0 + lead_ms / 1000) * RATE)
    rng = np.random.default_rng(1)
    mic_user = np.zeros(total, np.float32)
    user_at = None
    if user is not None:
        user_at = SPEAK_AT + int((BARGE_AFTER_S + lead_ms / 1000) * RATE)
        mic_user[user_at : user_at + user.size] = user[: total - user_at]
    noise = (10 ** (NOISE_DB / 20) * rng.standard_normal(total)).astype(np.float32)
    sent_ms = 0.0
    k = 0
    events: list[tuple[str, int, float]] = []
    soft: list[int] = []
    bounds = _boundaries(total)
    b = 0
    pos = 0
    t0 = time.perf_counter()
    while pos < total:
        if pos >= SPEAK_AT:  # the session releases while sent < played + 1.5 units
            played_ms = (pos - SPEAK_AT) / 16.0
            while k < len(deltas) and sent_ms < played_ms + 1500.0:
                gate.play(deltas[k], pos)
                path.receive(deltas[k], pos)
                sent_ms += deltas[k].size / 24.0
                k += 1
        chunk = path.mix(mic_user[pos : pos + CHUNK] + noise[pos : pos + CHUNK], pos)
        mics.append(chunk)
        for sig in det.feed(chunk):
            events.append((sig.kind, sig.at_sample, sig.speech_ms))
        pos += chunk.size
        while b < len(bounds) and bounds[b] <= pos:
            if det.user_speaking and det.current_speech_ms >= cfg.barge_in_ms:
                soft.append(bounds[b])
            b += 1
    cpu_s = time.perf_counter() - t0
    return {"events": events, "soft": soft, "gate": gate.stats, "cpu_s": cpu_s, "user_at": user_at,
            "audio_s": total / RATE, "delay_ms": gate.delay_ms, "mic": np.concatenate(mics),
            "verdicts": np.concatenate(verdicts)}


def _vad_speech(new_vad: Any, audio: np.ndarray, threshold: float) -> np.ndarray:
    return np.asarray(new_vad().process(audio), np.float32) >= threshold


def evaluate(reply: np.ndarray, user: np.ndarray, lead_ms: float, level_db: float, room: str, cfg: Any,
             new_vad: Any) -> dict[str, Any]:
    """Both runs of one grid cell (and the ungated baseline of the echo-only run)."""
    out: dict[str, Any] = {"lead_ms": lead_ms, "level_db": level_db, "room": room}
    ack = cfg.overlap_short_ack_ms
    for gated in (True, False):
        r = run_cell(reply, None, lead_ms=lead_ms, level_db=level_db, room=room, gated=gated, cfg=cfg,
                     new_vad=new_vad)
        onsets = [e for e in r["events"] if e[0] == "speech_started"]
        answers = [e for e in r["events"] if e[0] == "end_of_turn" and e[2] >= ack]
        key = "" if gated else "baseline_"
        out[key + "false_onset"] = bool(onsets)
        out[key + "false_soft"] = bool(r["soft"])
        out[key + "false_answer"] = bool(answers)
        if gated:
            st = r["gate"]
            out["delay_ms"] = None if r["delay_ms"] is None else round(r["delay_ms"], 1)
            out["cpu_ms_per_s"] = round(1000 * r["cpu_s"] / r["audio_s"], 1)
            # windows the plain VAD takes for speech, and how many of them the gate marked echo
            verdicts = r["verdicts"]
            speech = _vad_speech(new_vad, r["mic"], cfg.vad_threshold)
            n = min(speech.size, verdicts.size)
            sp = speech[:n]
            out["echo_windows"] = int(sp.sum())
            out["echo_detection"] = float(verdicts[:n][sp].mean()) if sp.any() else None
            out["possible_windows"] = st.possible
    r = run_cell(reply, user, lead_ms=lead_ms, level_db=level_db, room=room, gated=True, cfg=cfg, new_vad=new_vad)
    u0 = r["user_at"]
    first = int(np.argmax(np.abs(user) > 0.02))
    onset = u0 + first
    late = [e[1] for e in r["events"] if e[0] == "speech_started" and e[1] >= onset - 3200]
    out["onset_ms"] = None if not late else round((late[0] - onset) / 16.0)
    soft = [s for s in r["soft"] if s >= onset]
    out["soft_ms"] = None if not soft else round((soft[0] - onset) / 16.0)
    # the user's own speech windows (VAD on the clean clip, placed on the session's window grid)
    verdicts = r["verdicts"]
    clean = np.zeros(int(r["audio_s"] * RATE), np.float32)
    clean[u0 : u0 + user.size] = user[: clean.size - u0]
    us = _vad_speech(new_vad, clean, cfg.vad_threshold)
    n = min(us.size, verdicts.size)
    # the same question with no echo at all (headphones): without the gate (the detector at
    # its best), and with it (it looks for an echo first: ACQUIRE_MS of the user's speech)
    for key, gated in (("no_echo", False), ("no_echo_gated", True)):
        ideal = run_cell(reply, user, lead_ms=lead_ms, level_db=-200.0, room="dry", gated=gated, cfg=cfg,
                         new_vad=new_vad)
        late = [e[1] for e in ideal["events"] if e[0] == "speech_started" and e[1] >= onset - 3200]
        out[f"{key}_onset_ms"] = None if not late else round((late[0] - onset) / 16.0)
        soft = [s for s in ideal["soft"] if s >= onset]
        out[f"{key}_soft_ms"] = None if not soft else round((soft[0] - onset) / 16.0)
    out["user_windows"] = int(us[:n].sum())
    out["user_pass"] = float((~verdicts[:n][us[:n]]).mean()) if us[:n].any() else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 leads x 2 levels x 2 rooms")
    args = ap.parse_args()
    from app.backend.models.tiny.vad import SileroVad
    from app.config import load_deploy_config

    cfg = load_deploy_config().turn_policy
    leads, levels, rooms = (LEADS_MS, LEVELS_DB, ROOMS) if not args.quick else ((0, 1000), (-20, -6), ("dry", "wet"))
    reply, user = _reply_24k(), _user_16k()
    result = base_result("echo", "Echo gate: the assistant's own voice in the microphone", "#10 (part 5)",
                         quick=args.quick)
    cells = []
    t0 = time.perf_counter()
    for room in rooms:
        for level in levels:
            for lead in leads:
                c = evaluate(reply, user, lead, level, room, cfg, SileroVad)
                cells.append(c)
                print(f"{room:5s} {level:4d} dB lead {lead:5d} ms: echo det {c['echo_detection']}, "
                      f"false onset/soft/answer {c['false_onset']}/{c['false_soft']}/{c['false_answer']} "
                      f"(baseline {c['baseline_false_onset']}/{c['baseline_false_soft']}/{c['baseline_false_answer']}); "
                      f"user pass {c['user_pass']}, onset {c['onset_ms']} ({c['no_echo_onset_ms']}) ms, "
                      f"soft {c['soft_ms']} ({c['no_echo_soft_ms']}) ms; "
                      f"delay {c['delay_ms']} ms; {c['cpu_ms_per_s']} ms/s", flush=True)
    n = len(cells)

    def share(key: str) -> float:
        return sum(bool(c[key]) for c in cells) / n

    det = [c["echo_detection"] for c in cells if c["echo_detection"] is not None]
    passes = [c["user_pass"] for c in cells if c["user_pass"] is not None]
    result["workload"] = {
        "reply": REPLY_TEXT, "reply_voice": "Piper en_US-joe-medium (peak -3 dBFS)", "user": USER_TEXT,
        "user_voice": "espeak-ng en 160 wpm", "delta_s": DELTA_S, "release_lead_units": 1.5, "append_ms": 100,
        "barge_after_s": BARGE_AFTER_S, "noise_dbfs": NOISE_DB, "leads_ms": list(leads), "levels_db": list(levels),
        "rooms": list(rooms), "turn_policy": {"vad_threshold": cfg.vad_threshold, "min_speech_ms": cfg.min_speech_ms,
                                              "barge_in_ms": cfg.barge_in_ms,
                                              "overlap_short_ack_ms": cfg.overlap_short_ack_ms},
    }
    result["summary"] = {
        "cells": n,
        "echo_detection_mean": float(np.mean(det)) if det else None,
        "echo_detection_min": float(np.min(det)) if det else None,
        "false_onset_rate": share("false_onset"), "false_soft_rate": share("false_soft"),
        "false_answer_rate": share("false_answer"),
        "baseline_false_onset_rate": share("baseline_false_onset"),
        "baseline_false_soft_rate": share("baseline_false_soft"),
        "baseline_false_answer_rate": share("baseline_false_answer"),
        "user_pass_mean": float(np.mean(passes)) if passes else None,
        "barge_in_detected_onset_rate": sum(c["onset_ms"] is not None for c in cells) / n,
        "barge_in_detected_soft_rate": sum(c["soft_ms"] is not None for c in cells) / n,
        "soft_delay_vs_no_echo_ms_mean": float(np.mean([c["soft_ms"] - c["no_echo_soft_ms"] for c in cells
                                                        if c["soft_ms"] is not None and c["no_echo_soft_ms"] is not None])),
        "onset_delay_vs_no_echo_ms_mean": float(np.mean([c["onset_ms"] - c["no_echo_onset_ms"] for c in cells
                                                         if c["onset_ms"] is not None and c["no_echo_onset_ms"] is not None])),
        "headphones_onset_delay_ms_mean": float(np.mean([c["no_echo_gated_onset_ms"] - c["no_echo_onset_ms"]
                                                         for c in cells if c["no_echo_gated_onset_ms"] is not None
                                                         and c["no_echo_onset_ms"] is not None])),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    result["cells"] = cells
    path = write_result("echo", round_floats(result))
    print(result["summary"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
