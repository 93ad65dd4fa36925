"""Protocol fuzz run (issue 11 part 5): >= 10,000 hypothesis-made client events against a real server.

A server subprocess (``python -m app serve --no-ui``, ``configs/tiny.yaml`` with
``duplex_session.disconnect_grace_s: 1`` so the slots of dropped sockets come back quickly) gets
batches of 20-60 frames from :func:`tests.fuzz_protocol.fuzz`, one fresh WebSocket per batch
(half the batches end with ``session.close``, half drop the socket: fast reconnects). The frame
mix: well-formed events, events every state must refuse (unknown types, missing and wrong-typed
fields, bad base64, sample rates out of range, partial samples, non-object JSON, random binary
frames, JSON nested 100k deep), mutations of well-formed events, over-limit (4 MiB + 1..4096 B)
and large (0.1-1 MB) frames, and commits/acks/cancels/creates in whatever order they come. One
batch in 4 then asks the spoken question on the same session and, once its response exists, sends
3-12 fuzzed acks (any ``played_ms``, truncations), cancels (of it, of another id), interrupts,
commits and creates aimed at that live response. Every server frame must be strict JSON (no
``NaN``/``Infinity``).

Rules (per batch, :func:`tests.fuzz_protocol.check_batch`): every frame the server must refuse
gets an ``error`` with a stable ``code`` and the ``event_id`` it answers (null only for frames
with no readable id, and never more of those than such frames); no ``internal_error`` or unknown
code; no error for a well-formed event valid in any state; the session handles every frame (a
sentinel after the batch is answered) and stays usable (``input_audio_buffer.clear`` ->
``cleared``). After the run: every slot free, ``/health`` ok, the process alive.

An honest session (its own slot, taken before the fuzzer starts) asks the espeak-ng question
"What is the capital of France?" again and again while the fuzzer runs; each answer must have the
same transcript and audio length as the answer to the same question on the idle server.

Writes ``benchmarks/results/fuzz.json``. Usage::

    .venv/bin/python benchmarks/bench_fuzz.py                  # >= 10,000 events (~1-2 min on 2 cores)
    .venv/bin/python benchmarks/bench_fuzz.py --examples 30    # quick
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from benchmarks import common
from tests import fuzz_protocol as F


def _traceback_kinds(log: str) -> dict[str, int]:
    """``{"ExceptionType: message": count}`` of the tracebacks in a server log (their last line)."""
    kinds: dict[str, int] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("Traceback"):
            continue
        end = next((ln for ln in lines[i + 1:] if ln and not ln.startswith((" ", "\t", "Traceback"))), "?")
        kinds[end[:160]] = kinds.get(end[:160], 0) + 1
    return kinds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=300, help="hypothesis examples (batches of 20-60 frames)")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--min-events", type=int, default=10_000, help="target number of fuzzed events")
    args = p.parse_args(argv)

    result = common.base_result("fuzz", "Protocol fuzzing of /v1/realtime?duplex=1 (hypothesis)", "issue 11 part 5",
                                quick=args.examples < 200)
    result["reproduce"] = ".venv/bin/python benchmarks/bench_fuzz.py"
    result["workload"] = (f"{args.examples} hypothesis examples (seed {args.seed}), each a fresh WebSocket with "
                          "20-60 fuzzed frames, a sentinel and a usability probe; an honest session asking a "
                          "spoken question throughout")
    question = common.wav_pcm16(common.espeak_wav("What is the capital of France?", "fuzz_france", lead_s=0.5,
                                                  tail_s=1.5))
    yaml = common.write_deploy_yaml({"duplex_session": {"disconnect_grace_s": 1, "reaper_interval_s": 0.2}})
    with common.ServerProcess(deploy_config=yaml) as srv:
        ws_url = srv.base_url.replace("http://", "ws://")
        rss0 = common.process_tree(srv.pid)
        alone = asyncio.run(F.honest_question(ws_url, question))
        honest: list[F.HonestRun] = []
        admitted, stop = threading.Event(), threading.Event()

        async def ask_until_stopped() -> None:
            first = True
            while not stop.is_set():
                honest.append(await F.honest_question(ws_url, question, admitted=admitted if first else None,
                                                      delay_s=0.5))
                first = False

        t = threading.Thread(target=lambda: asyncio.run(ask_until_stopped()))
        t.start()
        admitted.wait(60)
        stats = F.FuzzStats()
        t0 = time.perf_counter()
        failure = None
        try:
            F.fuzz(ws_url, examples=args.examples, min_frames=20, max_frames=60, seed=args.seed, stats=stats,
                   shrink=False, speech_pcm16=question, live_every=4)
        except AssertionError as exc:  # the stats keep every violation; the run still reports
            failure = str(exc)[:2000]
        fuzz_s = time.perf_counter() - t0
        stop.set()
        t.join(300)
        deadline = time.monotonic() + 15
        health = {}
        while time.monotonic() < deadline:
            health = httpx.get(srv.base_url + "/health", timeout=5).json()
            if (health.get("sessions") or {}).get("active") == 0:
                break
            time.sleep(0.2)
        alive = srv.proc is not None and srv.proc.poll() is None
        rss_kib = {pid: common._status_kib(pid).get("VmRSS", 0) for pid in rss0}
        tail = srv.log_tail(400)
        server_log_errors = tail.count("Traceback")
        traceback_kinds = _traceback_kinds(tail)

    mismatched = [h for h in honest if (h.transcript, round(h.audio_ms)) != (alone.transcript, round(alone.audio_ms))
                  or h.errors]
    leaked = (health.get("sessions") or {}).get("active")
    result.update({
        "events": stats.frames,
        "batches": stats.batches,
        "events_per_s": round(stats.frames / fuzz_s, 1) if fuzz_s else None,
        "fuzz_wall_s": round(fuzz_s, 1),
        "by_kind": stats.by_kind,
        "errors_by_code": dict(sorted(stats.by_code.items(), key=lambda kv: -kv[1])),
        "capacity_refusals_retried": stats.refusals,
        "live_responses": stats.live_responses,
        "violations": stats.violations[:50],
        "failure": failure,
        "honest_alone": {"transcript": alone.transcript, "audio_ms": round(alone.audio_ms, 1)},
        "honest_during_fuzz": [{"transcript": h.transcript, "audio_ms": round(h.audio_ms, 1), "status": h.status,
                                "errors": len(h.errors)} for h in honest],
        "health_after": health,
        "server_alive": alive,
        "server_tracebacks_in_log_tail": server_log_errors,
        "server_traceback_kinds": traceback_kinds,
        "server_rss_mib_after": round(sum(rss_kib.values()) / 1024, 1),
        "batch_wall_s": common.summarize(stats.batch_wall_s),
    })
    result["metrics"] = [
        common.metric("events", "fuzzed client events", stats.frames, "", ">=", args.min_events),
        common.metric("violations", "rule violations", len(stats.violations), "", "<=", 0),
        common.metric("honest", "honest answers differing from the idle-server answer", len(mismatched), "", "<=", 0,
                      n=len(honest)),
        common.metric("slots", "slots held after the run", leaked if leaked is not None else 99, "", "<=", 0),
        common.metric("alive", "server crashed (0 = alive and healthy)",
                      0 if alive and health.get("status") == "ok" else 1, "", "<=", 0),
        common.info_metric("rate", "fuzzed events per second", result["events_per_s"], "1/s"),
    ]
    path = common.write_result("fuzz", common.round_floats(result))
    common.print_metrics(result["metrics"])
    print(f"wrote {path}")
    return 0 if all(m["pass"] is not False for m in result["metrics"]) else 1


if __name__ == "__main__":
    sys.exit(main())
