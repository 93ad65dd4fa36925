"""Sections of ``BENCHMARKS.md`` for the hardening runs: ``fuzz.json`` (bench_fuzz.py) and ``soak*.json``
(bench_soak.py). Used by ``report.py``; each function returns Markdown lines."""

from __future__ import annotations

from typing import Any


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out + [""]


def _n(v: Any, digits: int = 0) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def section_fuzz(d: dict[str, Any]) -> list[str]:
    """Workload, frame mix, error codes, the honest session, the server after the run."""
    run = (f"- {_n(d.get('events'))} events in {_n(d.get('batches'))} batches, {_n(d.get('fuzz_wall_s'), 1)} s "
           f"({_n(d.get('events_per_s'), 1)} events/s); {_n(d.get('capacity_refusals_retried'))} reconnects refused "
           "with `resource_exhausted` while dropped sockets' slots waited out the 1 s grace (retried); each batch also "
           "sends one sentinel (answered with `native_text_append_unsupported`) and one `input_audio_buffer.clear` "
           f"probe; {_n(d.get('live_responses'))} batches also fuzzed a live response (kinds `live*`)")
    out = [f"- Workload: {d.get('workload', '')}", run, ""]
    kinds = d.get("by_kind") or {}
    out += _table(["frame kind", "frames"], [[k, _n(v)] for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])])
    codes = d.get("errors_by_code") or {}
    out += _table(["error code", "errors"], [[f"`{k}`", _n(v)] for k, v in codes.items()])
    alone = d.get("honest_alone") or {}
    during = d.get("honest_during_fuzz") or []
    same = sum(1 for h in during if (h.get("transcript"), round(h.get("audio_ms") or 0))
               == (alone.get("transcript"), round(alone.get("audio_ms") or 0)) and not h.get("errors"))
    honest = (f"- Honest session: alone \"{alone.get('transcript')}\" ({_n(alone.get('audio_ms'))} ms of audio); "
              f"during the fuzz {same}/{len(during)} answers identical (transcript and audio length), "
              f"{sum(h.get('errors', 0) for h in during)} errors")
    health = d.get("health_after") or {}
    after = (f"- After the run: `/health` {health.get('status')}, slots held "
             f"{(health.get('sessions') or {}).get('active')}, server alive {d.get('server_alive')}, server RSS "
             f"{_n(d.get('server_rss_mib_after'), 1)} MiB")
    out += [honest, after, ""]
    if d.get("violations"):
        out += ["Violations (first 50):", ""] + [f"- {v}" for v in d["violations"]] + [""]
    return out


def section_soak(d: dict[str, Any]) -> list[str]:
    """Workload, RSS (warm, end, peak), then one row per session."""
    m = d.get("rss") or {}
    rss = (f"- RSS ({d.get('rss_source')}, {_n(m.get('samples'))} samples): warm {_n(m.get('warm_mib'), 1)} MiB, "
           f"end {_n(m.get('end_mib'), 1)} MiB ({_n(m.get('end_vs_warm_pct'), 2)} %), peak {_n(m.get('peak_mib'), 1)} "
           f"MiB at {_n(m.get('peak_at_s'))} s ({_n(m.get('peak_vs_warm_pct'), 2)} %)")
    lat = d.get("all_reply_latency_ms") or {}
    reply = (f"- Reply latency (speech end -> first audio, all questions): p50 {_n(lat.get('p50'))} ms, "
             f"p95 {_n(lat.get('p95'))} ms")
    out = [f"- Workload: {d.get('workload', '')}", rss, reply, ""]
    rows = []
    for s in d.get("sessions") or []:
        lag = s.get("lag_ms") or {}
        rows.append([s.get("session"), _n(s.get("media_s")),
                     f"{_n(s.get('units_expected'))} / {_n(s.get('units_missing'))}", _n(lag.get("p50")), _n(lag.get("p95")), _n(lag.get("max")),
                     f"{_n(s.get('early_ms'))} -> {_n(s.get('late_ms'))} ({_n(s.get('drift_ms'))})",
                     f"{_n(s.get('questions'))} / {_n(s.get('unanswered'))}",
                     _n((s.get("reply_latency_ms") or {}).get("p50")), len(s.get("errors") or []),
                     s.get("error") or ("ended early" if s.get("ended_early") else "")])
    out += _table(["session", "media s", "units / missing", "lag p50 ms", "lag p95 ms", "lag max ms",
                   "lag early -> late ms (drift)", "questions / unanswered", "reply p50 ms", "errors", "failure"],
                  rows)
    return out
