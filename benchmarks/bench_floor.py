"""Compute floor of a spoken reply: each model call of the critical path, timed alone.

Issue #10 asks for end of user speech -> first audio delta p50 <= 400 ms on the realtime route and
page ear-to-ear p50 <= 800 ms, on the 2-core reference machine. This benchmark asks what the
``tiny`` models themselves allow, with no server, no queue, no pacing and no waiting: in one
process, after ``load_tiny_family()`` + ``warmup()``, it times every call the reply to a spoken
question needs, one after the other, on the question's own audio (``bench_duplex.py`` (a)'s four
espeak-ng questions, so the floor sits beside that route's measured latency):

* ``asr``: the Thinker's transcript of the whole utterance (``thinker.transcribe``);
* ``smart_turn``: one Smart Turn v3.2 score of it (``family.turn_scorer()``, as the session calls it);
* ``text_turn``: one score of its transcript by the text end-of-turn model (``family.text_turn_scorer()``);
* ``thinker_first_word`` / ``thinker_first_segment``: the reply prompt's prefill plus the tokens up
  to its first word / up to its settled first segment (:func:`~app.backend.pipeline.segmenter.first_segment`);
* ``talker_first_word`` / ``talker_first_segment``: the Talker on that text;
* ``code2wav_first_chunk``: Code2Wav's first push of ``codec_chunk_frames`` codec frames that yields PCM.

From them, per sample:

* ``floor_design_ms``: the design as built, every call once and back to back, no other wait: the
  reply starts at the ``speculative_silence_ms`` pause (80 ms of silence), the turn is decided at the
  first Smart Turn check (``smart_turn_checks_ms[0]`` of silence) at the earliest, the calls take turns
  on the cores (``runtime.CORES``) so their times add up:
  ``max(pause + asr, first_check) + smart_turn + text_turn + thinker_first_segment + talker_first_segment
  + code2wav_first_chunk``;
* ``floor_any_design_ms``: a bound no turn policy can beat with these models on these cores: answer
  as soon as the VAD's first silent window (32 ms) is seen, with no end-of-turn score at all, a
  one-word first segment, and nothing else on the cores:
  ``vad_window + asr + thinker_first_word + talker_first_word + code2wav_first_chunk``;
* ``floor_smart_turn_only_ms``: the same with one Smart Turn score of the turn (no text model), the
  least a policy that looks at the turn at all needs: ``floor_any_design_ms + smart_turn``.

These are floors of the realtime route (its first audio delta leaves right after Code2Wav's first
PCM). The page adds WebRTC, the browser's jitter buffer and playout on top (``bench_browser.py``).

Run on an idle machine: ``.venv/bin/python benchmarks/bench_floor.py`` (~2 min; ``--quick``: 1 round).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C
from bench_duplex import QUESTIONS

NAME = "floor"
TITLE = "Compute floor of a spoken reply: each model call of the critical path, timed alone"
TARGET_REALTIME_MS = 400.0
"""Issue #10: end of user speech -> first audio delta p50 on the realtime route."""

VAD_WINDOW_MS = 32.0
"""Silero VAD v6 window at 16 kHz: 512 samples (``app.backend.models.tiny.vad``)."""


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def _first_word(raw: str) -> str | None:
    """The reply's first word once the next one has begun (the streamed-text rule of ``first_segment``)."""
    words = raw.lstrip().split("\n", 1)[0].split()
    return words[0] + " " if len(words) >= 2 else None


