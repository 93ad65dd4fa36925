"""``benchmarks/bench_peers.py``'s pure parts: rows, the missing-Pipecat-venv stop, ratios, barge-in counting,
the markdown table; no browser, no server, no Pipecat venv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_peers as bp
from benchmarks.common import summarize
from benchmarks.peers import setup_venv


def _row(e2e: list[float], barge: list[float] | None = None) -> dict:
    return {"ear_to_ear": {"summary_ms": summarize(e2e)}, "barge_in": {"summary_ms": summarize(barge or []),
                                                                       "samples": [], "counted": len(barge or [])}}


def test_importing_the_benchmark_imports_no_pipecat():
    assert "pipecat" not in sys.modules


def test_rows_keep_block_order_and_reject_unknown_keys():
    assert bp.parse_rows("echo, app-mic,echo") == ["app-mic", "echo"]
    assert bp.parse_rows(",".join(bp.ROWS)) == list(bp.ROWS)
    with pytest.raises(ValueError, match="--rows"):
        bp.parse_rows("app-mic,livekit")
    with pytest.raises(ValueError):
        bp.parse_rows(" , ")


def test_a_pipecat_row_without_its_venv_stops_with_the_setup_command(tmp_path):
    venv = tmp_path / "pipecat-venv"
    assert not setup_venv.is_ready(venv)
    with pytest.raises(SystemExit) as exc:
        bp.require_pipecat(["app-mic", "pipecat"], venv)
    msg = str(exc.value)
    assert setup_venv.SETUP_COMMAND in msg and str(venv) in msg and setup_venv.PIPECAT_VERSION in msg
    bp.require_pipecat(["app-mic", "fastrtc", "echo"], venv)  # no Pipecat row: nothing needed


def test_the_venv_is_ready_only_with_its_interpreter_and_marker(tmp_path):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert not setup_venv.is_ready(venv)  # an interrupted set-up
    (venv / setup_venv.MARKER.name).write_text('{"freeze": ["pipecat-ai==1.14.0", "numpy==2.4.6"]}')
    assert setup_venv.is_ready(venv)
    assert setup_venv.installed_versions(venv) == {"pipecat-ai": "1.14.0", "numpy": "2.4.6"}
    assert setup_venv.installed_versions(tmp_path / "none") == {}


def test_requirements_pin_pipecat_and_the_app_venvs_versions():
    reqs = setup_venv.pinned_requirements({"numpy": "2.4.6", "faster-whisper": "1.2.1", "piper-tts": None})
    assert reqs[0] == f"pipecat-ai[silero,webrtc,piper]=={setup_venv.PIPECAT_VERSION}"
    assert "numpy==2.4.6" in reqs and "faster-whisper==1.2.1" in reqs
    assert not any(r.startswith("piper-tts") for r in reqs)  # not in the app's venv: left out, never unpinned
    assert all("==" in r for r in reqs)


def test_ratio_is_app_over_peer_and_none_without_samples():
    assert bp.ratio(500.0, 1000.0) == 0.5
    assert bp.ratio(None, 1000.0) is None and bp.ratio(500.0, None) is None and bp.ratio(1.0, 0.0) is None
    rows = {"app-mic": _row([800, 900, 1000], [300, 400]), "fastrtc": _row([1600, 1800, 2000], [3000]),
            "echo": _row([100, 110])}
    (r,) = bp.ratios(rows)  # one app row, one peer present; the echo is no peer
    assert (r["app"], r["peer"], r["p50"]) == ("app-mic", "fastrtc", 0.5)
    assert r["p95"] == pytest.approx(990 / 1980, abs=1e-3)
    assert r["barge_p50"] == pytest.approx(350 / 3000, abs=1e-3)
    rows["pipecat"] = _row([])
    assert [x["p50"] for x in bp.ratios(rows)] == [0.5, None]


def test_peer_cut_is_mapped_to_the_page_clock_and_must_come_before_the_silence_is_held():
    offset = 100.0  # monotonic = page_ms / 1000 + 100
    onset, silence = 5000.0, 5900.0
    events = [{"t": 104.0, "kind": "clear_queue"},  # the question's own pause (before the onset)
              {"t": 105.7, "kind": "clear_queue"}, {"t": 106.5, "kind": "clear_queue"}]
    cut = bp.peer_cut(events, offset, onset, silence)
    assert cut["cut_after_onset_ms"] == pytest.approx(700.0)
    assert cut["cut_kind"] == "clear_queue" and cut["cut_made_silence"]
    # in a pause of the reply (the silence began 300 ms before the cut): the cut made it last
    in_pause = bp.peer_cut([{"t": 106.2, "kind": "interruption"}], offset, onset, silence)
    assert in_pause["cut_after_onset_ms"] == pytest.approx(1200.0) and in_pause["cut_made_silence"]
    late = bp.peer_cut([{"t": 106.6, "kind": "interruption"}], offset, onset, silence)  # the reply had ended
    assert late["cut_after_onset_ms"] == pytest.approx(1600.0) and not late["cut_made_silence"]
    assert bp.peer_cut(events[:1], offset, onset, silence) == {"cut_after_onset_ms": None, "cut_kind": None,
                                                               "cut_made_silence": False}


def test_barge_ins_count_only_when_audible_and_cut():
    app_ok = {"barge_in_ms": 150.0, "assistant_audible_at_onset": True, "server_flush_after_onset_ms": 700.0,
              "page_mute_after_onset_ms": 60.0, "interruption_answered": True}
    app_self = {**app_ok, "barge_in_ms": 90.0, "server_flush_after_onset_ms": None}
    peer_ok = {"barge_in_ms": 2600.0, "assistant_audible_at_onset": True, "cut_made_silence": True,
               "cut_after_onset_ms": 2550.0}
    peer_quiet = {**peer_ok, "assistant_audible_at_onset": False}
    assert bp.barge_counts("app-mic", app_ok) and not bp.barge_counts("app-mic", app_self)
    assert bp.barge_counts("fastrtc", peer_ok) and not bp.barge_counts("pipecat", peer_quiet)
    s = bp.barge_summary("fastrtc", [peer_ok, peer_quiet, {**peer_ok, "cut_made_silence": False}])
    assert s["counted"] == 1 and s["summary_ms"]["p50"] == 2600.0
    assert s["excluded_not_speaking"] == 1 and s["excluded_reply_ended_by_itself"] == 1
    assert s["cut_summary_ms"]["n"] == 1
    a = bp.barge_summary("app-camera", [app_ok, app_self])
    assert a["counted"] == 1 and a["server_flush_summary_ms"]["p50"] == 700.0


def test_render_markdown_shows_every_row_and_the_ratios():
    rows = {"app-mic": {**_row([800, 900, 1000], [300]), "label": bp.ROWS["app-mic"], "server_cores": 1.2},
            "fastrtc": {**_row([1600, 1800, 2000]), "label": bp.ROWS["fastrtc"], "server_cores": None},
            "echo": {**_row([100, 110]), "label": bp.ROWS["echo"]}}
    rows["app-mic"]["barge_in"]["samples"] = [{}]
    result = {"rows": rows, "ratios": bp.ratios(rows), "quick": True,
              "workload": {"n": 3, "block": 5, "barge_n": 1, "browser": "/usr/bin/chromium 140.0 headless"},
              "versions_peers": {"fastrtc": "0.0.34", "pipecat-venv:pipecat-ai": "1.14.0"}}
    md = bp.render_markdown(result)
    assert "| this app's page, mic only | 3 | 900 | 990 | 800 | 1000 | 300 / 300 (1 / 1) | 1.20 |" in md
    assert "(onset -> echo)" in md and "0.50x" in md and "`--quick`" in md and "pipecat-ai 1.14.0" in md
    assert bp.render_markdown({}) == "_No rows measured yet._\n"


def test_report_py_can_load_the_renderer():
    """``report.py`` execs the script under a name ``sys.modules`` lacks (a dataclass there would fail)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_bench_peers_test", ROOT / "benchmarks" / "bench_peers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert callable(mod.render_markdown)
