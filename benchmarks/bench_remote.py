"""Overhead our server adds in front of a remote backend (``model_family: vllm_omni``).

Server B = our server with the real ``tiny`` models (the "remote": same protocol as vLLM-Omni).
Server A = our server with ``configs/remote.yaml`` pointed at B. B, A and the client are three
processes on loopback (as in a deployment: no shared GIL); Linux ``CLOCK_MONOTONIC``
(``time.monotonic``) is one clock for all three, and B appends the moment each event leaves its
session to a stamp file. The same spoken question is sent N times
directly to B and N times through A (interleaved, so model-speed drift hits both alike):

* ``ttfa_ms``: first append sent -> first ``response.output_audio.delta`` received (the input is
  paced at real time; stream-origin because the model may answer before the commit). Dominated
  by the model: the A - B difference of medians is the user-visible cost, but noisy.
* ``gap_ms``: gap at the client between consecutive server events of one unit's burst (events
  B sent < 2 ms apart: ``response.listen`` + ``session.unit_metrics``, a response's
  ``created`` ... ``speak`` / audio / transcript run ...).
* ``hop_ms`` (and ``audio_hop_ms``, audio deltas only): for every event, client receive time - the moment B's writer took it from B's
  session outbox. Direct: one hop (B -> client). Through A: B -> A -> decode, re-stamp,
  re-encode -> client. ``hop_ms`` A minus direct is the latency A adds per event — the target
  is <= 20 ms at p50.

Writes ``benchmarks/results/remote.json`` and prints a markdown table.

Usage::

    .venv/bin/python benchmarks/bench_remote.py --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import app.api.realtime as realtime_api
from app.client.duplex import DuplexClient
from app.config import load_deploy_config
from tests.conftest import espeak_wav
from tests.integration.rt_helpers import silence, wav_pcm16
from tests.integration.test_remote import build_front_app, front_config
from tests.live_server import free_port

RESULTS = ROOT / "benchmarks" / "results" / "remote.json"
METRICS = {
    "ttfa_ms": "time to first audio (first append sent -> first audio delta), ms",
    "hop_ms": "per-event delivery, B's writer -> client (all events), ms",
    "audio_hop_ms": "per-event delivery, audio deltas only, ms",
    "gap_ms": "gap between consecutive events of one unit's burst, ms",
}
TARGET_ADDED_P50_MS = 20.0

_STAMPS: Any = None  # open file in the B process: "<session id> <monotonic s>" per event
_orig_write = realtime_api._write


async def _timed_write(ws: Any, session: Any) -> None:
    """B's realtime writer, stamping the moment each event is taken from the session's outbox."""
    inner = session.next_event

    async def next_event() -> Any:
        ev = await inner()
        _STAMPS.write(f"{session.id} {time.monotonic():.6f}\n")
        return ev

    session.next_event = next_event
    await _orig_write(ws, session)


def serve_b(port: int, stamp_file: Path) -> None:
    """Process B: the tiny server, stamping event departures."""
    import uvicorn

    from app.backend.models.tiny.family import load_tiny_family
    from app.server import build_app

    global _STAMPS
    _STAMPS = open(stamp_file, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    realtime_api._write = _timed_write
    app = build_app(load_deploy_config(), family=load_tiny_family(), with_ui=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=64 << 20)


def serve_a(port: int, remote_url: str) -> None:
    """Process A: the front end (configs/remote.yaml) pointed at B."""
    import uvicorn

    uvicorn.run(build_front_app(front_config(remote_url)), host="127.0.0.1", port=port, log_level="warning",
                ws_max_size=64 << 20)


def b_sent(stamp_file: Path, session_id: str) -> list[float]:
    """B's departure times of one session's events."""
    out = []
    for line in stamp_file.read_text().splitlines():
        sid, _, t = line.partition(" ")
        if sid == session_id:
            out.append(float(t))
    return out


def spawn(args: list[str], base_url: str, timeout_s: float = 180.0) -> subprocess.Popen:
    """Start one server process (this script with ``args``) and wait for ``/health`` to answer."""
    import httpx

    proc = subprocess.Popen([sys.executable, __file__, *args], cwd=ROOT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server {args} exited with {proc.returncode}")
        try:
            if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise RuntimeError(f"server {args} did not become healthy")


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) or None for no data."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": pct(values, 50), "p95": pct(values, 95),
            "mean": statistics.fmean(values) if values else None}


async def one_run(url: str, pcm: bytes, stamp_file: Path) -> dict[str, Any]:
    """One session: stream the question paced like a microphone, commit, wait for the answer."""
    async with DuplexClient(url, handshake_timeout_s=30) as c:
        remote_id = c.session.get("remote_session_id") or c.session_id
        await c.stream_pcm(pcm, chunk_ms=100, realtime=True)
        await c.commit()
        await c.wait_for("response.done", timeout_s=120)
        events = list(c.collector.events)
        stream_start = c.appends[0].sent_at_s
    await asyncio.sleep(0.3)
    sent = b_sent(stamp_file, remote_id)
    # B's events and the client's are 1:1 in order (up to B's session.closed, which A re-emits)
    pairs = list(zip(events, sent))[: len(sent) - 1]
    hops = [(e["_client_received_at_s"] - t) * 1000 for e, t in pairs]
    audio_hops = [(e["_client_received_at_s"] - t) * 1000 for e, t in pairs if e["type"] == "response.output_audio.delta"]
    gaps = []  # consecutive events that left B in one burst (< 2 ms apart): their gap at the client
    for (e0, t0), (e1, t1) in itertools.pairwise(pairs):
        if t1 - t0 < 0.002:
            gaps.append((e1["_client_received_at_s"] - e0["_client_received_at_s"]) * 1000)
    first_audio = next(e["_client_received_at_s"] for e in events if e["type"] == "response.output_audio.delta")
    return {"ttfa_ms": (first_audio - stream_start) * 1000, "hop_ms": hops, "audio_hop_ms": audio_hops,
            "gap_ms": gaps, "events": len(events)}


def machine_info() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    versions = {}
    for pkg in ("fastapi", "uvicorn", "websockets", "httpx", "numpy", "pydantic"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "git_commit": commit, "versions": versions}


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


async def bench(runs: int, a_url: str, b_url: str, pcm: bytes, stamp_file: Path) -> dict[str, Any]:
    data: dict[str, dict[str, list[float]]] = {k: {m: [] for m in METRICS} for k in ("direct", "front")}
    await one_run(b_url, pcm, stamp_file)  # warm-up (first-call model costs)
    await one_run(a_url, pcm, stamp_file)
    for i in range(runs):
        for kind, url in (("direct", b_url), ("front", a_url)) if i % 2 == 0 else (("front", a_url), ("direct", b_url)):
            r = await one_run(url, pcm, stamp_file)
            data[kind]["ttfa_ms"].append(r["ttfa_ms"])
            for m in ("hop_ms", "audio_hop_ms", "gap_ms"):
                data[kind][m].extend(r[m])
            print(f"run {i + 1}/{runs} {kind:6s} ttfa {r['ttfa_ms']:.0f} ms, {r['events']} events, "
                  f"hop p50 {fmt(pct(r['hop_ms'], 50))} ms", flush=True)
    return {kind: {m: summary(v) for m, v in d.items()} for kind, d in data.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="sessions per path (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--serve-b", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-a", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--stamp-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--remote-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_b:
        return serve_b(args.serve_b, args.stamp_file)
    if args.serve_a:
        return serve_a(args.serve_a, args.remote_url)

    work = ROOT / "artifacts" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    stamp_file = work / "remote_b_stamps.txt"
    stamp_file.write_text("")
    wav = espeak_wav("What is the capital of France?", work / "france.wav", lead_s=0.5, tail_s=1.0)
    pcm = wav_pcm16(wav) + silence(0.2)
    b_port, a_port = free_port(), free_port()
    b_url, a_url = f"http://127.0.0.1:{b_port}", f"http://127.0.0.1:{a_port}"
    procs = [spawn(["--serve-b", str(b_port), "--stamp-file", str(stamp_file)], b_url)]
    try:
        procs.append(spawn(["--serve-a", str(a_port), "--remote-url", b_url], a_url))
        stats = asyncio.run(bench(args.runs, a_url, b_url, pcm, stamp_file))
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)

    added = {m: {q: (None if stats["front"][m][q] is None or stats["direct"][m][q] is None
                     else stats["front"][m][q] - stats["direct"][m][q]) for q in ("p50", "p95")}
             for m in METRICS}
    result = {
        "benchmark": "remote_front_overhead",
        "runs_per_path": args.runs,
        "input": "espeak 'What is the capital of France?' (0.5 s lead, 1.2 s tail) 16 kHz, 100 ms appends at real time, then commit",
        "setup": "B (tiny), A (front, configs/remote.yaml -> B) and the client: three processes on loopback",
        "machine": machine_info(),
        "direct": stats["direct"],
        "front": stats["front"],
        "added_ms": added,
        "target": {"added_hop_p50_ms_max": TARGET_ADDED_P50_MS,
                   "met": added["hop_ms"]["p50"] is not None and added["hop_ms"]["p50"] <= TARGET_ADDED_P50_MS},
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    m = result["machine"]
    print(f"\n### Remote front-end overhead ({args.runs} runs per path)\n")
    print(f"Machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}; "
          + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + f"; commit {m['git_commit']}\n")
    print("| metric | direct to B p50 | direct p95 | through A p50 | through A p95 | added p50 | added p95 |")
    print("|---|---|---|---|---|---|---|")
    for key, label in METRICS.items():
        d, f = stats["direct"][key], stats["front"][key]
        print(f"| {label} | {fmt(d['p50'])} | {fmt(d['p95'])} | {fmt(f['p50'])} | {fmt(f['p95'])} | "
              f"{fmt(added[key]['p50'])} | {fmt(added[key]['p95'])} |")
    print(f"\nTarget: <= {TARGET_ADDED_P50_MS:.0f} ms added per event at p50 -> "
          f"{'met' if result['target']['met'] else 'NOT met'}. Wrote {args.out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