def thinker_times(family: Any, text: str) -> dict[str, Any]:
    """Prefill + tokens of the reply to ``text``: ms to the first word and to the settled first segment."""
    from app.backend.pipeline.segmenter import first_segment
    from app.backend.pipeline.stages import SamplingParams, ThinkerPrompt
    from app.constants import DEFAULT_INSTRUCTIONS

    marks: dict[str, Any] = {}
    t0 = time.perf_counter()

    def on_text(raw: str) -> bool:
        if "first_word_ms" not in marks and (w := _first_word(raw)) is not None:
            marks["first_word_ms"], marks["first_word"] = _ms(t0), w
        if "first_segment_ms" not in marks and (seg := first_segment(raw)) is not None:
            marks["first_segment_ms"], marks["first_segment"] = _ms(t0), seg
        if "first_token_ms" not in marks:
            marks["first_token_ms"] = _ms(t0)
        return "first_segment_ms" not in marks  # stop once the first segment is settled

    reply = family.thinker.generate_reply(ThinkerPrompt(DEFAULT_INSTRUCTIONS, [], text),
                                          SamplingParams(temperature=0.0, max_tokens=48), on_text)
    if "first_segment_ms" not in marks:  # a reply shorter than one segment: all of it
        marks["first_segment_ms"], marks["first_segment"] = _ms(t0), reply.text
    marks.setdefault("first_word_ms", marks["first_segment_ms"])
    marks.setdefault("first_word", (reply.text.split() or [""])[0])
    return marks


def voice_times(family: Any, text: str, chunk_frames: int) -> tuple[float, float]:
    """(Talker ms, Code2Wav ms to its first PCM) for ``text``, as the pipeline pushes codec chunks."""
    t0 = time.perf_counter()
    tokens = family.talker.synthesize(text)
    talker_ms = _ms(t0)
    stream = family.code2wav.new_stream()
    t0 = time.perf_counter()
    starts = list(range(0, len(tokens), chunk_frames)) or [0]
    for j, s in enumerate(starts):
        pcm = stream.push(tokens[s : s + chunk_frames], j == len(starts) - 1)
        if pcm.size:
            break
    return talker_ms, _ms(t0)


