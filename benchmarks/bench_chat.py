"""Embedded-backend benchmark: chat time-to-first-audio, Talker+Code2Wav RTF, cold start, peak RSS.

Four measurements (targets from the embedded-backend issue):

(a) ``ttfa``: time to the first audio chunk of ``POST /v1/chat/completions`` with
    ``stream: true`` for a ~3 s spoken question (espeak-ng WAV as ``input_audio``), measured
    in this client from just before the request is sent to the moment the first SSE chunk
    with ``modality: audio`` and audio data has been read (httpx, loopback). N=10 sequential
    requests, after one unmeasured warm-up request (its figure is kept in the JSON).
    Target p50 <= 0.6 s (issue 10; the embedded-backend issue asked 1.0 s).
(b) ``rtf``: Talker + Code2Wav real-time factor, in-process (a child process runs
    ``load_tiny_family()`` + ``warmup``): for ~10 sentences of 2-4 s each, the time of
    ``talker.synthesize`` on each <= 28-char segment (``segment_text``, as the server does) plus
    the Code2Wav stream pushes in ``connectors.codec_chunk_frames`` chunks (final push flushes),
    divided by the seconds of 24 kHz audio produced. Target <= 0.15 (aggregate: total compute /
    total audio; per-sentence figures are in the JSON).
(c) ``cold_start``: wall time from launching ``python -m app serve`` to the first
    ``/health`` 200 (polled every 50 ms), 3 runs. The OS file cache is warm: (b) has just read
    every model file. Target <= 15 s (max of the runs).
(d) ``peak_rss``: peak RSS of the server process during (a): ``VmHWM`` reset just before
    (a) (``/proc/<pid>/clear_refs``) and read after it, cross-checked by sampling RSS every
    100 ms (psutil if installed, else ``/proc/<pid>/status``). Target <= 2.5 GB (2.5e9 bytes).

Writes ``benchmarks/results/chat.json``. Usage::

    .venv/bin/python benchmarks/bench_chat.py            # full run (~1.5 min on 2 cores)
    .venv/bin/python benchmarks/bench_chat.py --quick    # sanity run (~40 s)
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C

TARGET_TTFA_P50_S = 0.6
TARGET_RTF = 0.15
TARGET_COLD_START_S = 15.0
TARGET_PEAK_RSS_BYTES = 2.5e9

QUESTIONS = [
    ("capital", "What is the capital of France, do you know?"),
    ("weather", "What is the weather usually like in London?"),
    ("planets", "How many planets are there in our solar system?"),
    ("cooking", "How long should I boil an egg for breakfast?"),
    ("music", "Who wrote the famous piece called Moonlight Sonata?"),
]
"""Spoken questions for (a); each is ~3 s of espeak-ng speech at 160 wpm (measured into the JSON)."""

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital and largest city of France.",
    "It usually rains a little in London during the autumn.",
    "There are eight planets in our solar system today.",
    "Please remember to close the window before you leave.",
    "A soft boiled egg takes about six minutes in boiling water.",
    "Beethoven wrote the Moonlight Sonata in the year eighteen oh one.",
    "The train to the airport leaves every fifteen minutes.",
    "Thank you for calling, how can I help you this morning?",
    "Bright stars were shining above the quiet mountain village.",
]
"""Text for (b): one sentence each, 2-4 s of speech from the Piper voice (measured into the JSON)."""


# --------------------------------------------------------------------------- (b) RTF, child process
def rtf_worker(count: int) -> dict[str, Any]:
    """Runs in a child process: load the family, warm it up, time Talker + Code2Wav per sentence."""
    import numpy as np

    from app.backend.models.tiny.family import load_tiny_family
    from app.backend.pipeline.segmenter import segment_text
    from app.config import load_deploy_config

    cfg = load_deploy_config()
    step = cfg.connectors.codec_chunk_frames
    t0 = time.perf_counter()
    family = load_tiny_family()
    load_s = time.perf_counter() - t0
    warm = family.warmup() if family.warmup is not None else {}
    rate = family.capabilities.output_sample_rate_hz
    samples = []
    for text in SENTENCES[:count]:
        segments = segment_text(text)
        stream = family.code2wav.new_stream()
        talker_s = code2wav_s = 0.0
        frames = 0
        pieces = []
        for i, seg in enumerate(segments):
            t = time.perf_counter()
            tokens = family.talker.synthesize(seg)
            talker_s += time.perf_counter() - t
            frames += len(tokens)
            starts = list(range(0, len(tokens), step)) or [0]
            for j, s in enumerate(starts):
                final = i == len(segments) - 1 and j == len(starts) - 1
                t = time.perf_counter()
                pieces.append(stream.push(tokens[s : s + step], final))
                code2wav_s += time.perf_counter() - t
        audio_s = float(sum(p.size for p in pieces)) / rate
        compute_s = talker_s + code2wav_s
        samples.append({
            "text": text,
            "segments": len(segments),
            "codec_frames": frames,
            "audio_s": audio_s,
            "talker_s": talker_s,
            "code2wav_s": code2wav_s,
            "compute_s": compute_s,
            "rtf": compute_s / audio_s if audio_s else None,
        })
    return {
        "family_load_s": load_s,
        "load_times_s": dict(family.thinker.load_times_s),
        "warmup_s": warm,
        "codec_chunk_frames": step,
        "codec_frame_rate_hz": family.capabilities.codec_frame_rate_hz,
        "output_sample_rate_hz": rate,
        "samples": samples,
        "numpy": np.__version__,
    }


def run_rtf(count: int) -> dict[str, Any]:
    """(b) in a child process, so its memory and threads are gone before the server runs."""
    proc = subprocess.run([C.PYTHON, __file__, "--rtf-worker", str(count)], cwd=C.ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"rtf worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    samples = data["samples"]
    total_compute = sum(s["compute_s"] for s in samples)
    total_audio = sum(s["audio_s"] for s in samples)
    data["workload"] = {
        "sentences": len(samples),
        "audio_s_each": [round(s["audio_s"], 3) for s in samples],
        "method": "in-process: talker.synthesize per segment_text() segment + code2wav stream push in "
                  "codec_chunk_frames chunks (final push flushes); perf_counter around each call; "
                  "after load_tiny_family() + family.warmup()",
    }
    data["summary"] = {
        "rtf_aggregate": total_compute / total_audio if total_audio else None,
        "total_compute_s": total_compute,
        "total_audio_s": total_audio,
        "rtf_per_sentence": C.summarize(s["rtf"] for s in samples),
        "talker_share": sum(s["talker_s"] for s in samples) / total_compute if total_compute else None,
    }
    return data


# --------------------------------------------------------------------------- (a) TTFA
def chat_body(wav: Path) -> dict[str, Any]:
    return {
        "stream": True,
        "modalities": ["text", "audio"],
        "audio": {"format": "wav"},
        "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
            "data": base64.b64encode(wav.read_bytes()).decode("ascii"), "format": "wav"}}]}],
    }


def one_chat(client: Any, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streaming request; client-side times from just before the send."""
    out: dict[str, Any] = {"ttfa_s": None, "ttft_s": None, "first_byte_s": None, "total_s": None,
                           "audio_chunks": 0, "text": "", "x_omni": None, "error": None}
    payload = json.dumps(body).encode()
    t0 = time.perf_counter()
    with client.stream("POST", url + "/v1/chat/completions", content=payload,
                       headers={"content-type": "application/json"}) as resp:
        out["status"] = resp.status_code
        if resp.status_code != 200:
            out["error"] = resp.read().decode(errors="replace")[:500]
            return out
        for line in resp.iter_lines():
            now = time.perf_counter() - t0
            if out["first_byte_s"] is None:
                out["first_byte_s"] = now
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out["error"] = chunk["error"]
                continue
            choices = chunk.get("choices") or []
            delta = choices[0].get("delta", {}) if choices else {}
            if chunk.get("modality") == "audio" and (delta.get("audio") or {}).get("data"):
                out["audio_chunks"] += 1
                if out["ttfa_s"] is None:
                    out["ttfa_s"] = now
            elif chunk.get("modality") == "text" and delta.get("content"):
                out["text"] += delta["content"]
                if out["ttft_s"] is None:
                    out["ttft_s"] = now
            if "x_omni" in chunk:
                out["x_omni"] = chunk["x_omni"]
    out["total_s"] = time.perf_counter() - t0
    return out


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short sanity run (N=3, 3 sentences, 1 cold start)")
    p.add_argument("--n", type=int, default=None, help="TTFA requests (default 10; quick 3)")
    p.add_argument("--sentences", type=int, default=None, help="RTF sentences (default 10; quick 3)")
    p.add_argument("--cold-starts", type=int, default=None, help="cold start runs (default 3; quick 1)")
    p.add_argument("--rtf-worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rtf_worker is not None:
        print(json.dumps(rtf_worker(args.rtf_worker)))
        return 0
    n = args.n or (3 if args.quick else 10)
    n_sent = min(args.sentences or (3 if args.quick else 10), len(SENTENCES))
    n_cold = args.cold_starts or (1 if args.quick else 3)
    t_bench = time.monotonic()

    result = C.base_result("chat", "Embedded backend: chat TTFA, Talker+Code2Wav RTF, cold start, peak RSS",
                           "embedded backend", quick=args.quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_chat.py"
    notes: list[str] = []

    # ---- (b) RTF first: it also warms the OS file cache for (c)
    print(f"[chat] (b) Talker+Code2Wav RTF on {n_sent} sentences (child process) ...", flush=True)
    rtf = run_rtf(n_sent)
    print(f"[chat]     RTF aggregate {rtf['summary']['rtf_aggregate']:.4f} over "
          f"{rtf['summary']['total_audio_s']:.1f} s of audio", flush=True)

    # ---- (c) cold start
    cold: list[dict[str, Any]] = []
    for i in range(n_cold):
        srv = C.ServerProcess()
        try:
            ready_s = srv.start(timeout_s=120)
        finally:
            srv.stop()
        cold.append({"run": i + 1, "ready_s": ready_s, "command": srv.command})
        print(f"[chat] (c) cold start {i + 1}/{n_cold}: {ready_s:.2f} s", flush=True)
    cold_summary = C.summarize(c["ready_s"] for c in cold)

    # ---- (a) TTFA + (d) peak RSS
    import httpx

    wavs = []
    for key, text in QUESTIONS:
        w = C.espeak_wav(text, f"chat-{key}")
        wavs.append({"key": key, "text": text, "wav": w, "audio_s": C.pcm16_seconds(C.wav_pcm16(w))})
    srv = C.ServerProcess()
    srv.start(timeout_s=120)
    samples: list[dict[str, Any]] = []
    warmup: dict[str, Any] | None = None
    rss: dict[str, Any] = {}
    try:
        with httpx.Client(trust_env=False, timeout=httpx.Timeout(120.0)) as client:
            warmup = one_chat(client, srv.base_url, chat_body(wavs[0]["wav"]))
            hwm_reset = C.reset_peak_rss(srv.pid)
            rss_before = C.RssSampler(srv.pid).tree_rss_bytes()
            with C.RssSampler(srv.pid, interval_s=0.1) as sampler:
                for i in range(n):
                    q = wavs[i % len(wavs)]
                    r = one_chat(client, srv.base_url, chat_body(q["wav"]))
                    r.update({"i": i, "question": q["key"], "question_audio_s": q["audio_s"]})
                    samples.append(r)
                    print(f"[chat] (a) {i + 1}/{n} {q['key']}: ttfa "
                          f"{C.fmt_s(r['ttfa_s'])}, text {r['text'][:60]!r}", flush=True)
                hwm = sampler.hwm_bytes()
            rss = {
                "hwm_reset_before_a": hwm_reset,
                "vmhwm_after_a_bytes": hwm,
                "sampled_peak_bytes": sampler.peak_bytes,
                "sampled_count": len(sampler.samples),
                "sampler_source": sampler.source,
                "rss_before_a_bytes": rss_before,
                "process_tree": C.process_tree(srv.pid),
            }
    finally:
        srv.stop()
    peak = max(v for v in (rss.get("vmhwm_after_a_bytes"), rss.get("sampled_peak_bytes")) if v is not None)
    rss["peak_bytes"] = peak
    if not rss.get("hwm_reset_before_a"):
        notes.append("VmHWM could not be reset before (a): the RSS peak includes model loading and warm-up.")
    ttfa = C.summarize(s["ttfa_s"] for s in samples)
    failures = [s for s in samples if s["ttfa_s"] is None]
    if failures:
        notes.append(f"{len(failures)} of {n} requests produced no audio chunk (counted as missing, not as 0).")

    # ---- result
    result["workload"] = {
        "ttfa": {
            "n": n,
            "concurrency": 1,
            "questions": [{k: (str(v) if k == "wav" else v) for k, v in q.items()} for q in wavs],
            "input": "espeak-ng voice en, 160 wpm, 16 kHz mono WAV, sent base64 as input_audio (wav)",
            "request": {"stream": True, "modalities": ["text", "audio"], "audio": {"format": "wav"}},
            "server": srv.command,
            "deploy_config": "configs/tiny.yaml (default)",
            "warmup_requests": 1,
            "measure": "client perf_counter from just before the request is sent to the first SSE chunk "
                       "with modality=audio carrying audio data (httpx over loopback)",
        },
        "rtf": rtf["workload"],
        "cold_start": {"runs": n_cold, "poll_interval_s": 0.05, "file_cache": "warm (part (b) just loaded "
                       "every model file in another process)", "command": cold[0]["command"] if cold else None},
        "peak_rss": {"window": "the N measured requests of (a)", "target_bytes": TARGET_PEAK_RSS_BYTES},
    }
    result["ttfa"] = {"samples": samples, "warmup_request": warmup, "summary": {
        "ttfa_s": ttfa,
        "ttft_s": C.summarize(s["ttft_s"] for s in samples),
        "server_ttfp_s": C.summarize((s["x_omni"] or {}).get("ttfp_s") for s in samples),
        "server_ttft_s": C.summarize((s["x_omni"] or {}).get("ttft_s") for s in samples),
        "total_s": C.summarize(s["total_s"] for s in samples),
        "reply_audio_s": C.summarize((s["x_omni"] or {}).get("audio_duration_s") for s in samples),
    }}
    result["rtf"] = rtf
    result["cold_start"] = {"samples": cold, "summary": cold_summary}
    result["peak_rss"] = rss
    result["metrics"] = [
        C.metric("ttfa_p50", "Chat time to first audio chunk, p50", ttfa["p50"], "s", "<=", TARGET_TTFA_P50_S,
                 n=ttfa["n"], detail=f"p95 {C.fmt_s(ttfa['p95'])}, max {C.fmt_s(ttfa['max'])}"),
        C.metric("rtf", "Talker+Code2Wav real-time factor (aggregate)", rtf["summary"]["rtf_aggregate"], "",
                 "<=", TARGET_RTF, n=len(rtf["samples"]),
                 detail=f"per-sentence p50 {rtf['summary']['rtf_per_sentence']['p50']:.3f}, "
                        f"max {rtf['summary']['rtf_per_sentence']['max']:.3f}"),
        C.metric("cold_start_max", "Cold start to /health 200 (max of runs)", cold_summary["max"], "s", "<=",
                 TARGET_COLD_START_S, n=cold_summary["n"], detail=f"p50 {C.fmt_s(cold_summary['p50'])}"),
        C.metric("peak_rss", "Server peak RSS during (a)", peak / 1e9, "GB", "<=", TARGET_PEAK_RSS_BYTES / 1e9,
                 detail=f"VmHWM {rss.get('vmhwm_after_a_bytes', 0) / 2**20:.0f} MiB, sampled "
                        f"{rss.get('sampled_peak_bytes', 0) / 2**20:.0f} MiB"),
    ]
    result["notes"] = notes
    result["wall_s"] = time.monotonic() - t_bench
    result["finished_at"] = C.now_iso()
    path = C.write_result("chat", C.round_floats(result))
    print(f"[chat] wrote {path.relative_to(C.ROOT)} in {result['wall_s']:.0f} s", flush=True)
    C.print_metrics(result["metrics"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
