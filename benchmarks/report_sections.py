"""Renderers of one result file each, for ``report.py``: formatting helpers, the machine line, and the
full tables of ``bench_chat.py`` / ``bench_duplex.py`` / ``bench_turns.py`` / ``bench_browser.py`` results, plus
a generic renderer (a ``metrics`` list, a ``target`` block, every summary mapping with a ``p50`` key).

Every function returns Markdown lines; none reads files.
"""

from __future__ import annotations

import json
from typing import Any

SKIP_KEYS = {"machine", "versions", "samples", "sessions", "units", "replies", "inputs"}


# --------------------------------------------------------------------------- formatting
def verdict(ok: Any) -> str:
    return {True: "**PASS**", False: "**MISS**"}.get(ok, "n/a")


def num(value: Any, unit: str = "", digits: int | None = None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        if digits is None:
            digits = (1 if unit == "ms" and isinstance(value, float) and 0 < abs(value) < 10 else 0) \
                if unit == "ms" or isinstance(value, int) else 1 if unit == "%" else (3 if abs(value) < 100 else 1)
        text = f"{value:,.{digits}f}"
        return f"{text} {unit}".strip()
    return str(value)


def esc(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return out + [""]


def summary_row(label: str, s: dict[str, Any] | None, unit: str) -> list[Any]:
    s = s or {}
    return [label, s.get("n", 0), *(num(s.get(k), unit) for k in ("p50", "p95", "mean", "min", "max"))]


SUMMARY_HEADERS = ["", "n", "p50", "p95", "mean", "min", "max"]


def machine_line(data: dict[str, Any]) -> list[str]:
    m = data.get("machine") or {}
    v = data.get("versions") or {}
    lines = []
    parts = [m.get("cpu_model") or m.get("cpu")]
    cores = m.get("cores_usable") or m.get("cores") or m.get("cores_logical")
    parts.append(f"{cores} cores" if cores else None)
    parts.append(f"{m['ram_total_gib']} GiB RAM" if m.get("ram_total_gib") else None)
    parts.append(m.get("os") or m.get("platform"))
    load = m.get("loadavg_1_5_15_at_start")
    text = ", ".join(p for p in parts if p)
    if load:
        text += f"; load average at start {load[0]} / {load[1]} / {load[2]}"
    if text:
        lines.append(f"- Machine: {text}")
    py = v.get("python") or m.get("python")
    pkgs = v.get("packages") or m.get("versions") or {}
    commit = v.get("git_commit") or m.get("git_commit")
    ver = [f"Python {py}" if py else None, ", ".join(f"{k} {val}" for k, val in pkgs.items() if val) or None,
           (f"commit `{str(commit)[:12]}`" + (" (uncommitted changes)" if v.get("git_dirty") else ""))
           if commit else None]
    if any(ver):
        lines.append("- Versions: " + "; ".join(x for x in ver if x))
    when = data.get("finished_at") or data.get("written_at") or data.get("started_at")
    if when:
        lines.append(f"- Run: {when}" + (f", {data['wall_s']:.0f} s wall" if data.get("wall_s") else ""))
    return lines


def metrics_table(metrics: list[dict[str, Any]]) -> list[str]:
    rows = []
    for m in metrics:
        unit = m.get("unit") or ""
        rows.append([m["name"], num(m.get("value"), unit), m.get("target", ""), verdict(m.get("pass")),
                     m.get("n") if m.get("n") is not None else "", m.get("detail", "")])
    return table(["Metric", "Measured", "Target", "Result", "N", "Detail"], rows)


def find_summaries(obj: Any, path: str = "", depth: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """Every mapping with a ``p50`` key, with its dotted path (skips bulky raw-sample keys)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if depth > 6:
        return found
    if isinstance(obj, dict):
        if "p50" in obj:
            return [(path, obj)]
        for key, value in obj.items():
            if key in SKIP_KEYS:
                continue
            found += find_summaries(value, f"{path}.{key}" if path else str(key), depth + 1)
    return found


# --------------------------------------------------------------------------- sections
def section_chat(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    t = data.get("ttfa") or {}
    w = (data.get("workload") or {}).get("ttfa") or {}
    out += ["#### (a) Time to first audio chunk (streaming chat completions)", ""]
    out.append(f"{w.get('n')} sequential requests (concurrency 1) after {w.get('warmup_requests', 0)} unmeasured "
               f"warm-up request; {w.get('measure', '')}. Input: {w.get('input', '')}.")
    out.append("")
    s = t.get("summary") or {}
    out += table(SUMMARY_HEADERS, [
        summary_row("client TTFA (s)", s.get("ttfa_s"), "s"),
        summary_row("client first text (s)", s.get("ttft_s"), "s"),
        summary_row("server ttft_s (x_omni)", s.get("server_ttft_s"), "s"),
        summary_row("server ttfp_s (x_omni)", s.get("server_ttfp_s"), "s"),
        summary_row("request total (s)", s.get("total_s"), "s"),
        summary_row("reply audio (s)", s.get("reply_audio_s"), "s"),
    ])
    rows = [[x.get("i"), x.get("question"), num(x.get("question_audio_s"), "s"), num(x.get("ttfa_s"), "s"),
             num((x.get("x_omni") or {}).get("ttft_s"), "s"), num((x.get("x_omni") or {}).get("audio_duration_s"), "s"),
             (x.get("x_omni") or {}).get("user_text", ""), x.get("text", "")] for x in t.get("samples", [])]
    out += table(["#", "question", "question audio", "TTFA", "server ttft", "reply audio", "ASR", "reply"], rows)
    r = data.get("rtf") or {}
    rs = r.get("summary") or {}
    out += ["#### (b) Talker + Code2Wav real-time factor (in-process)", ""]
    out.append(f"{(r.get('workload') or {}).get('method', '')}. Codec chunk {r.get('codec_chunk_frames')} frames at "
               f"{num(r.get('codec_frame_rate_hz'), 'Hz', 2)}. Aggregate RTF {num(rs.get('rtf_aggregate'), digits=4)} "
               f"= {num(rs.get('total_compute_s'), 's')} compute / {num(rs.get('total_audio_s'), 's')} audio; Talker "
               f"share of compute {num((rs.get('talker_share') or 0) * 100, '%', 0)}.")
    out.append("")
    rows = [[x["text"], x["segments"], num(x["audio_s"], "s"), num(x["talker_s"], "s"), num(x["code2wav_s"], "s"),
             num(x["rtf"], digits=3)] for x in r.get("samples", [])]
    out += table(["sentence", "segments", "audio", "talker", "code2wav", "RTF"], rows)
    c = data.get("cold_start") or {}
    cw = (data.get("workload") or {}).get("cold_start") or {}
    out += ["#### (c) Cold start to ready", ""]
    out.append(f"Launch of `{cw.get('command', 'python -m app serve')}` to the first `/health` 200, polled every "
               f"{cw.get('poll_interval_s', '?')} s. OS file cache: {cw.get('file_cache', '?')}.")
    out.append("")
    out += table(["run", "ready"], [[x["run"], num(x["ready_s"], "s")] for x in c.get("samples", [])])
    p = data.get("peak_rss") or {}
    out += ["#### (d) Peak RSS of the server during (a)", ""]
    reset = "reset just before (a)" if p.get("hwm_reset_before_a") else "NOT reset (includes loading)"
    out.append(f"Kernel VmHWM ({reset}) after (a): {num((p.get('vmhwm_after_a_bytes') or 0) / 2**20, 'MiB', 0)}; "
               f"sampled peak ({p.get('sampler_source')}, {p.get('sampled_count')} samples every 100 ms): "
               f"{num((p.get('sampled_peak_bytes') or 0) / 2**20, 'MiB', 0)}; RSS before (a): "
               f"{num((p.get('rss_before_a_bytes') or 0) / 2**20, 'MiB', 0)}. Target 2.5 GB = 2.5e9 bytes.")
    out.append("")
    return out


def section_duplex(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    lat = data.get("latency") or {}
    if lat:
        out += ["#### (a) Speech end -> first audio delta", ""]
        out.append("Fresh session per sample; 0.5 s silence + question + 3 s silence in 100 ms appends at real time, "
                   "no commit. Origin: send time of the append reaching the question's last speech sample "
                   "(energy detector). Columns after `latency` are receive times relative to the same origin.")
        out.append("")
        rows = []
        for unit, b in lat.items():
            s = b.get("summary") or {}
            name = f"{unit.split('-')[0]} ms units" + (f" (baseline {b.get('git')})" if "-baseline" in unit else "")
            rows.append(summary_row(f"{name}: latency", s.get("latency_ms"), "ms"))
            rows.append(summary_row(f"{name}: VAD speech_stopped", s.get("speech_stopped_rx_ms"), "ms"))
            rows.append(summary_row(f"{name}: response.created", s.get("response_created_rx_ms"), "ms"))
            rows.append(summary_row(f"{name}: append slack", s.get("append_slack_ms"), "ms"))
        out += table(SUMMARY_HEADERS, rows)
        rows = []
        for unit, b in lat.items():
            for x in b.get("samples", []):
                rows.append([unit, x.get("i"), x.get("question"), num(x.get("latency_ms"), "ms"),
                             num(x.get("speech_stopped_rx_ms"), "ms"), num(x.get("transcript_rx_ms"), "ms"),
                             num(x.get("response_created_rx_ms"), "ms"), x.get("asr", ""), x.get("reply", "")])
        out += table(["unit", "#", "question", "latency", "VAD end", "ASR done", "created", "ASR", "reply (first part)"],
                     rows)
    conc = data.get("concurrency")
    if conc:
        out += ["#### (b) Concurrent sessions", ""]
        out.append(f"Each session streams {conc.get('session_seconds')} s of audio at real time, a question every "
                   f"{conc.get('question_every_s')} s (schedules staggered). Criterion: {conc.get('criterion')}. "
                   f"K order: {conc.get('order')}. Server overrides: `{json.dumps(conc.get('deploy_overrides'))}`.")
        out.append("")
        out.append("The unit decision is taken synchronously when the append closing a unit is processed, so the "
                   "unit_metrics lag measures the server's event loop, not model throughput; reply latency under "
                   "load (speech end -> first audio delta, same definition as (a)) is shown for that.")
        out.append("")
        rows = [[lv["k"], verdict(lv["all_real_time"]), num(lv["lag_ms"]["p50"], "ms"), num(lv["lag_ms"]["max"], "ms"),
                 num(lv.get("max_drift_ms"), "ms"), num(lv["reply_latency_ms"]["p50"], "ms"),
                 num(lv["reply_latency_ms"]["max"], "ms"), f"{lv['unanswered']}/{lv['questions']}"]
                for lv in conc.get("levels", [])]
        out += table(["K", "all real time", "lag p50", "lag max", "max drift", "reply p50", "reply max",
                      "unanswered"], rows)
    for key, label in (("barge_in", "default overlap policy"), ("barge_in_hard", "overlap_policy barge_in_on_speech")):
        if data.get(key):
            out += barge_in_block(data[key], label)
    return out


def barge_in_block(bi: dict[str, Any], label: str) -> list[str]:
    out: list[str] = []
    s = bi.get("summary") or {}
    out += [f"#### (c) Barge-in, {label}", ""]
    out.append("Question, then right after the first audio delta a second ~3 s utterance. Latency: send time of "
               "the append carrying the utterance's first speech sample -> `response.done` of the interrupted "
               f"response (or `response.listen` with its id). Session overlap policy: {bi.get('overlap_policy')}. "
               f"Server budget: {s.get('server_budget', '')}. `policy wait` = onset -> deciding unit boundary on "
               "the media clock; `lag` = send time of the append closing that unit -> end event; `phase` = where "
               "in its unit the first audio arrived (0 = right after a boundary); `onset slack` = media time from the "
               "onset to the end of the append carrying it (the origin is that append's send time).")
    out.append("")
    out += table(SUMMARY_HEADERS, [
        summary_row("latency", s.get("latency_ms"), "ms"),
        summary_row("policy wait", s.get("policy_wait_ms"), "ms"),
        summary_row("decision lag", s.get("decision_lag_ms"), "ms"),
        summary_row("first-audio phase", s.get("first_audio_unit_phase_ms"), "ms"),
    ])
    rows = [[x.get("i"), x.get("question"), num(x.get("latency_ms"), "ms"), "yes" if x.get("interrupted") else "no",
             x.get("end_event", ""), f"{x.get('done_status')}/{x.get('done_reason')}",
             num(x.get("policy_wait_ms"), "ms"), num(x.get("decision_lag_ms"), "ms"),
             num(x.get("first_audio_unit_phase_ms"), "ms"), num(x.get("onset_append_slack_ms"), "ms"),
             x.get("reply", ""), x.get("error", "")] for x in bi.get("samples", [])]
    out += table(["#", "question", "latency", "interrupted", "end event", "done status/reason", "policy wait",
                  "lag", "phase", "onset slack", "reply (as sent)", "error"], rows)
    return out


def _rate_cell(x: dict[str, Any] | None) -> str:
    if not x or not x.get("n"):
        return "n/a"
    lo, hi = x.get("ci95") or (None, None)
    ci = f" [{lo * 100:.0f}-{hi * 100:.0f}]" if lo is not None and hi is not None else ""
    return f"{x['k']}/{x['n']} = {x['rate'] * 100:.0f} %{ci}"


def _pct_cell(s: dict[str, Any] | None) -> str:
    if not s or not s.get("n"):
        return "n/a"
    lo, hi = s.get("p50_ci95") or (None, None)
    ci = f" [{num(lo, 'ms')} - {num(hi, 'ms') if hi is not None else 'n/a'}]" if lo is not None else ""
    return f"p50 {num(s.get('p50'), 'ms')}{ci}, p95 {num(s.get('p95'), 'ms')} (n={s['n']})"


TURN_ROWS = [
    ("turn_end_latency_ms", "turn-end latency", _pct_cell),
    ("premature_takeover", "premature takeover (dialogues)", _rate_cell),
    ("missed_turn", "missed turns", _rate_cell),
    ("nonspeech_reply", "replies to non-speech", _rate_cell),
    ("backchannel_false_stop", "backchannel false stops (valid)", _rate_cell),
    ("backchannel_answered", "backchannel answered (informative)", _rate_cell),
    ("barge_in_success", "barge-in success (valid)", _rate_cell),
    ("barge_in_stop_latency_ms", "barge-in stop latency", _pct_cell),
    ("both_answered_in_order", "both questions answered, in order", _rate_cell),
]


def section_turns(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    ds = data.get("dataset") or {}
    st = data.get("settings") or {}
    rows = [r for r in data.get("detectors") or [] if isinstance(r, dict)]
    labels = [r["label"] for r in rows]
    out.append(f"Dialogues generated by `{ds.get('generator', 'benchmarks/turns_dataset.py')}` (split "
               f"`{ds.get('split')}`, seed {ds.get('seed')}, {ds.get('per_category')} per category, generator "
               f"v{ds.get('gen_version')}, content sha256 `{str(ds.get('content_sha256'))[:12]}`), each in a fresh "
               f"session: {st.get('append_ms')} ms appends, pace `{st.get('pace')}` (overlap categories: "
               f"{st.get('overlap_categories_pace')}), reply window {st.get('reply_window_s')} s. Rates: k/n with "
               "Wilson 95 % intervals in brackets; latency p50 with its order-statistic 95 % interval. Exact "
               "definitions: the `definitions` block of `results/turns.json` and the docstring of "
               "`benchmarks/bench_turns.py`.")
    out.append("")
    cats = ds.get("categories_detail") or {}
    if cats:
        out += table(["category", "n", "how it is made"], [[c, v.get("n"), v.get("how", "")] for c, v in cats.items()])
    if rows:
        out += ["#### Per category, per detector", ""]
        body = []
        order = list(cats) or sorted({c for r in rows for c in ((r.get("summary") or {}).get("per_category") or {})})
        for cat in [*order, "overall"]:
            for key, name, cell in TURN_ROWS:
                vals = []
                for r in rows:
                    summ = r.get("summary") or {}
                    s = summ.get("overall") if cat == "overall" else (summ.get("per_category") or {}).get(cat)
                    vals.append((s or {}).get(key))
                if not any(v and v.get("n") for v in vals):
                    continue
                body.append([cat, name, *(cell(v) for v in vals)])
            for key, prefix in (("premature_takeover_by_pause", "premature, longest pause"),
                                ("nonspeech_reply_by_kind", "replies to non-speech:")):
                sub = [(((r.get("summary") or {}).get("per_category") or {}).get(cat) or {}).get(key) or {}
                       for r in rows]
                names = list(dict.fromkeys(k for x in sub for k in x))  # insertion order (bins: short -> long)
                for b in names:
                    if any((x.get(b) or {}).get("n") for x in sub):
                        body.append([cat, f"{prefix} {b}", *(_rate_cell(x.get(b)) for x in sub)])
        out += table(["category", "metric", *labels], body)
        out += ["#### Detector rows", ""]
        out += table(["label", "detector", "deploy overrides", "server", "pace", "finished", "commit", "load at start",
                      "failed", "error"],
                     [[r["label"], r.get("detector") or "(none)", json.dumps(r.get("deploy_overrides")),
                       r.get("server", ""), r.get("pace"), r.get("finished_at"), str(r.get("git_commit") or "")[:12],
                       r.get("loadavg_1_5_15_at_start"), len(r.get("failed") or []), r.get("error") or ""]
                      for r in rows])
    return out


def section_browser(data: dict[str, Any]) -> list[str]:
    """``bench_browser.py``: one row per server configuration, then the per-stage breakdown."""
    rows: dict[str, Any] = data["rows"]
    keys = list(rows)
    out: list[str] = []
    setup = data.get("setup") or {}
    imp = setup.get("impairment")
    if imp:
        out += [(f"- Link: {imp.get('how')}; each way {num(imp.get('delay_ms'), 'ms')} + uniform 0..."
                 f"{num(imp.get('jitter_ms_uniform'), 'ms')} per packet, {100 * (imp.get('loss_each_way') or 0):.0f} % "
                 f"loss; packets relayed {imp.get('packets')}"), ""]
    described = ", ".join(f"`{k}` ({rows[k]['detector']} detector, {rows[k]['tree']})" for k in keys)
    out += [(f"- Rows: {described}; {setup.get('n')} questions per row in blocks of {setup.get('block')}, "
             "alternating."), ""]

    def ms(v: Any) -> str:
        return num(v, "ms")

    head = ["row", "N", "ear-to-ear p50", "p95", "min", "max", "missing", "from the older speech end p50 / p95",
            "barge-in p50 / p95 (N)",
            "page mute p95", "concealed in replies", "jitter buffer p50", "handler dry gaps", "server cores"]
    body = []
    for k in keys:
        r = rows[k]
        e, b, g = r["ear_to_ear"]["summary_ms"], r["barge_in"]["summary_ms"], r["gaps"]
        mute = r["barge_in"]["page_mute_summary_ms"]
        conc = (f"{g['concealed_ms_total']:.0f} ms of {g['reply_audio_ms_total'] / 1000:.1f} s "
                f"({g['concealment_events_total']:.0f} events, {g['replies_with_concealment']}/{g['replies']} replies)")
        old = r["ear_to_ear"].get("rms_end_summary_ms") or {}
        body.append([k, e["n"], ms(e["p50"]), ms(e["p95"]), ms(e["min"]), ms(e["max"]), r["ear_to_ear"]["missing"],
                     f"{ms(old['p50'])} / {ms(old['p95'])}" if old.get("n") else "-",
                     f"{ms(b['p50'])} / {ms(b['p95'])} ({b['n']})" if b["n"] else "-", ms(mute["p95"]) if mute["n"] else "-",
                     conc, ms(g["jitter_buffer_ms"]["p50"]),
                     f"{g['server_dry_gaps_total']} ({ms(g['server_dry_gap_ms_total'])})",
                     num(r.get("server_cores"), digits=2) if r.get("server_cores") is not None else "-"])
    out += table(head, body)
    out += ["#### Where the time goes (p50 / p95 per stage, ms; the stages add up to ear-to-ear)", ""]
    stage_rows = [[st["label"], *(f"{num(rows[k]['stages_ms'][st['key']]['p50'], digits=0)} / "
                                   f"{num(rows[k]['stages_ms'][st['key']]['p95'], digits=0)}" for k in keys)]
                  for st in data.get("stages", [])]
    stage_rows.append(["**ear-to-ear**", *(f"{num(rows[k]['ear_to_ear']['summary_ms']['p50'], digits=0)} / "
                                            f"{num(rows[k]['ear_to_ear']['summary_ms']['p95'], digits=0)}" for k in keys)])
    out += table(["stage", *keys], stage_rows)
    first = rows[keys[0]]
    out += [("Pipeline marks relative to `speech_stopped` (p50 ms; negative = done before the turn ended, "
             "speculatively), and details:"), ""]
    prow = [[v["label"], *(num(rows[k]["pipeline_from_speech_stopped_ms"][m]["p50"], digits=0) for k in keys)]
            for m, v in first["pipeline_from_speech_stopped_ms"].items()]
    labels = {"page_first_packet_after_sent": "first RTP packet in the page after FastRTC's send (idle stream only)",
              "page_audible_after_first_packet": "first audible sample after that packet",
              "vad_end_sample_arrival": "the VAD's speech-end sample reached the handler (from page speech end)",
              "fastrtc_queue_at_first_emit": "frames in FastRTC's queue at a reply's first emit"}
    prow += [[labels.get(m, m), *(num(rows[k]["extra_ms"][m]["p50"], digits=0) for k in keys)]
             for m in first["extra_ms"]]
    out += table(["mark", *keys], prow)
    return out


def section_generic(data: dict[str, Any]) -> list[str]:
    out: list[str] = []
    tgt = data.get("target")
    if isinstance(tgt, dict):
        rows = [[k, num(v) if not isinstance(v, bool) else str(v).lower()] for k, v in tgt.items() if k != "met"]
        out.append(f"Target: {', '.join(f'`{r[0]}` = {r[1]}' for r in rows)} -> {verdict(tgt.get('met'))}")
        out.append("")
    for key in ("input", "setup", "workload"):
        if isinstance(data.get(key), str):
            out.append(f"- {key.capitalize()}: {data[key]}")
    if out and out[-1] != "":
        out.append("")
    sums = find_summaries({k: v for k, v in data.items() if k not in ("metrics",)})
    if sums:
        rows = [[path, s.get("n", ""), *(num(s.get(k)) for k in ("p50", "p95", "mean", "min", "max"))]
                for path, s in sums]
        out += table(["summary", "n", "p50", "p95", "mean", "min", "max"], rows)
    return out
