"""Scale-out front: admission over a pool, the all-full refusal, and the hop the front adds.

Processes on loopback (no shared GIL, as in a deployment): ``--backends`` protocol-level stand-in
vLLM-Omni servers (``python -m tests.standin_backend``, ``--slots`` sessions each; a remote
vLLM-Omni is a true external edge and these speak its protocol without a model), our server as
the front (``python -m app serve`` with ``remote.urls`` = the stand-ins), and this client
(raw ``websockets``, one session at a time unless said otherwise).

* ``admission_ms``: WebSocket connect + ``session.update`` -> ``session.created`` through the
  front, with the pool partly loaded (each sample opens one more session; the pool is emptied
  when it is full). The same measured directly against one stand-in gives ``admission_direct_ms``.
* ``refusal_ms``: with every slot of the pool held open by other clients, connect +
  ``session.update`` -> the front's ``error{resource_exhausted}`` + ``session.closed`` (target:
  <= 100 ms, checked at p95).
* ``spill_ms``: admission when every backend but the last was filled behind the front's back
  (by direct clients, as another front sharing the pool would) and the backends answer
  ``/health`` with no session count (vLLM-Omni's empty 200): the front tries them, is refused by
  each (``resource_exhausted``) and lands on the last. A second front process probing every
  50 ms forgets the refusals between samples, so every sample pays them.
* ``hop_ms``: in one admitted session, a 100 ms PCM16 ``input_audio_buffer.append`` -> the
  stand-in's ``response.output_audio.delta`` echo, through the front vs directly (two hops
  each way vs one). The front's added latency is the difference of medians (target <= 20 ms).

Writes ``benchmarks/results/scale.json``; ``benchmarks/report.py`` renders it into BENCHMARKS.md.

Usage::

    .venv/bin/python benchmarks/bench_scale.py            # --quick: few samples
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx
import numpy as np
import websockets
import yaml

from benchmarks.common import (
    PYTHON,
    ServerProcess,
    base_result,
    free_port,
    info_metric,
    metric,
    print_metrics,
    round_floats,
    summarize,
    write_result,
)

REMOTE_YAML = ROOT / "configs" / "remote.yaml"
TARGET_REFUSAL_MS = 100.0
TARGET_HOP_ADDED_P50_MS = 20.0
APPEND_MS = 100


# --------------------------------------------------------------------------- processes
class StandInProcess:
    """One ``python -m tests.standin_backend`` on a free port."""

    def __init__(self, name: str, slots: int, *, report_sessions: bool = True) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.args = [PYTHON, "-m", "tests.standin_backend", "--port", str(self.port), "--max-sessions", str(slots),
                     "--name", name, "--model", f"model-{name}"]
        if not report_sessions:
            self.args.append("--no-report-sessions")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> StandInProcess:
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                httpx.get(self.base_url + "/health", timeout=1, trust_env=False)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"stand-in on {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


def front_yaml(backends: list[StandInProcess], slots: int, probe_s: float) -> Path:
    """A deploy YAML: ``configs/remote.yaml`` with ``remote.urls`` = the stand-ins."""
    doc = {"base_config": str(REMOTE_YAML),
           "duplex_session": {"max_sessions": 2 * slots},  # our cap above theirs: their word decides
           "remote": {"url": None, "urls": [b.base_url for b in backends], "health_interval_s": probe_s}}
    path = Path(tempfile.mkdtemp(prefix="omni-bench-scale-")) / "front.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- client
def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/realtime?duplex=1&autostart=0"


async def open_session(base: str) -> tuple[Any, float, dict[str, Any]]:
    """Connect + session.update; returns (socket, seconds to the decisive event, that event)."""
    t0 = time.perf_counter()
    ws = await websockets.connect(ws_url(base), max_size=64 << 20, compression=None, proxy=None)
    await ws.send(json.dumps({"type": "session.update", "session": {}}))
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if ev["type"] in ("session.created", "error"):
            took = time.perf_counter() - t0
            if ev["type"] == "error":  # the refusal ends with session.closed, or the close frame (1013)
                try:
                    closed = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert closed["type"] == "session.closed", closed
                except websockets.exceptions.ConnectionClosed:
                    pass
                took = time.perf_counter() - t0
            return ws, took, ev


async def close_session(ws: Any) -> None:
    try:
        await ws.send(json.dumps({"type": "session.close"}))
        while json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] not in ("session.closed", "session.expired"):
            pass
    except (websockets.exceptions.ConnectionClosed, TimeoutError):
        pass
    await ws.close()


async def hop_samples(base: str, n: int) -> list[float]:
    """n append -> echoed audio delta round trips in one session, ms."""
    ws, _, ev = await open_session(base)
    assert ev["type"] == "session.created", ev
    pcm = (np.sin(np.arange(16 * APPEND_MS) / 5) * 6000).astype("<i2").tobytes()
    audio = base64.b64encode(pcm).decode()
    out = []
    end_ms = 0
    for _ in range(n):
        end_ms += APPEND_MS
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio, "format": "pcm16",
                                  "sample_rate_hz": 16000, "duration_ms": APPEND_MS, "audio_end_ms": end_ms}))
        while json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] != "response.output_audio.delta":
            pass
        out.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.01)
    await close_session(ws)
    return out


async def wait_front_sees(front: str, pred, timeout_s: float = 10.0) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=5) as http:
        deadline = time.monotonic() + timeout_s
        while True:
            h = (await http.get(front + "/health")).json()
            if pred(h):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"front never reached the state: {h}")
            await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- parts
async def measure(front: str, backends: list[StandInProcess], slots: int, n: int) -> dict[str, Any]:
    total = slots * len(backends)
    res: dict[str, Any] = {}

    def idle(h: dict[str, Any]) -> bool:
        return all(b["sessions"]["ours"] == 0 and not b["sessions"]["reported_active"] for b in h["backends"])

    # admission, growing load: open sessions one by one up to the pool's size, then empty it
    admit: list[float] = []
    placed: dict[str, int] = {}
    while len(admit) < n:
        await wait_front_sees(front, idle)
        held = []
        for _ in range(min(total, n - len(admit))):
            ws, took, ev = await open_session(front)
            assert ev["type"] == "session.created", ev
            admit.append(took * 1000)
            name = ev["session"]["remote_session_id"].split("-")[1]
            placed[name] = placed.get(name, 0) + 1
            held.append(ws)
        await asyncio.gather(*(close_session(w) for w in held))
    res["admission_ms"] = summarize(admit)
    res["placements"] = placed
    direct: list[float] = []
    for _ in range(n):
        ws, took, ev = await open_session(backends[0].base_url)
        assert ev["type"] == "session.created", ev
        direct.append(took * 1000)
        await close_session(ws)
    res["admission_direct_ms"] = summarize(direct)

    # all full: every slot held by other clients, then refusals
    await wait_front_sees(front, idle)
    held = [(await open_session(front))[0] for _ in range(total)]
    refusals: list[float] = []
    codes: dict[str, int] = {}
    for _ in range(n):
        ws, took, ev = await open_session(front)
        code = (ev.get("error") or {}).get("code", ev["type"])
        codes[code] = codes.get(code, 0) + 1
        refusals.append(took * 1000)
        await ws.close()
    await asyncio.gather(*(close_session(w) for w in held))
    res["refusal_ms"] = summarize(refusals)
    res["refusal_codes"] = codes

    # the hop: the same append/echo loop through the front and directly
    await wait_front_sees(front, idle)
    via, straight = [], []
    for _ in range(2):  # interleaved halves so drift hits both alike
        via += await hop_samples(front, n // 2)
        straight += await hop_samples(backends[0].base_url, n // 2)
    res["hop_front_ms"] = summarize(via)
    res["hop_direct_ms"] = summarize(straight)
    return res


async def measure_spill(front: str, backends: list[StandInProcess], slots: int, n: int) -> dict[str, Any]:
    fillers = [(await open_session(b.base_url))[0] for b in backends[:-1] for _ in range(slots)]
    out: list[float] = []
    landed: dict[str, int] = {}
    try:
        for _ in range(n):
            await asyncio.sleep(0.15)  # > 2 probes: the front has forgotten the last refusals
            ws, took, ev = await open_session(front)
            assert ev["type"] == "session.created", ev
            name = ev["session"]["remote_session_id"].split("-")[1]
            landed[name] = landed.get(name, 0) + 1
            out.append(took * 1000)
            await close_session(ws)
    finally:
        await asyncio.gather(*(close_session(w) for w in fillers))
    async with httpx.AsyncClient(trust_env=False, timeout=5) as http:
        text = (await http.get(front + "/metrics")).text
    refused = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("omni_backend_admissions_total{") and 'outcome="refused"' in line)
    return {"spill_ms": summarize(out), "spill_landed_on": landed, "spill_refusals_each": len(backends) - 1,
            "spill_refusals_seen_by_front": refused, "spill_refusals_expected": n * (len(backends) - 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", type=int, default=4)
    ap.add_argument("--slots", type=int, default=4, help="sessions each stand-in admits")
    ap.add_argument("-n", type=int, default=60, help="samples per measurement")
    ap.add_argument("--quick", action="store_true", help="n=10")
    args = ap.parse_args()
    n = 10 if args.quick else args.n
    result = base_result("scale", "Scale-out front over a pool of backends (stand-ins)", "issue 14", quick=args.quick)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_scale.py"
    result["workload"] = (f"{args.backends} stand-in backends x {args.slots} slots (separate processes), our server "
                          f"as the front (separate process), one raw-websockets client; N={n} per measurement")
    backends = [StandInProcess(f"s{i}", args.slots).start() for i in range(args.backends)]
    quiet = [StandInProcess(f"q{i}", args.slots, report_sessions=False).start() for i in range(args.backends)]
    front = ServerProcess(deploy_config=front_yaml(backends, args.slots, probe_s=0.25))
    spill_front = ServerProcess(deploy_config=front_yaml(quiet, args.slots, probe_s=0.05))
    try:
        front.start(60)
        spill_front.start(60)
        res = asyncio.run(measure(front.base_url, backends, args.slots, n))
        res.update(asyncio.run(measure_spill(spill_front.base_url, quiet, args.slots, max(10, n // 2))))
    finally:
        front.stop()
        spill_front.stop()
        for b in backends + quiet:
            b.stop()
    added = None
    if res["hop_front_ms"]["p50"] is not None and res["hop_direct_ms"]["p50"] is not None:
        added = res["hop_front_ms"]["p50"] - res["hop_direct_ms"]["p50"]
    result.update(res)
    result["front_command"] = front.command
    result["metrics"] = [
        info_metric("admission_p50", "admission through the front, p50", res["admission_ms"]["p50"], "ms", n=n,
                    detail=f"direct to one backend: p50 {res['admission_direct_ms']['p50']:.1f} ms"),
        info_metric("admission_p95", "admission through the front, p95", res["admission_ms"]["p95"], "ms", n=n),
        metric("refusal_p95", "all-full refusal (connect -> error + session.closed), p95", res["refusal_ms"]["p95"],
               "ms", "<=", TARGET_REFUSAL_MS, n=n, detail=f"max {res['refusal_ms']['max']:.1f} ms; codes {res['refusal_codes']}"),
        metric("spill_p95", f"admission after {res['spill_refusals_each']} refusals (spill-over), p95",
               res["spill_ms"]["p95"], "ms", "<=", TARGET_REFUSAL_MS, n=res["spill_ms"]["n"],
               detail=f"refusals the front met: {res['spill_refusals_seen_by_front']:.0f} of "
                      f"{res['spill_refusals_expected']} expected"),
        metric("hop_added_p50", "latency the front adds per event (append -> echo, front p50 - direct p50)", added,
               "ms", "<=", TARGET_HOP_ADDED_P50_MS, n=res["hop_front_ms"]["n"],
               detail=f"front p50 {res['hop_front_ms']['p50']:.2f} ms, direct p50 {res['hop_direct_ms']['p50']:.2f} ms"),
    ]
    result["notes"] = [
        ("Stand-in backends answer at once (no model), so these numbers are the front's own cost: "
        "placement, the extra WebSocket hop, decode/re-stamp/re-encode of each event."),
        "A real vLLM-Omni backend adds its own admission time; the front's share stays the difference to direct.",
    ]
    path = write_result("scale", round_floats(result))
    print_metrics(result["metrics"])
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