def run(rounds: int) -> dict[str, Any]:
    """Load the family, then time ``rounds`` passes over :data:`QUESTIONS`."""
    import soundfile as sf

    from app.backend.models.tiny.family import load_tiny_family
    from app.config import load_deploy_config

    cfg = load_deploy_config()
    policy = cfg.turn_policy
    chunk_frames = cfg.connectors.codec_chunk_frames
    pause_ms, first_check_ms = float(policy.speculative_silence_ms), float(policy.smart_turn_checks_ms[0])
    family = load_tiny_family()
    if family.warmup is not None:
        family.warmup()
    turn, text_turn = family.turn_scorer(), family.text_turn_scorer()
    clips = {k: sf.read(str(C.espeak_wav(t, f"floor-{k}")), dtype="float32")[0] for k, t in QUESTIONS}
    samples: list[dict[str, Any]] = []
    for r in range(rounds):
        for key, question in QUESTIONS:
            audio = clips[key]
            t0 = time.perf_counter()
            heard = family.thinker.transcribe(audio)
            s: dict[str, Any] = {"round": r, "question": key, "speech_s": audio.size / 16_000,
                                 "transcript": heard, "asr_ms": _ms(t0)}
            t0 = time.perf_counter()
            s["smart_turn_p"] = float(turn.score(audio).result(timeout=30))
            s["smart_turn_ms"] = _ms(t0)
            t0 = time.perf_counter()
            s["text_turn_p"] = float(text_turn.score(heard).result(timeout=30))
            s["text_turn_ms"] = _ms(t0)
            th = thinker_times(family, heard)
            s.update({"thinker_first_token_ms": th["first_token_ms"], "thinker_first_word_ms": th["first_word_ms"],
                      "thinker_first_segment_ms": th["first_segment_ms"], "first_word": th["first_word"],
                      "first_segment": th["first_segment"]})
            s["talker_first_segment_ms"], s["code2wav_first_chunk_ms"] = voice_times(
                family, th["first_segment"], chunk_frames)
            s["talker_first_word_ms"], s["code2wav_first_word_chunk_ms"] = voice_times(
                family, th["first_word"], chunk_frames)
            s["floor_design_ms"] = (max(pause_ms + s["asr_ms"], first_check_ms) + s["smart_turn_ms"]
                                    + s["text_turn_ms"] + s["thinker_first_segment_ms"]
                                    + s["talker_first_segment_ms"] + s["code2wav_first_chunk_ms"])
            s["floor_any_design_ms"] = (VAD_WINDOW_MS + s["asr_ms"] + s["thinker_first_word_ms"]
                                        + s["talker_first_word_ms"] + s["code2wav_first_word_chunk_ms"])
            s["floor_smart_turn_only_ms"] = s["floor_any_design_ms"] + s["smart_turn_ms"]
            samples.append(s)
            print(f"{key:8s} asr {s['asr_ms']:4.0f} st {s['smart_turn_ms']:3.0f} tt {s['text_turn_ms']:3.0f} "
                  f"th {s['thinker_first_word_ms']:4.0f}/{s['thinker_first_segment_ms']:4.0f} "
                  f"tk {s['talker_first_segment_ms']:3.0f} c2w {s['code2wav_first_chunk_ms']:3.0f} "
                  f"-> design {s['floor_design_ms']:4.0f}, any {s['floor_any_design_ms']:4.0f} ms "
                  f"({heard!r} -> {th['first_segment']!r})", file=sys.stderr)
    turn.close()
    text_turn.close()
    parts = ("asr_ms", "smart_turn_ms", "text_turn_ms", "thinker_first_token_ms", "thinker_first_word_ms",
             "thinker_first_segment_ms", "talker_first_word_ms", "talker_first_segment_ms",
             "code2wav_first_chunk_ms", "floor_design_ms", "floor_any_design_ms", "floor_smart_turn_only_ms")
    return {"samples": samples, "summary": {p: C.summarize(s[p] for s in samples) for p in parts},
            "policy": {"speculative_silence_ms": pause_ms, "first_smart_turn_check_ms": first_check_ms,
                       "vad_window_ms": VAD_WINDOW_MS, "codec_chunk_frames": chunk_frames}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=5, help="passes over the 4 questions (default 5: N=20)")
    ap.add_argument("--quick", action="store_true", help="one round (N=4), a sanity run")
    ap.add_argument("--result-name", default=NAME)
    args = ap.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    result = C.base_result(NAME, TITLE, "#10 (latency floor)", quick=args.quick)
    t0 = time.monotonic()
    result.update(run(rounds))
    result["wall_s"] = time.monotonic() - t0
    summ = result["summary"]
    n = len(result["samples"])
    result["workload"] = (f"{n} samples: {len(QUESTIONS)} espeak-ng questions (bench_duplex.py's) x {rounds} rounds, "
                          "in one process after load_tiny_family() + warmup(), every call alone on the cores")
    result["metrics"] = [
        C.metric("floor_design_p50", "Compute floor of the design as built (pause + calls back to back), p50",
                 summ["floor_design_ms"]["p50"], "ms", "<=", TARGET_REALTIME_MS, n=n,
                 detail=f"p95 {summ['floor_design_ms']['p95']:.0f} ms; target is #10's realtime first audio"),
        C.metric("floor_any_design_p50", "Compute floor of any turn policy with these models (no score, 1-word "
                 "first segment), p50", summ["floor_any_design_ms"]["p50"], "ms", "<=", TARGET_REALTIME_MS, n=n,
                 detail=f"min {summ['floor_any_design_ms']['min']:.0f} ms"),
        C.metric("floor_smart_turn_only_p50", "Compute floor with one Smart Turn score and nothing else, p50",
                 summ["floor_smart_turn_only_ms"]["p50"], "ms", "<=", TARGET_REALTIME_MS, n=n,
                 detail=f"min {summ['floor_smart_turn_only_ms']['min']:.0f} ms"),
    ]
    path = C.write_result(args.result_name, C.round_floats(result))
    C.print_metrics(result["metrics"])
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
